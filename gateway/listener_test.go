package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
)

// dialFrom opens a TCP connection to addr from the loopback address local
// ("" lets the kernel pick), so that a test can be several clients at once:
// Linux routes all of 127.0.0.0/8 to lo.
func dialFrom(t testing.TB, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %q: %v", addr, local, err)
	}
	return c
}

// rawBuy is a buy request as bytes on the wire.
func rawBuy(sale, user string) string {
	body := `{"user_id":"` + user + `"}`
	return "POST /v1/sales/" + sale + "/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// answer is one response read off a raw connection.
type answer struct {
	code   int
	hdr    http.Header
	body   []byte
	status string // the JSON body's status; "" when the body is not JSON
	close  bool   // Connection: close
}

// readAnswer reads the next final response from br (interim 1xx answers,
// such as 100 Continue, are skipped), within the deadline.
func readAnswer(c net.Conn, br *bufio.Reader, deadline time.Duration) (answer, error) {
	_ = c.SetReadDeadline(time.Now().Add(deadline))
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return answer{}, err
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return answer{}, err
		}
		if res.StatusCode >= 100 && res.StatusCode < 200 {
			continue
		}
		a := answer{code: res.StatusCode, hdr: res.Header, body: body, close: res.Close}
		var v struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(body, &v) == nil {
			a.status = v.Status
		}
		return a, nil
	}
}

// checkJSON fails the test unless a is the contract's JSON answer code/status.
func checkJSON(t testing.TB, a answer, code int, status string) {
	t.Helper()
	if a.code != code || a.status != status {
		t.Errorf("got %d %q, want %d {\"status\":%q}", a.code, a.body, code, status)
	}
	if ct := a.hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json (body %q)", ct, a.body)
	}
	if code == 429 || code == 503 {
		if a.hdr.Get("Retry-After") == "" {
			t.Errorf("%d without Retry-After", code)
		}
	}
}

