package browser_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flashgate/flashgate/internal/browser"
)

// TestContextsHaveTheirOwnStorage: what a page stores in one browser
// context is seen by another tab of that context, and by no other context.
func TestContextsHaveTheirOwnStorage(t *testing.T) {
	srv := site(t)
	b := browser.Start(t)

	alice := b.NewContext(t)
	if code := alice.Navigate(srv.URL + "/?buyer=alice"); code != 200 {
		t.Fatalf("page answered %d, want 200", code)
	}
	alice.WaitText("#buyer", "buyer alice")

	bob := b.NewContext(t)
	bob.Navigate(srv.URL + "/")
	bob.WaitText("#buyer", "buyer none")
	bob.Navigate(srv.URL + "/?buyer=bob")
	bob.WaitText("#buyer", "buyer bob")

	// Another tab of alice's context reads alice's storage, not bob's.
	alice2 := alice.NewTab()
	alice2.Navigate(srv.URL + "/")
	alice2.WaitText("#buyer", "buyer alice")

	for _, c := range []struct {
		name string
		tab  *browser.Tab
		want string
	}{{"alice", alice, "alice"}, {"alice's second tab", alice2, "alice"}, {"bob", bob, "bob"}} {
		if got := browser.Eval[string](c.tab, `localStorage.getItem('buyer')`); got != c.want {
			t.Errorf("%s: localStorage buyer %q, want %q", c.name, got, c.want)
		}
	}
}

// TestReloadKeepsStorage: a reload reloads the page (its script runs again
// from scratch) and keeps what the page stored.
func TestReloadKeepsStorage(t *testing.T) {
	srv := site(t)
	b := browser.Start(t)
	tab := b.NewTab(t)
	tab.Navigate(srv.URL + "/?buyer=carol")
	tab.Click("#more")
	tab.WaitText("#clicks", "1")

	// Navigating without ?buyer= keeps carol only through localStorage.
	tab.Navigate(srv.URL + "/")
	tab.Click("#more")
	tab.WaitText("#clicks", "1")
	tab.Reload()
	tab.WaitText("#buyer", "buyer carol")
	if got := tab.Text("#clicks"); got != "0" {
		t.Errorf("clicks after the reload %q, want 0 (a fresh page)", got)
	}
}

// TestClickChangesText: a click runs the page's handler (text and
// attribute change), a second click counts again.
func TestClickChangesText(t *testing.T) {
	srv := site(t)
	b := browser.Start(t)
	tab := b.NewTab(t)
	tab.Navigate(srv.URL + "/")
	tab.WaitVisible("#more")
	if got, ok := tab.Attr("#more", "data-state"); got != "idle" || !ok {
		t.Fatalf("data-state before a click %q (present %v), want idle", got, ok)
	}
	if _, ok := tab.Attr("#more", "data-none"); ok {
		t.Error("an attribute the button lacks reads as present")
	}
	tab.Click("#more")
	tab.WaitText("#clicks", "1")
	tab.Click("#more")
	tab.WaitText("#clicks", "2")
	if got := tab.Text("#clicks"); got != "2" {
		t.Errorf("clicks %q, want 2", got)
	}
	if got, _ := tab.Attr("#more", "data-state"); got != "clicked" {
		t.Errorf("data-state after a click %q, want clicked", got)
	}
}

// TestJSErrorReported: a console.error and an uncaught exception are
// problems of the page; a clean page has none.
func TestJSErrorReported(t *testing.T) {
	srv := site(t)
	b := browser.Start(t)

	clean := b.NewTab(t)
	clean.Navigate(srv.URL + "/")
	clean.WaitText("#buyer", "buyer")
	if ps := clean.Problems(); len(ps) > 0 {
		t.Errorf("a clean page has problems: %v", ps)
	}

	tab := b.NewTab(t)
	tab.Navigate(srv.URL + "/broken")
	tab.WaitText("#before", "ran")
	ps := tab.Problems()
	var console, exception bool
	for _, p := range ps {
		switch {
		case p.Kind == browser.Console && p.Text == "the kit logs 42":
			console = true
		case p.Kind == browser.Exception && strings.Contains(p.Text, "undefinedFunctionOfTheKit is not defined") &&
			strings.HasSuffix(p.URL, "/broken:7"):
			exception = true
		}
	}
	if !console || !exception {
		t.Errorf("problems %q: want the console error (%v) and the exception at /broken:7 (%v)", ps, console, exception)
	}
	if ps := tab.Problems(); len(ps) > 0 {
		t.Errorf("problems taken twice: %v", ps)
	}
}

