package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/browser"
	fgsale "github.com/flashgate/flashgate/sale"
)

// The sale page (API.md "Buyers in a browser") in a real browser, against
// the whole pipeline: gateway and consumer processes, Redis, RabbitMQ and
// MySQL. Debian's chromium, headless (make tools installs it).

// screenshotDir is where the tests leave their screenshots:
// FLASHGATE_SCREENSHOTS (docs/images when the docs are remade), or the
// test's own temporary folder.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("FLASHGATE_SCREENSHOTS"); d != "" {
		return d
	}
	return t.TempDir()
}

// putSale creates a sale with body on g, failing the test otherwise.
func putSale(t *testing.T, g *gatewayProc, sale, body string) {
	t.Helper()
	code, out, err := httpDo(&http.Client{Timeout: 5 * time.Second}, "PUT", "http://"+g.admin+"/admin/v1/sales/"+sale, body)
	if err != nil || code != 201 {
		t.Fatalf("create sale %s: %d %s %v", sale, code, out, err)
	}
}

const (
	buyOn   = `[data-fg="buy"]:not([disabled])`
	created = `[data-fg-field="status"]`
)

// Three buyers join from three tabs and see places 1, 2, 3; a reload keeps
// a place; each is admitted in turn, buys, and sees the order reach
// created; a fourth sees the sale sold out. One tab is a phone's, 320 px
// wide; the screenshots of the docs are taken here.
func TestBrowserWaitingRoom(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(1)
	const sale = "roompage"
	start := time.Now().Add(8 * time.Second).UTC().Format(time.RFC3339Nano)
	putSale(t, g, sale, `{"stock":3,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":1,"starts_at":"`+start+`"}`)
	b := browser.Start(t)
	shots := screenshotDir(t)
	tabs := make([]*browser.Tab, 3)
	for i := range tabs {
		tabs[i] = b.NewContext(t)
		if i == 0 {
			tabs[i].Phone()
		}
		url := "http://" + g.public + "/s/" + sale + "#user=buyer" + fmt.Sprint(i+1)
		if code := tabs[i].Navigate(url); code != 200 {
			t.Fatalf("page: %d", code)
		}
		tabs[i].WaitText(`[data-fg="state"]`, "not started")
		tabs[i].Click(`[data-fg="join"]`)
		tabs[i].WaitText(`[data-fg="position"]`, fmt.Sprint(i+1))
		if got := tabs[i].Text(`[data-fg="remaining"]`); got != "3" {
			t.Errorf("buyer %d: remaining %q, want 3", i+1, got)
		}
	}
	if _, h := tabs[1].Screenshot(filepath.Join(shots, "page-waiting.png")); h == 0 {
		t.Errorf("empty screenshot")
	}
	tabs[1].Reload()
	tabs[1].WaitText(`[data-fg="position"]`, "2")
	if _, ok := tabs[1].Attr(`[data-fg="join"]`, "hidden"); !ok {
		t.Errorf("after a reload the page offers to join again")
	}
	for i, tab := range tabs {
		tab.WaitVisible(buyOn)
		if got := tab.Text(`[data-fg="position"]`); got != fmt.Sprint(i+1) {
			t.Errorf("buyer %d admitted at place %q", i+1, got)
		}
		tab.Click(buyOn)
		tab.WaitText(created, "created")
	}
	tabs[0].Screenshot(filepath.Join(shots, "page-ordered-phone.png"))
	late := b.NewContext(t)
	late.Navigate("http://" + g.public + "/s/" + sale + "#user=buyer4")
	late.WaitText(`[data-fg="state"]`, "sold out")
	if _, ok := late.Attr(`[data-fg="join"]`, "disabled"); !ok {
		t.Errorf("a sold-out sale offers to join")
	}
	// Sold out, the pages still polling hear 410 at their next poll and
	// stop. An admitted page polls at the server's poll_after_ms, up to
	// sale.MaxPollAfter apart: the wait is that and the usual bound.
	nextPoll := fgsale.MaxPollAfter*time.Millisecond + browser.ActionTimeout
	for _, tab := range tabs {
		tab.WaitTextWithin(`[data-fg="message"]`, "Sold out", nextPoll)
		tab.Navigate("about:blank")
		onlyStatus(t, tab, 410)
	}
	s.waitDrained(sale, 30*time.Second)
	owners, _ := s.owners(sale)
	if len(owners) != 3 {
		t.Errorf("MySQL holds %d orders, want 3: %v", len(owners), owners)
	}
}

