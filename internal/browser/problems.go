package browser

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
)

// Kinds of Problem.
const (
	// Console is a console.error call of the page.
	Console = "console"
	// Exception is an uncaught exception or an unhandled promise rejection.
	Exception = "exception"
	// Log is an error of the browser's own log about the page: a resource
	// answered 4xx or 5xx, a request refused by CORS, a blocked script.
	Log = "log"
	// Request is a request that did not complete: a network error, a
	// request blocked, or a response refused by CORS (Text then names the
	// CORS error). One the page's own navigation cancelled is not a problem.
	Request = "request"
)

// Problem is something a page ran into that a buyer's browser would show
// in its console: the tests of a page fail on it unless they expect it.
type Problem struct {
	Kind string // Console, Exception, Log or Request
	Text string
	URL  string // the script, resource or request concerned, when known
}

func (p Problem) String() string {
	if p.URL == "" {
		return p.Kind + ": " + p.Text
	}
	return p.Kind + ": " + p.Text + " (" + p.URL + ")"
}

// Bounds of what a tab keeps: a page in a loop of errors must not grow the
// test's memory without end.
const (
	maxProblems = 200
	maxPending  = 1000 // requests in flight whose URL a failure would name
)

// problems collects a tab's problems from its DevTools events. listen runs
// on chromedp's reading goroutine for the tab; the test reads under mu.
type problems struct {
	mu      sync.Mutex
	list    []Problem
	dropped int
	pending map[network.RequestID]string
}

func (ps *problems) add(p Problem) {
	if len(ps.list) >= maxProblems {
		ps.dropped++
		return
	}
	ps.list = append(ps.list, p)
}

func (ps *problems) listen(ev any) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			p := Problem{Kind: Console, Text: argsText(ev.Args)}
			if st := ev.StackTrace; st != nil && len(st.CallFrames) > 0 {
				p.URL = fmt.Sprintf("%s:%d", st.CallFrames[0].URL, st.CallFrames[0].LineNumber+1)
			}
			ps.add(p)
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil {
			desc, _, _ := strings.Cut(objectText(d.Exception), "\n    at ")
			text += " " + desc
		}
		p := Problem{Kind: Exception, Text: strings.TrimSpace(text)}
		if d.URL != "" {
			p.URL = fmt.Sprintf("%s:%d", d.URL, d.LineNumber+1)
		}
		ps.add(p)
	case *log.EventEntryAdded:
		if e := ev.Entry; e.Level == log.EntryLevelError {
			ps.add(Problem{Kind: Log, Text: e.Text, URL: e.URL})
		}
	case *network.EventRequestWillBeSent:
		if ps.pending == nil {
			ps.pending = make(map[network.RequestID]string)
		}
		if len(ps.pending) < maxPending {
			ps.pending[ev.RequestID] = ev.Request.URL
		}
	case *network.EventLoadingFinished:
		delete(ps.pending, ev.RequestID)
	case *network.EventLoadingFailed:
		url := ps.pending[ev.RequestID]
		delete(ps.pending, ev.RequestID)
		if ev.Canceled {
			return
		}
		text := ev.ErrorText
		if ev.BlockedReason != "" {
			text += " (blocked: " + string(ev.BlockedReason) + ")"
		}
		if c := ev.CorsErrorStatus; c != nil {
			text += " (CORS: " + string(c.CorsError)
			if c.FailedParameter != "" {
				text += " " + c.FailedParameter
			}
			text += ")"
		}
		ps.add(Problem{Kind: Request, Text: text, URL: url})
	}
}

// take returns the problems so far and forgets them.
func (ps *problems) take() ([]Problem, int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	list, dropped := ps.list, ps.dropped
	ps.list, ps.dropped = nil, 0
	return list, dropped
}

// argsText is a console call's arguments as the console shows them, near
// enough: strings as they are, other values by their description.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		parts = append(parts, objectText(a))
	}
	return strings.Join(parts, " ")
}

func objectText(o *runtime.RemoteObject) string {
	if o.Type == runtime.RemoteObjectTypeString {
		var s string
		if json.Unmarshal(o.Value, &s) == nil {
			return s
		}
	}
	switch {
	case o.Description != "":
		return o.Description
	case o.UnserializableValue != "":
		return string(o.UnserializableValue)
	case len(o.Value) > 0:
		return string(o.Value)
	}
	return string(o.Type)
}

// Problems returns the problems the page ran into since the tab opened or
// the last call, and forgets them: a test that provokes one takes it, and
// checks it. The problems nobody took fail the test when it ends.
func (tab *Tab) Problems() []Problem {
	list, dropped := tab.problems.take()
	if dropped > 0 {
		list = append(list, Problem{Kind: Log, Text: fmt.Sprintf("and %d more problems, not kept", dropped)})
	}
	return list
}

// checkProblems fails the test with every problem nobody took (run when
// the test ends, before the tab closes).
func (tab *Tab) checkProblems() {
	for _, p := range tab.Problems() {
		tab.t.Errorf("the page ran into a problem nobody expected: %s", p)
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
