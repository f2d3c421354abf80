package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
)

// The page has every data-fg element API.md names and an aria-live
// region, loads nothing from another host, and is served with an ETag: a
// revisit is a 304 without a body; an unknown sale's page is a 404.
func TestSalePage(t *testing.T) {
	g := startGateway(t)
	g.mustSale("p1", `{"stock":3}`)
	res, body := g.raw("GET", g.base+"/s/p1", "", nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("page: %d %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	page := string(body)
	for _, name := range []string{"state", "remaining", "position", "ahead", "eta", "join", "buy", "order", "message"} {
		if !strings.Contains(page, `data-fg="`+name+`"`) {
			t.Errorf("the page has no data-fg=%q element", name)
		}
	}
	if !strings.Contains(page, `aria-live="polite"`) {
		t.Errorf("the page has no aria-live region")
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(page); m != "" {
		t.Errorf("the page loads from another host: %s", m)
	}
	csp := res.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'sha256-") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	etag := res.Header.Get("ETag")
	if etag == "" || res.Header.Get("Cache-Control") == "" {
		t.Fatalf("no ETag or Cache-Control: %v", res.Header)
	}
	res, body = g.raw("GET", g.base+"/s/p1", "", map[string]string{"If-None-Match": etag})
	if res.StatusCode != 304 || len(body) != 0 || res.Header.Get("ETag") != etag {
		t.Errorf("revisit: %d, %d bytes, ETag %q; want 304, none, %q", res.StatusCode, len(body), res.Header.Get("ETag"), etag)
	}
	res, body = g.raw("GET", g.base+"/s/p1", "", map[string]string{"If-None-Match": `"other"`})
	if res.StatusCode != 200 || string(body) != page {
		t.Errorf("a stale ETag: %d, want the page again", res.StatusCode)
	}
	res, body = g.raw("HEAD", g.base+"/s/p1", "", nil)
	if res.StatusCode != 200 || len(body) != 0 {
		t.Errorf("HEAD: %d, %d bytes", res.StatusCode, len(body))
	}
	res, body = g.raw("GET", g.base+"/s/nosuch", "", nil)
	if res.StatusCode != 404 || !strings.Contains(string(body), "No such sale") || res.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("unknown sale: %d %q", res.StatusCode, body)
	}
	// Unknown is remembered until the sale's announcement or the
	// closed-sale TTL, whichever comes first.
	g.mustSale("nosuch", `{"stock":1}`)
	localstack.WaitFor(t, 10*time.Second, "the page of a sale created after it was asked for", func() bool {
		res, _ := g.raw("GET", g.base+"/s/nosuch", "", nil)
		return res.StatusCode == 200
	})
}

// A crowd refreshing a sale's page costs the gateway one Redis call, the
// first; the same bytes serve every sale.
func TestSalePageCostsNoRedisCall(t *testing.T) {
	g := startGateway(t, onOwnRedis(t))
	g.mustSale("c1", `{"stock":3}`)
	g.mustSale("c2", `{"stock":3}`)
	before := commandCalls(t, g.rdb, "exists")
	var first []byte
	for i := range 50 {
		for _, sale := range []string{"c1", "c2"} {
			res, body := g.raw("GET", g.base+"/s/"+sale, "", nil)
			if res.StatusCode != 200 {
				t.Fatalf("page %s: %d", sale, res.StatusCode)
			}
			if i == 0 && first == nil {
				first = body
			}
			if string(body) != string(first) {
				t.Fatalf("the page of %s differs from another sale's", sale)
			}
		}
	}
	if n := commandCalls(t, g.rdb, "exists") - before; n != 2 {
		t.Errorf("100 pages of 2 sales made %d EXISTS calls, want 2", n)
	}
}

// commandCalls reads INFO commandstats's call count of cmd.
func commandCalls(t *testing.T, rdb redis.UniversalClient, cmd string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// A shop's template replaces the page; one that does not parse, or leaves
// out the script, is refused naming the setting, at start and at reload,
// where the page in use stays.
func TestSalePageTemplate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "page.html")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shop := func(mark string) string {
		return `<!doctype html><title>` + mark + `</title><style>{{.Style}}</style><main data-fg="page"><h1 data-fg="title">` + mark +
			`</h1><span data-fg="state"></span><span data-fg="remaining"></span><section data-fg="queue" aria-live="polite"><span data-fg="position"></span><span data-fg="ahead"></span><span data-fg="eta"></span></section>` +
			`<button data-fg="join"></button><button data-fg="buy"></button><div data-fg="order"></div><p data-fg="message"></p></main><script>{{.Script}}</script>`
	}
	for _, c := range []struct{ name, src, want string }{
		{"does not parse", `<p>{{.Script</p>`, "FLASHGATE_PAGE_TEMPLATE"},
		{"no script", `<p>{{.Style}}</p>`, "{{.Script}}"},
		{"unknown field", `<script>{{.Script}}</script>{{.Nothing}}`, "FLASHGATE_PAGE_TEMPLATE"},
	} {
		write(c.src)
		_, err := newSalePages(path)
		var se *config.SettingError
		if !errors.As(err, &se) || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "http.page_template") {
			t.Errorf("%s: %v, want a setting error naming %s and the setting", c.name, err, c.want)
		}
	}
	if _, err := newSalePages(filepath.Join(dir, "missing.html")); err == nil {
		t.Errorf("a missing template was accepted")
	}

	write(shop("Shop one"))
	g := startGateway(t, func(c *config.Config) { c.HTTP.PageTemplate = path })
	g.mustSale("t1", `{"stock":3}`)
	page := func() (string, string) {
		res, body := g.raw("GET", g.base+"/s/t1", "", nil)
		if res.StatusCode != 200 {
			t.Fatalf("page: %d", res.StatusCode)
		}
		return string(body), res.Header.Get("ETag")
	}
	body, etag := page()
	if !strings.Contains(body, "Shop one") || !strings.Contains(body, "flashgate's sale page") {
		t.Fatalf("the shop's page is not served with the script: %.300s", body)
	}
	write(`<p>{{.Script</p>`)
	r := g.do("POST", g.admin+"/admin/v1/scripts/reload", "", auth)
	if r.code != 422 || r.status() != "page_error" || !strings.Contains(r.str("error"), "FLASHGATE_PAGE_TEMPLATE") {
		t.Errorf("reload with a broken template: %d %s", r.code, r.raw)
	}
	if b, e := page(); b != body || e != etag {
		t.Errorf("the page changed after a refused reload")
	}
	write(shop("Shop two"))
	if r := g.do("POST", g.admin+"/admin/v1/scripts/reload", "", auth); r.code != 200 {
		t.Fatalf("reload: %d %s", r.code, r.raw)
	}
	if b, e := page(); !strings.Contains(b, "Shop two") || e == etag {
		t.Errorf("after a reload: ETag %s (was %s), page %.200s", e, etag, b)
	}
}