// TestScreenshotIsPNGOfTheAskedWidth: a phone's screenshot is a PNG 320
// pixels wide; a desktop viewport's is as wide as asked.
func TestScreenshotIsPNGOfTheAskedWidth(t *testing.T) {
	srv := site(t)
	b := browser.Start(t)
	tab := b.NewTab(t)
	tab.Navigate(srv.URL + "/")
	tab.WaitVisible("#more")
	dir := t.TempDir()

	for _, c := range []struct {
		name          string
		set           func()
		width, height int
	}{
		{"phone", tab.Phone, 320, 640},
		{"desktop", func() { tab.SetViewport(1024, 700) }, 1024, 700},
	} {
		c.set()
		path := filepath.Join(dir, c.name+".png")
		w, h := tab.Screenshot(path)
		if w != c.width || h != c.height {
			t.Errorf("%s: screenshot %d×%d, want %d×%d", c.name, w, h, c.width, c.height)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(data), "\x89PNG\r\n\x1a\n") {
			t.Errorf("%s: %s is not a PNG: starts %q", c.name, path, data[:min(8, len(data))])
		}
		if got := browser.Eval[int](tab, `window.innerWidth`); got != c.width {
			t.Errorf("%s: the page sees window.innerWidth %d, want %d", c.name, got, c.width)
		}
	}
}

// TestStopLeavesNoProcess: Stop kills chromium, every process it forked
// and the crash handlers it detached, and waits for them (its main process
// is not even a zombie).
func TestStopLeavesNoProcess(t *testing.T) {
	srv := site(t)
	b := browser.Start(t)
	tab := b.NewTab(t)
	tab.Navigate(srv.URL + "/")
	tab.WaitVisible("#more")
	pids := b.Processes()
	if !slices.Contains(pids, b.Pid()) || len(pids) < 2 {
		t.Fatalf("chromium's processes %v: want the main one (%d) and those it forked", pids, b.Pid())
	}
	// The crash handlers, which chromium detaches (their parent is init),
	// are among them: Stop kills them too.
	var detached bool
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		detached = detached || strings.Contains(string(cmdline), "chrome_crashpad_handler")
	}
	if !detached {
		t.Errorf("no chrome_crashpad_handler among chromium's processes %v", pids)
	}
	b.Stop()
	if left := b.Processes(); len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(b.Pid())); err == nil {
		t.Errorf("chromium's main process %d still in /proc after Stop (not waited for)", b.Pid())
	}
	b.Stop() // twice is safe
}

// recorder is a testing.TB whose failures are recorded, not reported.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestUntakenProblemFailsTheTest: a page test that does not take its
// page's problems fails when it ends, naming them.
func TestUntakenProblemFailsTheTest(t *testing.T) {
	srv := site(t)
	b := browser.Start(t)
	rec := &recorder{TB: t}
	// Registered before the tab's own cleanup, so it runs after it.
	t.Cleanup(func() {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.errors) != 2 || !strings.Contains(rec.errors[0]+rec.errors[1], "undefinedFunctionOfTheKit is not defined") {
			t.Errorf("the test of a page with an exception and a console error nobody took failed with %q, want both", rec.errors)
		}
	})
	tab := b.NewTab(rec)
	tab.Navigate(srv.URL + "/broken")
	// The page's script runs to its end (the exception) before the poll
	// that sees its text, and the kit gets the page's events in order: both
	// problems are in when WaitText returns.
	tab.WaitText("#before", "ran")
}
