package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/order"
)

// The router alone: each row is a request target as a client may send it,
// and what it must route to.
func TestRouteTable(t *testing.T) {
	rows := []struct {
		name           string
		r              *router
		method, target string
		route          route // when code is 0 or 400
		code           int   // 0: routed
		sale, order    string
	}{
		{"buy", publicRoutes, "POST", "/v1/sales/S/orders", routeBuy, 0, "S", ""},
		{"buy with query", publicRoutes, "POST", "/v1/sales/S/orders?x=/../B/orders", routeBuy, 0, "S", ""},
		{"buy absolute-form", publicRoutes, "POST", "http://h:1/v1/sales/S/orders", routeBuy, 0, "S", ""},
		{"buy absolute-form HTTPS", publicRoutes, "POST", "HTTPS://h/v1/sales/S/orders", routeBuy, 0, "S", ""},
		{"sale view", publicRoutes, "GET", "/v1/sales/S", routeSaleView, 0, "S", ""},
		{"sale view HEAD", publicRoutes, "HEAD", "/v1/sales/S", routeSaleView, 0, "S", ""},
		{"order status", publicRoutes, "GET", "/v1/sales/S/orders/O", routeOrderStatus, 0, "S", "O"},
		{"id with every allowed character", publicRoutes, "GET", "/v1/sales/a.b:c@d-e_F9/orders/o.1", routeOrderStatus, 0, "a.b:c@d-e_F9", "o.1"},
		{"healthz", publicRoutes, "GET", "/healthz", routeHealthz, 0, "", ""},
		{"livez", publicRoutes, "GET", "/livez", routeHealthz, 0, "", ""},
		{"readyz with query", publicRoutes, "GET", "/readyz?verbose", routeReadyz, 0, "", ""},

		{"encoded slash and dots in sale", publicRoutes, "POST", "/v1/sales/x%2F..%2FREAL/orders", routeBuy, 400, "", ""},
		{"lowercase escapes", publicRoutes, "POST", "/v1/sales/x%2f..%2fREAL/orders", routeBuy, 400, "", ""},
		{"double-encoded slash", publicRoutes, "POST", "/v1/sales/x%252F..%252FREAL/orders", routeBuy, 400, "", ""},
		{"escaped id character", publicRoutes, "POST", "/v1/sales/%61bc/orders", routeBuy, 400, "", ""},
		{"escaped dots as sale", publicRoutes, "POST", "/v1/sales/%2E%2E/orders", routeBuy, 400, "", ""},
		{"dot as sale", publicRoutes, "POST", "/v1/sales/./orders", routeBuy, 400, "", ""},
		{"dot-dot as sale", publicRoutes, "GET", "/v1/sales/..", routeSaleView, 400, "", ""},
		{"fragment in sale", publicRoutes, "POST", "/v1/sales/REAL#frag/orders", routeBuy, 400, "", ""},
		{"semicolon parameter", publicRoutes, "POST", "/v1/sales/REAL;v=1/orders", routeBuy, 400, "", ""},
		{"backslashes", publicRoutes, "POST", `/v1/sales/A\..\REAL/orders`, routeBuy, 400, "", ""},
		{"encoded slash in order", publicRoutes, "GET", "/v1/sales/S/orders/O%2F..%2F..%2FB", routeOrderStatus, 400, "", ""},
		{"escaped order id", publicRoutes, "GET", "/v1/sales/S/orders/%4F", routeOrderStatus, 400, "", ""},

		{"encoded path after orders", publicRoutes, "POST", "/v1/sales/A/orders%2F..%2F..%2FB%2Forders", 0, 404, "", ""},
		{"leading double slash", publicRoutes, "POST", "//v1/sales/REAL/orders", 0, 404, "", ""},
		{"double slash after v1", publicRoutes, "POST", "/v1//sales/REAL/orders", 0, 404, "", ""},
		{"double slash before orders", publicRoutes, "POST", "/v1/sales/REAL//orders", 0, 404, "", ""},
		{"dot segment", publicRoutes, "POST", "/v1/sales/REAL/./orders", 0, 404, "", ""},
		{"dot-dot segment", publicRoutes, "POST", "/v1/sales/A/../REAL/orders", 0, 404, "", ""},
		{"fragment after orders", publicRoutes, "POST", "/v1/sales/REAL/orders#frag", 0, 404, "", ""},
		{"trailing slash on buy", publicRoutes, "POST", "/v1/sales/REAL/orders/", 0, 404, "", ""},
		{"trailing slash on sale view", publicRoutes, "GET", "/v1/sales/REAL/", 0, 404, "", ""},
		{"trailing segment on order", publicRoutes, "GET", "/v1/sales/S/orders/O/extra", 0, 404, "", ""},
		{"empty order id", publicRoutes, "GET", "/v1/sales/S/orders/", 0, 404, "", ""},
		{"uppercase literal", publicRoutes, "POST", "/V1/sales/REAL/orders", 0, 404, "", ""},
		{"absolute-form dot-dot", publicRoutes, "POST", "http://h/v1/sales/A/../REAL/orders", 0, 404, "", ""},
		{"absolute-form fragment before path", publicRoutes, "POST", "http://h#/v1/sales/REAL/orders", 0, 404, "", ""},
		{"absolute-form other scheme", publicRoutes, "POST", "ftp://h/v1/sales/REAL/orders", 0, 404, "", ""},
		{"asterisk", publicRoutes, "OPTIONS", "*", 0, 404, "", ""},
		{"empty target", publicRoutes, "GET", "", 0, 404, "", ""},
		{"root", publicRoutes, "GET", "/", 0, 404, "", ""},
		{"many segments", publicRoutes, "GET", strings.Repeat("/v1", 100), 0, 404, "", ""},
		{"healthz trailing slash", publicRoutes, "GET", "/healthz/", 0, 404, "", ""},
		{"admin route on public", publicRoutes, "GET", "/admin/v1/sales/S", 0, 404, "", ""},

		{"GET on buy", publicRoutes, "GET", "/v1/sales/S/orders", 0, 405, "", ""},
		{"POST on order status", publicRoutes, "POST", "/v1/sales/S/orders/extra", 0, 405, "", ""},

		{"admin sale", adminRoutes, "GET", "/admin/v1/sales/S", routeAdminSale, 0, "S", ""},
		{"admin upsert", adminRoutes, "PUT", "/admin/v1/sales/S", routeAdminUpsert, 0, "S", ""},
		{"restock", adminRoutes, "POST", "/admin/v1/sales/S/restock", routeRestock, 0, "S", ""},
		{"lock", adminRoutes, "POST", "/admin/v1/sales/S/lock", routeLock, 0, "S", ""},
		{"unlock", adminRoutes, "POST", "/admin/v1/sales/S/unlock", routeUnlock, 0, "S", ""},
		{"pay", adminRoutes, "POST", "/admin/v1/sales/S/orders/O/pay", routePay, 0, "S", "O"},
		{"cancel", adminRoutes, "POST", "/admin/v1/sales/S/orders/O/cancel", routeCancel, 0, "S", "O"},
		{"scripts", adminRoutes, "GET", "/admin/v1/scripts", routeScripts, 0, "", ""},
		{"reload", adminRoutes, "POST", "/admin/v1/scripts/reload", routeReload, 0, "", ""},
		{"metrics", adminRoutes, "GET", "/metrics", routeMetrics, 0, "", ""},
		{"pprof index", adminRoutes, "GET", "/admin/debug/pprof/", routePprof, 0, "", ""},
		{"pprof heap", adminRoutes, "GET", "/admin/debug/pprof/heap?debug=1", routePprof, 0, "", ""},
		{"admin encoded slash", adminRoutes, "POST", "/admin/v1/sales/x%2F..%2FREAL/lock", routeLock, 400, "", ""},
		{"admin escaped id", adminRoutes, "PUT", "/admin/v1/sales/%52EAL", routeAdminUpsert, 400, "", ""},
		{"admin encoded action", adminRoutes, "POST", "/admin/v1/sales/A/lock%2F..%2F..%2FREAL%2Flock", 0, 404, "", ""},
		{"admin leading double slash", adminRoutes, "POST", "//admin/v1/sales/REAL/lock", 0, 404, "", ""},
		{"admin double slash", adminRoutes, "POST", "/admin/v1/sales/REAL//lock", 0, 404, "", ""},
		{"admin dot segment", adminRoutes, "POST", "/admin/v1/sales/REAL/./lock", 0, 404, "", ""},
		{"admin trailing slash", adminRoutes, "PUT", "/admin/v1/sales/REAL/", 0, 404, "", ""},
		{"admin trailing segment", adminRoutes, "POST", "/admin/v1/sales/REAL/restock/extra", 0, 404, "", ""},
		{"pprof traversal", adminRoutes, "GET", "/admin/debug/pprof/../../v1/scripts", 0, 404, "", ""},
		{"pprof odd name", adminRoutes, "GET", "/admin/debug/pprof/a.b", 0, 404, "", ""},
		{"metrics trailing slash", adminRoutes, "GET", "/metrics/", 0, 404, "", ""},
		{"GET on lock", adminRoutes, "GET", "/admin/v1/sales/S/lock", 0, 405, "", ""},
		{"DELETE on admin sale", adminRoutes, "DELETE", "/admin/v1/sales/S", 0, 405, "", ""},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			m := r.r.match([]byte(r.method), requestPath([]byte(r.target)))
			if m.miss.code != r.code {
				t.Fatalf("answered %d %s, want %d", m.miss.code, m.miss.body, r.code)
			}
			if (r.code == 0 || r.code == 400) && m.route != r.route {
				t.Errorf("route %d, want %d", m.route, r.route)
			}
			if r.code == 0 && (string(m.sale) != r.sale || string(m.order) != r.order) {
				t.Errorf("sale %q order %q, want %q %q", m.sale, m.order, r.sale, r.order)
			}
			if r.code == 405 && m.allow == "" {
				t.Errorf("405 without Allow")
			}
			if r.code == 400 && !bytes.Contains(m.miss.body, []byte(`"error":`)) {
				t.Errorf("400 without an error field: %s", m.miss.body)
			}
		})
	}
}

