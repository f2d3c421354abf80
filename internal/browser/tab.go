package browser

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Tab is one page of a Browser, opened for one test. Every action is
// bounded by ActionTimeout and fails the test (Fatalf) when it does not
// complete; call them from the test's goroutine, one at a time (the
// actions of one tab share it).
// Selectors are CSS selectors; an action on an element waits for it to
// exist.
type Tab struct {
	b        *Browser
	t        testing.TB // whose goroutine runs the actions, failed by them
	ctx      context.Context
	problems problems
}

// run runs steps on the tab within ActionTimeout, failing the test with
// what (and the error) when they fail.
func (tab *Tab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, ActionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tab.t.Fatalf("%s: %s", what, errText(err))
	}
}

// get runs one action returning a value, as run does.
func get[T any](tab *Tab, what string, a chromedp.Action[T]) T {
	tab.t.Helper()
	ctx, cancel := context.WithTimeout(tab.ctx, ActionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		tab.t.Fatalf("%s: %s", what, errText(err))
	}
	return v
}

// NewTab opens another tab, for the same test, in this tab's browser
// context (the same buyer: same cookies and localStorage). Closed when the
// test ends.
func (tab *Tab) NewTab() *Tab {
	tab.t.Helper()
	return tab.b.open(tab.t, tab.ctx)
}

// Navigate loads url and waits for its load event, and returns the HTTP
// status of the document (0 when it was not loaded over HTTP).
func (tab *Tab) Navigate(url string) int64 {
	tab.t.Helper()
	resp := get(tab, "navigate to "+url, chromedp.NavigateResponse(url))
	if resp == nil {
		return 0
	}
	return resp.Status
}

// Reload reloads the page and waits for its load event.
func (tab *Tab) Reload() {
	tab.t.Helper()
	tab.run("reload", chromedp.Reload())
}

// WaitVisible waits until the element sel exists and is visible.
func (tab *Tab) WaitVisible(sel string) {
	tab.t.Helper()
	tab.run("wait for "+sel+" to be visible", chromedp.WaitVisible(chromedp.CSS(sel)))
}

// WaitText waits until the element sel exists and its text contains text.
// On timeout the failure says what the element held by then.
func (tab *Tab) WaitText(sel, text string) {
	tab.t.Helper()
	tab.WaitTextWithin(sel, text, ActionTimeout)
}

// WaitTextWithin is WaitText bounded by d instead of ActionTimeout: for
// what the page does on a schedule of the server's, such as the waiting
// room's next poll (up to 20 s away).
func (tab *Tab) WaitTextWithin(sel, text string, d time.Duration) {
	tab.t.Helper()
	const contains = `(sel, text) => { const e = document.querySelector(sel); return !!e && e.textContent.includes(text); }`
	ctx, cancel := context.WithTimeout(tab.ctx, d)
	defer cancel()
	// A poll in the page, every 20 ms, ended by the page itself a little
	// before the Go deadline so that it answers with a timeout rather than
	// a cut connection.
	_, err := chromedp.Run(ctx, chromedp.PollFunction[chromedp.Void](contains,
		chromedp.WithPollingArgs(sel, text),
		chromedp.WithPollingInterval(20*time.Millisecond),
		chromedp.WithPollingTimeout(d-time.Second)))
	if err == nil {
		return
	}
	look, cancelLook := context.WithTimeout(tab.ctx, 5*time.Second)
	defer cancelLook()
	now, _ := chromedp.Run(look, chromedp.Evaluate[*string](
		`(e => e ? e.textContent : null)(document.querySelector(`+jsString(sel)+`))`))
	held := "no such element"
	if now != nil {
		held = "its text is " + jsString(*now)
	}
	if errors.Is(err, chromedp.ErrPollingTimeout) {
		tab.t.Fatalf("wait for %s to contain %q: not within %v; %s", sel, text, d, held)
	}
	tab.t.Fatalf("wait for %s to contain %q: %s; %s", sel, text, errText(err), held)
}

// Click clicks the element sel (a real mouse click at its centre, after
// scrolling it into view).
func (tab *Tab) Click(sel string) {
	tab.t.Helper()
	tab.run("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// Text returns the text of the element sel as rendered (innerText:
// what a buyer reads, hidden parts left out).
func (tab *Tab) Text(sel string) string {
	tab.t.Helper()
	return get(tab, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

// Attr returns the attribute name of the element sel, and whether the
// element has it.
func (tab *Tab) Attr(sel, name string) (string, bool) {
	tab.t.Helper()
	r := get(tab, "attribute "+name+" of "+sel, chromedp.AttributeValue(chromedp.CSS(sel), name))
	return r.Value, r.Exists
}

// Eval evaluates a JavaScript expression in the page (a promise is
// awaited) and returns its value decoded from JSON into T.
func Eval[T any](tab *Tab, expr string) T {
	tab.t.Helper()
	return get(tab, "evaluate "+expr, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// SetViewport sets the page's viewport to width × height CSS pixels at
// scale 1. Phone sets a phone's instead.
func (tab *Tab) SetViewport(width, height int64) {
	tab.t.Helper()
	tab.run("set the viewport", chromedp.EmulateViewport(width, height))
}

// Phone makes the page a phone's: 320 × 640 CSS pixels, mobile (the page's
// meta viewport applies) and touch, at scale 1 so that a screenshot is 320
// pixels wide.
func (tab *Tab) Phone() {
	tab.t.Helper()
	tab.run("emulate a phone", chromedp.EmulateViewport(320, 640,
		chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait))
}

// Screenshot writes a PNG of the viewport to path and returns its size in
// pixels.
func (tab *Tab) Screenshot(path string) (width, height int) {
	tab.t.Helper()
	data := get(tab, "screenshot", chromedp.CaptureScreenshot())
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		tab.t.Fatalf("screenshot: not a PNG: %v", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tab.t.Fatal(err)
	}
	return cfg.Width, cfg.Height
}

// Keys types keys into the page as a keyboard does, to whatever has the
// focus: text, or chromedp's kb names ("\t" is Tab, "\r" Enter).
func (tab *Tab) Keys(keys string) {
	tab.t.Helper()
	tab.run("type "+jsString(keys), chromedp.KeyEvent(keys))
}

// DoubleClick double-clicks the element sel, as a mouse does: two clicks
// in a row, the second with a click count of 2.
func (tab *Tab) DoubleClick(sel string) {
	tab.t.Helper()
	tab.run("double-click "+sel, chromedp.DoubleClick(chromedp.CSS(sel), chromedp.NodeVisible))
}
