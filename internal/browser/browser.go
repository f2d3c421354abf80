// Package browser is the test kit's real browser: Debian's chromium,
// headless, driven over the DevTools protocol (chromedp), for the tests of
// what buyers' browsers do with the pages and answers the gateway serves
// (the sale page, CORS).
//
// A test starts one browser with Start; the browser is killed and waited
// for, with every process it forked, when the test ends. It opens tabs
// (NewTab), each a page with its own bounded actions: navigate, wait for an
// element or a text, click, read text and attributes, reload, set the
// viewport, take a screenshot, evaluate a script, and the problems the page
// ran into (console errors, uncaught exceptions, failed requests). Separate
// buyers are separate browser contexts (NewContext): their cookies and
// localStorage are their own, like two people's browsers; more tabs of one
// buyer come from Tab.NewTab.
//
// The browser loads nothing from outside: background networking, component
// updates, sync, default apps, extensions, pings and the like are off, and
// every host name but localhost resolves to nothing, so that a page can
// reach only what the test serves on loopback.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path is Debian's chromium, which deploy/local/chromium.sh installs (make
// tools; make test depends on it).
const Path = "/usr/bin/chromium"

// Bounds. Lifetime is the most a browser lives, whatever its test does: a
// test that outlives it fails on its next action, and the process is gone.
// StartTimeout bounds the start (process, pipe, first tab), ActionTimeout
// each action of a tab, waits included. Generous: the machine running the
// tests has two cores shared with other test packages and the race
// detector.
const (
	Lifetime      = 10 * time.Minute
	StartTimeout  = 60 * time.Second
	ActionTimeout = 20 * time.Second
	stopTimeout   = 10 * time.Second
)

// flags are chromium's command line on top of chromedp's defaults
// (headless, no first run, no background networking, no sync, no default
// apps, no extensions, no breakpad, no phishing detection, no safe browsing
// updates): what else would reach outside on its own, and the sandbox,
// which needs a user namespace that a root test process in a container
// does not have.
var flags = []chromedp.ExecAllocatorOption{
	chromedp.NoSandbox,
	chromedp.Flag("disable-component-update", true),
	chromedp.Flag("disable-domain-reliability", true),
	chromedp.Flag("disable-component-extensions-with-background-pages", true),
	chromedp.Flag("no-pings", true),
	chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,OptimizationHints,"+
		"MediaRouter,DialMediaRouteProvider,AutofillServerCommunication,"+
		"CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions"),
	// Every host but loopback's resolves to nothing (the rules apply to IP
	// literals too): what slipped past the flags above fails without
	// leaving the machine.
	chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"),
	chromedp.Flag("lang", "en-US"),
}

// Browser is one headless chromium of a test. Its tabs belong to that test
// or to its subtests (NewTab's t), each used from its own test's
// goroutine; tabs of parallel subtests may run at once.
type Browser struct {
	t       testing.TB
	ctx     context.Context // the browser's own context: its first tab
	dir     string          // the browser's own: its profile, config and cache
	pid     int
	started time.Duration

	stopOnce sync.Once
	stopFns  []func() // in order: the browser, its allocator, its lifetime
}