// Routing is on the sold-out path: it allocates nothing, whatever it answers.
func TestRouteAllocs(t *testing.T) {
	for _, target := range []string{
		"/v1/sales/gone/orders", "/v1/sales/S/orders/O", "/v1/sales/x%2F..%2FREAL/orders",
		"/v1//sales/S/orders", "/v1/sales/S/orders?q=1", "/admin/v1/sales/S/orders/O/cancel",
	} {
		path, method := []byte(target), []byte("POST")
		allocs := testing.AllocsPerRun(100, func() {
			publicRoutes.match(method, requestPath(path))
			adminRoutes.match(method, requestPath(path))
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per match", target, allocs)
		}
	}
}

// The attacks, and their kin, sent byte for byte over TCP (Go's
// HTTP client would clean some of them first) to both listeners: none
// reaches a sale, each gets its contract status, and a normal request
// still does.
func TestHostilePaths(t *testing.T) {
	g := startGateway(t)
	for _, sale := range []string{"REAL", "A", "B", "abc", "S"} {
		g.mustSale(sale, `{"stock":100,"per_user_limit":100}`)
	}
	first := g.buy("S", "holder", 1, "")
	if first.code != 202 {
		t.Fatalf("setup buy: %d %s", first.code, first.raw)
	}
	o := first.str("order_id")
	views := func() map[string]string {
		out := map[string]string{}
		for _, sale := range []string{"REAL", "A", "B", "abc", "S"} {
			out[sale] = string(g.view(sale).raw)
		}
		return out
	}
	before := views()

	pub, adm := g.srv.Addr(), g.srv.AdminAddr()
	buyBody := `{"user_id":"mallory","quantity":1}`
	tok := map[string]string{"Authorization": "Bearer " + testToken}
	rows := []struct {
		name, addr, method, target, body string
		hdr                              map[string]string
		code                             int
		status                           string
	}{
		{"encoded slash and dots in sale", pub, "POST", "/v1/sales/x%2F..%2FREAL/orders", buyBody, nil, 400, "bad_request"},
		{"lowercase escapes", pub, "POST", "/v1/sales/x%2f..%2fREAL/orders", buyBody, nil, 400, "bad_request"},
		{"double-encoded slash", pub, "POST", "/v1/sales/x%252F..%252FREAL/orders", buyBody, nil, 400, "bad_request"},
		{"encoded path after orders", pub, "POST", "/v1/sales/A/orders%2F..%2F..%2FB%2Forders", buyBody, nil, 404, "not_found"},
		{"leading double slash", pub, "POST", "//v1/sales/REAL/orders", buyBody, nil, 404, "not_found"},
		{"double slash after v1", pub, "POST", "/v1//sales/REAL/orders", buyBody, nil, 404, "not_found"},
		{"double slash before orders", pub, "POST", "/v1/sales/A//orders", buyBody, nil, 404, "not_found"},
		{"dot segment", pub, "POST", "/v1/sales/REAL/./orders", buyBody, nil, 404, "not_found"},
		{"dot-dot segment", pub, "POST", "/v1/sales/A/../REAL/orders", buyBody, nil, 404, "not_found"},
		{"escaped id character", pub, "POST", "/v1/sales/%61bc/orders", buyBody, nil, 400, "bad_request"},
		{"escaped first letter", pub, "POST", "/v1/sales/%52EAL/orders", buyBody, nil, 400, "bad_request"},
		{"escaped dots as sale", pub, "POST", "/v1/sales/%2E%2E/orders", buyBody, nil, 400, "bad_request"},
		{"fragment in sale", pub, "POST", "/v1/sales/REAL#frag/orders", buyBody, nil, 400, "bad_request"},
		{"fragment after orders", pub, "POST", "/v1/sales/REAL/orders#frag", buyBody, nil, 404, "not_found"},
		{"semicolon parameter", pub, "POST", "/v1/sales/REAL;v=1/orders", buyBody, nil, 400, "bad_request"},
		{"backslashes", pub, "POST", `/v1/sales/A\..\REAL/orders`, buyBody, nil, 400, "bad_request"},
		{"trailing slash", pub, "POST", "/v1/sales/REAL/orders/", buyBody, nil, 404, "not_found"},
		{"absolute-form dot-dot", pub, "POST", "http://h/v1/sales/A/../REAL/orders", buyBody, nil, 404, "not_found"},
		{"trailing segment on order", pub, "GET", "/v1/sales/S/orders/" + o + "/extra", "", nil, 404, "not_found"},
		{"encoded slash in order", pub, "GET", "/v1/sales/A/orders/x%2F..%2F..%2FS%2Forders%2F" + o, "", nil, 400, "bad_request"},
		{"order trailing slash", pub, "GET", "/v1/sales/S/orders/" + o + "/", "", nil, 404, "not_found"},
		{"sale view double slash", pub, "GET", "/v1/sales//S", "", nil, 404, "not_found"},

		{"admin encoded slash", adm, "POST", "/admin/v1/sales/x%2F..%2FREAL/lock", "", tok, 400, "bad_request"},
		{"admin encoded action", adm, "POST", "/admin/v1/sales/A/lock%2F..%2F..%2FREAL%2Flock", "", tok, 404, "not_found"},
		{"admin leading double slash", adm, "POST", "//admin/v1/sales/REAL/lock", "", tok, 404, "not_found"},
		{"admin double slash", adm, "POST", "/admin/v1//sales/REAL/lock", "", tok, 404, "not_found"},
		{"admin double slash before action", adm, "POST", "/admin/v1/sales/REAL//lock", "", tok, 404, "not_found"},
		{"admin dot segment", adm, "POST", "/admin/v1/sales/REAL/./lock", "", tok, 404, "not_found"},
		{"admin dot-dot segment", adm, "POST", "/admin/v1/sales/A/../REAL/lock", "", tok, 404, "not_found"},
		{"admin escaped id", adm, "POST", "/admin/v1/sales/%52EAL/lock", "", tok, 400, "bad_request"},
		{"admin fragment in sale", adm, "POST", "/admin/v1/sales/REAL#x/lock", "", tok, 400, "bad_request"},
		{"admin fragment after action", adm, "POST", "/admin/v1/sales/REAL/lock#x", "", tok, 404, "not_found"},
		{"admin trailing slash", adm, "POST", "/admin/v1/sales/REAL/lock/", "", tok, 404, "not_found"},
		{"admin trailing segment", adm, "POST", "/admin/v1/sales/REAL/restock/extra", `{"quantity":5}`, tok, 404, "not_found"},
		{"upsert trailing slash", adm, "PUT", "/admin/v1/sales/REAL/", `{"stock":1000}`, tok, 404, "not_found"},
		{"upsert escaped id", adm, "PUT", "/admin/v1/sales/%52EAL", `{"stock":1000}`, tok, 400, "bad_request"},
		{"upsert encoded slash", adm, "PUT", "/admin/v1/sales/x%2F..%2FREAL", `{"stock":1000}`, tok, 400, "bad_request"},
		{"restock escaped id", adm, "POST", "/admin/v1/sales/%61bc/restock", `{"quantity":5}`, tok, 400, "bad_request"},
		{"pay of a confirmed order", adm, "POST", "/admin/v1/sales/S/orders/" + o + "/pay", "", tok, 409, "conflict"},
		{"pprof traversal", adm, "GET", "/admin/debug/pprof/../../v1/scripts", "", tok, 404, "not_found"},
		{"reload trailing slash", adm, "POST", "/admin/v1/scripts/reload/", "", tok, 404, "not_found"},
		{"metrics trailing slash", adm, "GET", "/metrics/", "", nil, 404, "not_found"},
		{"metrics double slash", adm, "GET", "//metrics", "", nil, 404, "not_found"},
		{"unrouted admin path needs the token", adm, "POST", "/admin/v1/sales/REAL//lock", "", nil, 401, "unauthorized"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			res := rawDo(t, r.addr, r.method, r.target, r.body, r.hdr)
			if res.code != r.code || res.status() != r.status {
				t.Errorf("got %d %s, want %d %s", res.code, res.raw, r.code, r.status)
			}
			// The router's refusal of the id, not fasthttp's of the request.
			if e := res.str("error"); r.code == 400 && e != badSale && e != badOrder {
				t.Errorf("400 for another reason than the id: %s", res.raw)
			}
			if ct := res.hdr.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
	after := views()
	if !reflect.DeepEqual(before, after) {
		for sale := range before {
			if before[sale] != after[sale] {
				t.Errorf("sale %s changed: %s → %s", sale, before[sale], after[sale])
			}
		}
	}

	// What the path names literally is served: the query and an
	// absolute-form target's authority are not path.
	for _, target := range []string{"/v1/sales/REAL/orders?next=/v1/sales/B/orders", "http://h/v1/sales/REAL/orders"} {
		if r := rawDo(t, pub, "POST", target, buyBody, nil); r.code != 202 || r.str("sale_id") != "REAL" {
			t.Errorf("POST %s: %d %s, want 202 in REAL", target, r.code, r.raw)
		}
	}
	if v := g.view("REAL"); v.num("sold") != 2 {
		t.Errorf("REAL sold %d after two buys: %s", v.num("sold"), v.raw)
	}
	if v := g.view("B"); string(v.raw) != before["B"] {
		t.Errorf("B changed: %s", v.raw)
	}
	if r := rawDo(t, pub, "GET", "/v1/sales/S/orders/"+o, "", nil); r.code != 200 || r.str("order_id") != o {
		t.Errorf("order status: %d %s", r.code, r.raw)
	}
	for _, target := range []string{"/admin/debug/pprof/", "/admin/debug/pprof/cmdline", "/admin/debug/pprof/goroutine?debug=1"} {
		if r := rawDoAny(t, adm, "GET", target, "", tok); r.code != 200 {
			t.Errorf("GET %s: %d %.200s", target, r.code, r.raw)
		}
	}
}

// rawDo sends one request byte for byte over a fresh TCP connection and
// reads the JSON answer.
func rawDo(t *testing.T, addr, method, target, body string, hdr map[string]string) response {
	t.Helper()
	r := rawDoAny(t, addr, method, target, body, hdr)
	if err := json.Unmarshal(r.raw, &r.body); err != nil {
		t.Errorf("%s %s: %d body is not JSON: %q", method, target, r.code, r.raw)
	}
	return r
}

// rawDoAny is rawDo for an answer that need not be JSON.
func rawDoAny(t *testing.T, addr, method, target, body string, hdr map[string]string) response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n")
	if body != "" {
		b.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	for k, v := range hdr {
		b.WriteString(k + ": " + v + "\r\n")
	}
	b.WriteString("\r\n" + body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	return response{code: res.StatusCode, raw: raw, hdr: res.Header}
}

// FuzzRoute: whatever the target, the router does not panic, answers only
// with a route or a 404, 405 or 400, and a route it accepts is its pattern
// with the parameters put in, byte for byte: so a sale it returns is a
// valid id that the path names literally, as one segment.
func FuzzRoute(f *testing.F) {
	for _, seed := range []struct{ method, target string }{
		{"POST", "/v1/sales/S/orders"},
		{"GET", "/v1/sales/S/orders/O"},
		{"GET", "/v1/sales/S"},
		{"POST", "/v1/sales/x%2F..%2FREAL/orders"},
		{"POST", "/v1/sales/A/orders%2F..%2F..%2FB%2Forders"},
		{"POST", "//v1/sales/REAL/orders"},
		{"POST", "/v1//sales/REAL/orders"},
		{"POST", "/v1/sales/A//orders"},
		{"POST", "/v1/sales/REAL/./orders"},
		{"POST", "/v1/sales/A/../REAL/orders"},
		{"POST", "/v1/sales/%61bc/orders"},
		{"POST", "/v1/sales/REAL#frag/orders"},
		{"POST", "/v1/sales/REAL/orders#frag"},
		{"GET", "/v1/sales/S/orders/O/extra"},
		{"POST", "/v1/sales/REAL/orders/"},
		{"POST", "/v1/sales/REAL/orders?x=/../B"},
		{"POST", "http://h/v1/sales/REAL/orders"},
		{"POST", "http://h#/v1/sales/REAL/orders"},
		{"HEAD", "/healthz"},
		{"OPTIONS", "*"},
		{"PUT", "/admin/v1/sales/S"},
		{"POST", "/admin/v1/sales/S/orders/O/pay"},
		{"POST", "/admin/v1/sales/x%2F..%2FREAL/lock"},
		{"GET", "/admin/debug/pprof/heap"},
		{"GET", "/metrics"},
	} {
		f.Add(seed.method, seed.target)
	}
	f.Fuzz(func(t *testing.T, method, target string) {
		path := requestPath([]byte(target))
		for _, r := range []*router{publicRoutes, adminRoutes} {
			m := r.match([]byte(method), path)
			switch m.miss.code {
			case 0:
			case 400:
				if m.route == routeNone || !bytes.Contains(m.miss.body, []byte(`"error":`)) {
					t.Fatalf("%q: 400 %s for route %d", target, m.miss.body, m.route)
				}
				continue
			case 404, 405:
				continue
			default:
				t.Fatalf("%q: answered %d", target, m.miss.code)
			}
			if m.sale != nil && !order.ValidID(m.sale) || m.order != nil && !order.ValidID(m.order) {
				t.Fatalf("%q: routed with sale %q order %q", target, m.sale, m.order)
			}
			if m.sale != nil && !hasSegment(path, m.sale) {
				t.Fatalf("%q: sale %q is not a segment of %q", target, m.sale, path)
			}
			found := false
			for _, rw := range r.rows {
				if rw.route == m.route && fill(rw.pattern, m) == string(path) {
					found = true
				}
			}
			if !found {
				t.Fatalf("%q (path %q) routed to %d, whose pattern does not spell it", target, path, m.route)
			}
		}
	})
}

func hasSegment(path, seg []byte) bool {
	for _, s := range bytes.Split(path, []byte("/")) {
		if bytes.Equal(s, seg) {
			return true
		}
	}
	return false
}

// fill puts m's parameters into pattern.
func fill(pattern string, m match) string {
	r := strings.NewReplacer("{sale}", string(m.sale), "{order}", string(m.order), "{profile}", string(m.profile))
	return r.Replace(pattern)
}

func BenchmarkRoute(b *testing.B) {
	method, target := []byte("POST"), []byte("/v1/sales/flash-2026/orders")
	b.ReportAllocs()
	for b.Loop() {
		publicRoutes.match(method, requestPath(target))
	}
}