// With the keyboard alone a buyer reaches the buy button and buys; a
// double click makes one order; a 429 is retried by the page itself after
// Retry-After, and the order is made once.
func TestBrowserBuyOnce(t *testing.T) {
	s := newStack(t, "FLASHGATE_ADMISSION_RATE=1", "FLASHGATE_ADMISSION_BURST=1")
	g := s.startGateway(nil)
	s.startConsumers(1)
	const sale = "buypage"
	putSale(t, g, sale, `{"stock":50,"per_user_limit":5}`)
	b := browser.Start(t)
	open := func(user string) *browser.Tab {
		tab := b.NewContext(t)
		tab.Navigate("http://" + g.public + "/s/" + sale + "#user=" + user)
		tab.WaitText(`[data-fg="state"]`, "on sale")
		tab.WaitVisible(buyOn)
		return tab
	}

	keys := open("keys")
	for i := 0; !browser.Eval[bool](keys, `document.activeElement === document.querySelector('[data-fg="buy"]')`); i++ {
		if i == 20 {
			t.Fatalf("Tab never reached the buy button")
		}
		keys.Keys("\t")
	}
	keys.Keys("\r")
	keys.WaitText(created, "created")

	twice := open("twice")
	twice.DoubleClick(buyOn)
	twice.Click(`[data-fg="buy"]`) // a late second click of a slow double click
	twice.WaitText(created, "created")
	for _, tab := range []*browser.Tab{keys, twice} {
		onlyBusy(t, tab)
	}

	// A 429: the sale admits one buy a second; a buy sent just before the
	// page's leaves it none. Tried until the page met one.
	var busy *browser.Tab
	for i := 0; busy == nil; i++ {
		if i == 5 {
			t.Fatalf("the page's buy never met a 429")
		}
		tab := open(fmt.Sprint("busy", i))
		code, out, err := httpDo(&http.Client{Timeout: 5 * time.Second}, "POST", "http://"+g.public+"/v1/sales/"+sale+"/orders", `{"user_id":"direct`+fmt.Sprint(i)+`"}`)
		if err != nil || code != 202 && code != 429 {
			t.Fatalf("direct buy: %d %s %v", code, out, err)
		}
		tab.Click(buyOn)
		tab.WaitText(created, "created")
		if onlyBusy(t, tab) > 0 {
			busy = tab
		}
	}
	s.waitDrained(sale, 30*time.Second)
	_, units := s.owners(sale)
	for user, n := range units {
		if !strings.HasPrefix(user, "direct") && n != 1 {
			t.Errorf("%s has %d units in MySQL, want 1", user, n)
		}
	}
	if units["keys"] != 1 || units["twice"] != 1 {
		t.Errorf("units in MySQL: %v", units)
	}
}

// onlyBusy takes the problems of tab and fails the test on any but a 429
// (a buy the page retried); it returns the 429s.
func onlyBusy(t *testing.T, tab *browser.Tab) int {
	t.Helper()
	return onlyStatus(t, tab, 429)
}

// onlyStatus takes the problems of tab and fails the test on any but an
// answer with the given HTTP code, which the page expects; it returns how
// many there were.
func onlyStatus(t *testing.T, tab *browser.Tab, code int) int {
	t.Helper()
	n := 0
	for _, p := range tab.Problems() {
		if !strings.Contains(p.Text, fmt.Sprintf("status of %d", code)) {
			t.Errorf("the page ran into %s", p)
			continue
		}
		n++
	}
	return n
}