// Start starts a headless chromium for t and returns once it answers. It
// fails t, naming make tools, when chromium is not installed. The browser
// is stopped (Stop) when t ends.
func Start(t testing.TB) *Browser {
	t.Helper()
	if _, err := os.Stat(Path); err != nil {
		t.Fatalf("no chromium (%v): run `make tools` (deploy/local/chromium.sh install; make test runs it)", err)
	}
	// A folder of the browser's own for its profile and for what chromium
	// keeps under the user's config and cache folders (its crash handler's
	// database, dconf): nothing written outside it, and every process of
	// this browser, the crash handlers chromium detaches included, names it
	// on its command line, which is how Stop finds them.
	dir, err := os.MkdirTemp("", "flashgate-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	b := &Browser{t: t, dir: dir}
	life, endLife := context.WithTimeout(context.Background(), Lifetime)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], flags...)
	opts = append(opts, chromedp.ExecPath(Path),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.Env("XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_CACHE_HOME="+filepath.Join(dir, "cache")))
	actx, stopAlloc := chromedp.NewExecAllocator(life, opts...)
	bctx, stopBrowser := chromedp.NewContext(actx,
		chromedp.WithErrorf(func(format string, args ...any) { t.Logf("chromium: "+format, args...) }))
	b.ctx, b.stopFns = bctx, []func(){stopBrowser, stopAlloc, endLife}
	t.Cleanup(b.Stop)

	// The first run starts the process and binds it to bctx; it must not
	// carry a deadline of its own (that would end the browser with it), so
	// the start is bounded by ending the browser's lifetime if it lasts.
	begin := time.Now()
	tooLong := time.AfterFunc(StartTimeout, endLife)
	err = chromedp.Do(bctx)
	tooLong.Stop()
	if err != nil {
		b.Stop()
		t.Fatalf("start %s: %v", Path, err)
	}
	b.started = time.Since(begin)
	if p := chromedp.FromContext(bctx).Browser.Process(); p != nil {
		b.pid = p.Pid
	}
	return b
}

// Stop kills chromium and waits for it, then kills what it left (the
// processes it forked die with it; its crash handlers, which it detaches,
// do not at once) and waits until none is left, then removes its folder.
// Safe to call twice; Start's cleanup calls it.
func (b *Browser) Stop() {
	b.stopOnce.Do(func() {
		for _, stop := range b.stopFns {
			stop() // chromedp's: kills the main process and waits for it and for its goroutines
		}
		if left := killAll(b.dir, stopTimeout); len(left) > 0 {
			b.t.Errorf("chromium's processes %v still alive %v after Stop", left, stopTimeout)
			return // the folder stays: they may still write there
		}
		if err := os.RemoveAll(b.dir); err != nil {
			b.t.Errorf("remove chromium's folder: %v", err)
		}
	})
}

// Pid is the process id of chromium's main process.
func (b *Browser) Pid() int { return b.pid }

// StartTime is how long Start took, from the process's start to its first
// tab answering (for the page tests' budgets).
func (b *Browser) StartTime() time.Duration { return b.started }

// NewTab opens a tab for t (the test or subtest whose goroutine uses it)
// in the browser's default context: every tab opened so shares cookies and
// localStorage. The tab is closed when t ends, which fails t on the
// problems of its pages that nobody took (Tab.Problems).
func (b *Browser) NewTab(t testing.TB) *Tab {
	t.Helper()
	return b.open(t, b.ctx)
}

// NewContext opens a tab for t in a new browser context (an incognito-like
// profile): what its pages store (cookies, localStorage) is seen by no
// other context. One context per buyer; more tabs of it with Tab.NewTab.
// The context is disposed of when t ends.
func (b *Browser) NewContext(t testing.TB) *Tab {
	t.Helper()
	return b.open(t, b.ctx, chromedp.WithNewBrowserContext())
}

// open creates a tab from parent and attaches to it, with the problem
// listener in place before the tab's first event.
func (b *Browser) open(t testing.TB, parent context.Context, opts ...chromedp.ContextOption) *Tab {
	t.Helper()
	tab := &Tab{b: b, t: t}
	opts = append(opts, chromedp.WithListener(tab.problems.listen))
	ctx, closeTab := chromedp.NewContext(parent, opts...)
	tab.ctx = ctx
	// Closing a tab after its test lets the browser dispose of its context
	// before the browser itself stops (Start's cleanup runs after this);
	// the problems are checked first.
	t.Cleanup(closeTab)
	t.Cleanup(tab.checkProblems)
	// As for the browser: the tab's target lives as long as the context of
	// its first run, so the open is bounded by closing it if it lasts.
	tooLong := time.AfterFunc(ActionTimeout, closeTab)
	err := chromedp.Do(ctx)
	tooLong.Stop()
	if err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return tab
}

// errText shortens what chromedp returns for a timed-out action.
func errText(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("not done within %v", ActionTimeout)
	}
	return strings.TrimSpace(err.Error())
}
