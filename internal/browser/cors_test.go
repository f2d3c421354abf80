package browser_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flashgate/flashgate/internal/browser"
)

// TestCrossOriginFetch: a page on one origin fetches from a server on
// another port of 127.0.0.1 (another origin). Without
// Access-Control-Allow-Origin the browser refuses the answer to the page
// (the request itself is sent: a simple GET needs no preflight), and the
// kit sees the refusal as the page's problems; with the page's origin
// allowed, the page reads the answer and nothing is reported.
func TestCrossOriginFetch(t *testing.T) {
	page := site(t)
	var hits atomic.Int64
	var origins atomic.Value
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		origins.Store(r.Header.Get("Origin"))
		if r.URL.Path == "/allowed" {
			w.Header().Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		}
		w.Write([]byte("stock 7"))
	}))
	t.Cleanup(api.Close)
	if page.URL == api.URL {
		t.Fatal("the page and the API on one origin")
	}
	b := browser.Start(t)

	t.Run("refused without the header", func(t *testing.T) {
		tab := b.NewTab(t)
		tab.Navigate(page.URL + "/?api=" + api.URL + "/refused")
		tab.WaitText("#fetched", "refused TypeError")
		if hits.Load() != 1 {
			t.Errorf("the API saw %d requests, want 1 (sent, the answer refused to the page)", hits.Load())
		}
		if o := origins.Load(); o != page.URL {
			t.Errorf("the request's Origin %q, want the page's %q", o, page.URL)
		}
		var request, log bool
		ps := tab.Problems()
		for _, p := range ps {
			switch {
			case p.Kind == browser.Request && strings.Contains(p.Text, "CORS: MissingAllowOriginHeader") && p.URL == api.URL+"/refused":
				request = true
			case p.Kind == browser.Log && strings.Contains(p.Text, "blocked by CORS policy") &&
				strings.Contains(p.Text, "No 'Access-Control-Allow-Origin' header"):
				log = true
			}
		}
		if !request || !log {
			t.Errorf("problems %q: want the request refused by CORS (%v) and the browser's log of it (%v)", ps, request, log)
		}
	})

	t.Run("allowed with the page's origin", func(t *testing.T) {
		tab := b.NewTab(t)
		tab.Navigate(page.URL + "/?api=" + api.URL + "/allowed")
		tab.WaitText("#fetched", "answered stock 7")
		if hits.Load() != 2 {
			t.Errorf("the API saw %d requests in all, want 2", hits.Load())
		}
		if ps := tab.Problems(); len(ps) > 0 {
			t.Errorf("an allowed cross-origin fetch has problems: %q", ps)
		}
	})
}

// TestOtherHostsDoNotResolve: the browser resolves no host but localhost
// and 127.0.0.1, so that nothing a page or chromium itself asks for leaves
// the machine. Proved on 127.0.0.2, another loopback address that would
// answer, with the server allowing any origin: the fetch fails with the
// name not resolved, and the server sees nothing.
func TestOtherHostsDoNotResolve(t *testing.T) {
	page := site(t)
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listen on 127.0.0.2 (loopback's /8): %v", err)
	}
	var hits atomic.Int64
	other := &httptest.Server{
		Listener: l,
		Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Access-Control-Allow-Origin", "*")
			w.Write([]byte("reached"))
		})},
	}
	other.Start()
	t.Cleanup(other.Close)
	// The server answers this process: only the browser is kept from it.
	resp, err := http.Get(other.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	b := browser.Start(t)
	tab := b.NewTab(t)
	tab.Navigate(page.URL + "/?api=" + other.URL + "/")
	tab.WaitText("#fetched", "refused TypeError")
	ps := tab.Problems()
	var unresolved bool
	for _, p := range ps {
		unresolved = unresolved || p.Kind == browser.Request && strings.Contains(p.Text, "ERR_NAME_NOT_RESOLVED")
	}
	if !unresolved {
		t.Errorf("problems %q: want the fetch of %s failed with ERR_NAME_NOT_RESOLVED", ps, other.URL)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the server on 127.0.0.2 saw %d requests, want 1 (this test's own, none from the browser)", n)
	}
}