// A page of a listed origin buys through CORS; a page of another origin is
// refused by the browser and makes no order.
func TestBrowserCORS(t *testing.T) {
	const sale = "corspage"
	shop, other := pageServer(t), pageServer(t)
	s := newStack(t, "FLASHGATE_CORS_ORIGINS="+shop.origin)
	g := s.startGateway(nil)
	s.startConsumers(1)
	putSale(t, g, sale, `{"stock":5}`)
	code, page, err := httpDo(&http.Client{Timeout: 5 * time.Second}, "GET", "http://"+g.public+"/s/"+sale, "")
	if err != nil || code != 200 {
		t.Fatalf("page: %d %v", code, err)
	}
	// The shop's copy of the page, calling the gateway's API from its own
	// origin.
	copyOf := strings.Replace(page, `<html lang="en">`, `<html lang="en" data-fg-api="http://`+g.public+`" data-fg-sale="`+sale+`">`, 1)
	shop.page, other.page = copyOf, copyOf
	b := browser.Start(t)

	ok := b.NewContext(t)
	ok.Navigate(shop.origin + "/#user=fromshop")
	ok.WaitText(`[data-fg="state"]`, "on sale")
	ok.Click(buyOn)
	ok.WaitText(created, "created")

	refused := b.NewContext(t)
	refused.Navigate(other.origin + "/#user=fromelsewhere")
	refused.WaitText(`[data-fg="message"]`, "cannot be reached")
	refused.Navigate("about:blank") // its retries would add problems
	if !slices.ContainsFunc(refused.Problems(), func(p browser.Problem) bool { return strings.Contains(p.Text, "CORS") }) {
		t.Errorf("the other origin's page met no CORS refusal")
	}
	s.waitDrained(sale, 30*time.Second)
	owners, _ := s.owners(sale)
	if len(owners) != 1 || slices.Contains(mapValues(owners), "fromelsewhere") {
		t.Errorf("orders in MySQL: %v, want fromshop's only", owners)
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// pageHost serves page at / on a loopback origin of its own.
type pageHost struct {
	origin string
	page   string
}

func pageServer(t *testing.T) *pageHost {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &pageHost{origin: "http://" + ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, h.page)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close below
	t.Cleanup(func() { srv.Close() })
	return h
}

// A shop's template replaces the page and drives the same API; a broken
// one stops the gateway at start, exit 2, naming the setting.
func TestBrowserShopTemplate(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "shop.html"), filepath.Join(dir, "broken.html")
	if err := os.WriteFile(good, []byte(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Shop</title><link rel="icon" href="data:,"><style>{{.Style}}</style></head>
<body><main data-fg="page"><h1 class="shop-banner">The Shop's Own Sale</h1><h2 data-fg="title">…</h2>
<p><span data-fg="state"></span> · <span data-fg="remaining"></span> left</p>
<section data-fg="queue" aria-live="polite" hidden><span data-fg="position"></span> <span data-fg="ahead"></span> <span data-fg="eta"></span></section>
<button data-fg="join" hidden>Queue</button><button data-fg="buy" disabled>Take one</button>
<section data-fg="order" hidden></section><p data-fg="message" aria-live="polite"></p></main>
<script>{{.Script}}</script></body></html>`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`<p>{{.Script</p>`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newStack(t)
	out, code := runFlashgate(t, slices.Concat(s.env, []string{"FLASHGATE_PAGE_TEMPLATE=" + bad}), "gateway")
	if code != 2 || !strings.Contains(out, "FLASHGATE_PAGE_TEMPLATE") {
		t.Errorf("a broken template: exit %d, %q; want 2 naming FLASHGATE_PAGE_TEMPLATE", code, out)
	}
	g := startGateway(t, nil, slices.Concat(s.env, []string{"FLASHGATE_PAGE_TEMPLATE=" + good}))
	s.startConsumers(1)
	putSale(t, g, "shoppage", `{"stock":2}`)
	tab := browser.Start(t).NewContext(t)
	tab.Navigate("http://" + g.public + "/s/shoppage#user=shopper")
	tab.WaitText(".shop-banner", "The Shop's Own Sale")
	tab.WaitText(`[data-fg="remaining"]`, "2")
	tab.Click(buyOn)
	tab.WaitText(created, "created")
}