// waitOpen waits until the listener counts n open connections, so that a
// row starts from a known state (a closed client is released by the server
// a moment later, when it reads the EOF).
func waitOpen(t testing.TB, l *limitedListener, n int64) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); l.open.Load() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("listener %s has %d connections open, want %d", l.name, l.open.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Every answer the server writes on its own, before or instead of a handler
// (parse errors, limits, timeouts, refused connections), is the contract's
// JSON with a status. Before: a connection over http.max_conns got
// 503 text/plain "The connection cannot be served because
// Server.Concurrency limit exceeded", and there was no per-client limit.
func TestSelfWrittenAnswersAreJSON(t *testing.T) {
	parse := startGateway(t)
	slow := startGateway(t, func(c *config.Config) {
		c.HTTP.ReadTimeout = 300 * time.Millisecond
		c.HTTP.IdleTimeout = 300 * time.Millisecond
	})
	capped := startGateway(t, func(c *config.Config) {
		c.HTTP.MaxConns = 8
		c.HTTP.MaxConnsPerIP = 4
	})
	buy := "POST /v1/sales/s/orders HTTP/1.1\r\nHost: x\r\n"
	hello := "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + strings.Repeat("\x00", 32) // a TLS ClientHello's start
	rows := []struct {
		name   string
		gw     *testGateway
		hold   []string // loopback addresses that each hold an idle connection first
		from   string   // the probe's local address
		send   string
		code   int
		status string
	}{
		{name: "malformed request line", gw: parse, send: "GARBAGE\r\n\r\n", code: 400, status: "bad_request"},
		{name: "header line without colon", gw: parse, send: "GET /healthz HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", code: 400, status: "bad_request"},
		{name: "NUL in a header", gw: parse, send: "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", code: 400, status: "bad_request"},
		{name: "two different Content-Lengths", gw: parse, send: buy + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", code: 400, status: "bad_request"},
		{name: "bad chunk size", gw: parse, send: buy + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", code: 400, status: "bad_request"},
		{name: "unsupported transfer coding", gw: parse, send: buy + "Transfer-Encoding: gzip\r\n\r\n", code: 400, status: "bad_request"},
		{name: "header over http.max_header_bytes", gw: parse, send: "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 10000) + "\r\n\r\n", code: 431, status: "bad_request"},
		{name: "Content-Length over the body limit", gw: parse, send: buy + "Content-Length: 100000\r\n\r\n", code: 413, status: "too_large"},
		{name: "chunked body over the body limit", gw: parse, send: buy + "Transfer-Encoding: chunked\r\n\r\n2000\r\n" + strings.Repeat("a", 0x2000) + "\r\n0\r\n\r\n", code: 413, status: "too_large"},
		{name: "Expect 100-continue over the body limit", gw: parse, send: buy + "Expect: 100-continue\r\nContent-Length: 100000\r\n\r\n", code: 413, status: "too_large"},
		{name: "silent connection", gw: slow, send: "", code: 408, status: "request_timeout"},
		{name: "headers never finished", gw: slow, send: buy + "X-Slow: a", code: 408, status: "request_timeout"},
		{name: "body never finished", gw: slow, send: buy + "Content-Length: 100\r\n\r\n{\"user_id\":", code: 408, status: "request_timeout"},
		{name: "TLS handshake on the plain listener", gw: slow, send: hello, code: 408, status: "request_timeout"},
		{name: "over http.max_conns_per_ip", gw: capped, hold: []string{"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.1"},
			from: "127.0.0.1", send: buy + "Content-Length: 2\r\n\r\n{}", code: 429, status: "rate_limited"},
		{name: "over http.max_conns", gw: capped, hold: []string{"127.0.0.3", "127.0.0.3", "127.0.0.3", "127.0.0.3", "127.0.0.4", "127.0.0.4", "127.0.0.4", "127.0.0.4"},
			from: "127.0.0.5", send: buy + "Content-Length: 2\r\n\r\n{}", code: 503, status: "unavailable"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			waitOpen(t, r.gw.srv.publicLn, 0)
			for _, h := range r.hold {
				c := dialFrom(t, h, r.gw.srv.Addr())
				defer c.Close()
			}
			waitOpen(t, r.gw.srv.publicLn, int64(len(r.hold)))
			c := dialFrom(t, r.from, r.gw.srv.Addr())
			defer c.Close()
			if r.send != "" {
				if _, err := io.WriteString(c, r.send); err != nil {
					t.Fatal(err)
				}
			}
			a, err := readAnswer(c, bufio.NewReader(c), 10*time.Second)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			checkJSON(t, a, r.code, r.status)
			if !a.close {
				t.Errorf("no Connection: close")
			}
		})
	}
}

// Finding 5: with http.max_conns 100, 150 idle sockets made every fresh
// buyer get 503 text/plain. The cap still refuses once full (that is what a
// cap is), but in the contract's JSON with Retry-After; and once the idle
// sockets go, buyers are served again.
func TestConnectionCapAnswersJSON(t *testing.T) {
	g := startGateway(t, func(c *config.Config) { c.HTTP.MaxConns = 100 })
	g.mustSale("cap", `{"stock":10,"per_user_limit":10}`)
	var idle []net.Conn
	for range 150 {
		idle = append(idle, dialFrom(t, "127.0.0.1", g.srv.Addr()))
	}
	waitOpen(t, g.srv.publicLn, 100)
	c := dialFrom(t, "", g.srv.Addr())
	io.WriteString(c, rawBuy("cap", "fresh"))
	a, err := readAnswer(c, bufio.NewReader(c), 10*time.Second)
	c.Close()
	if err != nil {
		t.Fatalf("fresh buyer: no answer: %v", err)
	}
	checkJSON(t, a, 503, "unavailable")
	m := g.scrape()
	for series, want := range map[string]float64{
		`flashgate_http_connections{listener="public"}`:                                         100,
		`flashgate_http_connections_max{listener="public"}`:                                     100,
		`flashgate_http_connections_refused_total{listener="public",reason="max_conns"}`:        51,
		`flashgate_http_connections_refused_total{listener="public",reason="max_conns_per_ip"}`: 0,
	} {
		if m[series] != want {
			t.Errorf("%s = %v, want %v", series, m[series], want)
		}
	}
	for _, c := range idle {
		c.Close()
	}
	waitOpen(t, g.srv.publicLn, 0)
	if r := g.buy("cap", "fresh", 1, ""); r.code != 202 {
		t.Errorf("buy after the idle sockets closed: %d %s", r.code, r.raw)
	}
}

// A client over http.max_conns_per_ip is refused 429 rate_limited; a client
// from another address is served meanwhile.
func TestPerClientConnectionLimit(t *testing.T) {
	const perIP = 10
	g := startGateway(t, func(c *config.Config) {
		c.HTTP.MaxConns = 100
		c.HTTP.MaxConnsPerIP = perIP
	})
	g.mustSale("ip", `{"stock":10,"per_user_limit":10}`)
	var hostile []net.Conn
	for range perIP + 40 {
		hostile = append(hostile, dialFrom(t, "127.0.0.1", g.srv.Addr()))
	}
	defer func() {
		for _, c := range hostile {
			c.Close()
		}
	}()
	// The 40 over the limit were answered and closed at once: their answers
	// are on the wire before the counter moves.
	for deadline := time.Now().Add(15 * time.Second); g.srv.publicLn.refusedIP.Load() < 40; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections refused, want 40", g.srv.publicLn.refusedIP.Load())
		}
		time.Sleep(time.Millisecond)
	}
	refused := 0
	for _, c := range hostile {
		a, err := readAnswer(c, bufio.NewReader(c), 50*time.Millisecond)
		if err == nil {
			checkJSON(t, a, 429, "rate_limited")
			refused++
		}
	}
	if refused != 40 {
		t.Errorf("%d connections refused, want 40", refused)
	}
	waitOpen(t, g.srv.publicLn, perIP)

	other := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	defer other.CloseIdleConnections()
	res, err := other.Post(g.base+"/v1/sales/ip/orders", "application/json", strings.NewReader(`{"user_id":"other"}`))
	if err != nil {
		t.Fatalf("buyer from 127.0.0.2: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 202 {
		t.Errorf("buyer from 127.0.0.2: %d %s", res.StatusCode, body)
	}

	c := dialFrom(t, "127.0.0.1", g.srv.Addr())
	defer c.Close()
	io.WriteString(c, rawBuy("ip", "hostile"))
	a, err := readAnswer(c, bufio.NewReader(c), 10*time.Second)
	if err != nil {
		t.Fatalf("buyer from 127.0.0.1: no answer: %v", err)
	}
	checkJSON(t, a, 429, "rate_limited")
	if n := g.scrape()[`flashgate_http_connections_refused_total{listener="public",reason="max_conns_per_ip"}`]; n != 41 {
		t.Errorf("refused for max_conns_per_ip: %v, want 41", n)
	}
}

// A connection gives its slot back once, however often it is closed.
func TestLimitedConnReleasesOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitedListener(ln, "test", 10, 2, zap.NewNop())
	defer l.Close()
	c := dialFrom(t, "127.0.0.1", ln.Addr().String())
	defer c.Close()
	got, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	got.Close()
	if n := l.open.Load(); n != 0 {
		t.Errorf("open %d after closing twice", n)
	}
	if len(l.byIP) != 0 {
		t.Errorf("per-client map keeps %v", l.byIP)
	}
}

func TestClientKey(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"127.0.0.1:5000", "127.0.0.1"},
		{"[::ffff:10.1.2.3]:5000", "10.1.2.3"},
		{"[2001:db8:1:2:3:4:5:6]:5000", "2001:db8:1:2::"},
		{"[2001:db8:1:2:ffff::1]:6000", "2001:db8:1:2::"},
		{"[::1]:5000", "::"},
	}
	for _, tt := range tests {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := clientKey(a).String(); got != tt.want {
			t.Errorf("clientKey(%s) = %s, want %s", tt.addr, got, tt.want)
		}
	}
}
