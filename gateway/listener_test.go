package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/flashgate/flashgate/sale"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
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

func TestConnCaps(t *testing.T) {
	tests := []struct {
		name          string
		nofile        uint64
		redis         int
		public, admin int
	}{
		{name: "ulimit 1024", nofile: 1024, redis: 65, public: 728, admin: 103},
		{name: "ulimit 256", nofile: 256, redis: 65, public: 47, admin: 16},
		{name: "limit below the reserve", nofile: 64, redis: 65, public: minConns, admin: minConns},
		{name: "large limit", nofile: 1 << 20, redis: 65, public: 1<<20 - fdReserve - 65 - maxAdminConns, admin: maxAdminConns},
		{name: "unlimited", nofile: 0, redis: 65, public: 1<<20 - fdReserve - 65 - maxAdminConns, admin: maxAdminConns},
		{name: "above the derived ceiling", nofile: 1 << 40, redis: 0, public: 1<<20 - fdReserve - maxAdminConns, admin: maxAdminConns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			public, admin := connCaps(tt.nofile, tt.redis)
			if public != tt.public || admin != tt.admin {
				t.Errorf("connCaps(%d, %d) = %d, %d; want %d, %d", tt.nofile, tt.redis, public, admin, tt.public, tt.admin)
			}
			if n := tt.nofile; n > fdReserve+uint64(tt.redis)+2*minConns && uint64(public+admin+fdReserve+tt.redis) > n {
				t.Errorf("both listeners full need %d descriptors, more than the limit %d", public+admin+fdReserve+tt.redis, n)
			}
		})
	}
}

// A configured http.max_conns above what the open-file limit allows is
// lowered to the derived cap; one below it is kept.
func TestMaxConnsClampedToOpenFileLimit(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// A pool per Redis node, and the announcements' connection: the
	// gateway's reserve of descriptors for Redis (Server.deriveConnCaps).
	nodes := len(localstack.RedisAddrs)
	derived, _ := connCaps(lim.Max, nodes*config.Default().Redis.PoolSize+nodes)
	g := startGateway(t, func(c *config.Config) { c.HTTP.MaxConns = 10_000_000 })
	if got := g.srv.publicLn.max; got != int64(derived) {
		t.Errorf("max_conns 10000000 under an open-file limit of %d: cap %d, want %d", lim.Max, got, derived)
	}
	g = startGateway(t, func(c *config.Config) { c.HTTP.MaxConns = 100 })
	if got := g.srv.publicLn.max; got != 100 {
		t.Errorf("max_conns 100: cap %d", got)
	}
}

// fakeListener fails Accept with errs, one per call, then accepts for real.
type fakeListener struct {
	net.Listener
	errs []error
}

func (f *fakeListener) Accept() (net.Conn, error) {
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	return f.Listener.Accept()
}

// Accept retries what a lack of resources fails with, and returns what a
// closed listener does.
func TestAcceptRetriesResourceErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opErr := func(e error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	fake := &fakeListener{Listener: ln, errs: []error{opErr(syscall.EMFILE), opErr(syscall.ENFILE), opErr(syscall.ENOBUFS), opErr(syscall.ENOMEM)}}
	l := newLimitedListener(fake, "test", 10, 0, zap.NewNop())
	defer l.Close()
	c := dialFrom(t, "", ln.Addr().String())
	defer c.Close()
	got, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after EMFILE, ENFILE, ENOBUFS, ENOMEM: %v", err)
	}
	got.Close()
	if n := l.acceptRetries.Load(); n != 4 {
		t.Errorf("%d retries, want 4", n)
	}

	// A Close while Accept backs off ends it, with the error fasthttp's
	// Serve takes for a clean stop.
	fake.errs = []error{opErr(syscall.EMFILE)}
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	for l.acceptRetries.Load() < 5 {
		time.Sleep(time.Millisecond)
	}
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after Close")
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

// The child process of TestAcceptSurvivesEMFILE: a gateway under a low
// open-file limit, set before it starts (mode "before") or after (mode
// "after", as prlimit on a running process would). It prints its addresses,
// serves until its standard input closes, and fails (a non-zero exit, as the
// flashgate binary's would be) if Run returns before that.
func TestGatewayChild(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		t.Skip("runs only as the child process of TestAcceptSurvivesEMFILE")
	}
	limit, err := strconv.ParseUint(os.Getenv(childNofileEnv), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	lower := func() {
		// Soft and hard: the gateway's own raise must not undo it.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
			t.Fatal(err)
		}
	}
	if mode == "before" {
		lower()
	}
	cfg := config.Default()
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Admin.Token = testToken
	cfg.Redis.Addrs = strings.Split(redisAddr(), ",")
	cfg.Redis.KeyPrefix = "t" + localstack.RandomHex(6)
	cfg.HTTP.ReadTimeout = 2 * time.Second
	cfg.Shutdown.DrainDelay = 0
	cfg.Shutdown.Timeout = 10 * time.Second
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zapcore.InfoLevel)
	zc.OutputPaths = []string{"stderr"}
	log, err := zc.Build()
	if err != nil {
		t.Fatal(err)
	}
	ro := scripts.ClientOptions(cfg.Redis)
	ro.PoolSize = 8
	rdb := scripts.NewClient(ro)
	defer rdb.Close()
	defer localstack.DropKeys(t, rdb, cfg.Redis.KeyPrefix)
	loader := scripts.New(rdb, "", scripts.Keys{Prefix: cfg.Redis.KeyPrefix})
	if _, err := loader.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	sales, err := sale.New(rdb, loader, scripts.Keys{Prefix: cfg.Redis.KeyPrefix}, sale.OptionsFor(cfg))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Deps{Log: log, Sales: sales, Loader: loader})
	if err != nil {
		t.Fatal(err)
	}
	if mode == "after" {
		lower()
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	fmt.Printf("listening %s %s\n", srv.Addr(), srv.AdminAddr())
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case err := <-done:
		t.Fatalf("gateway stopped on its own: %v", err)
	case <-eof:
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("gateway Run: %v", err)
	}
}

const (
	childModeEnv   = "FLASHGATE_TEST_GATEWAY_CHILD"
	childNofileEnv = "FLASHGATE_TEST_GATEWAY_NOFILE"
)

// gatewayChild is a running TestGatewayChild.
type gatewayChild struct {
	cmd           *exec.Cmd
	stdin         io.WriteCloser
	public, admin string
	exited        chan struct{} // closed once the process ended
	waitErr       error
	acceptRetried chan struct{} // closed at the first "accept failed" line
	mu            sync.Mutex
	stderr        bytes.Buffer
}

func startGatewayChild(t *testing.T, mode string, nofile int) *gatewayChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGatewayChild$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childNofileEnv+"="+strconv.Itoa(nofile))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &gatewayChild{cmd: cmd, stdin: stdin, exited: make(chan struct{}), acceptRetried: make(chan struct{})}
	var pipes sync.WaitGroup
	pipes.Add(1)
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if strings.Contains(line, "accept failed; retrying") {
				once.Do(func() { close(p.acceptRetried) })
			}
		}
	}()
	addrs := make(chan string, 1)
	pipes.Add(1)
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "listening ") {
				addrs <- strings.TrimPrefix(line, "listening ")
			}
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
		}
	}()
	go func() {
		pipes.Wait() // Wait closes the pipes: read them to the end first
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-p.exited
			t.Errorf("the gateway process did not stop; killed")
		}
	})
	select {
	case a := <-addrs:
		p.public, p.admin, _ = strings.Cut(a, " ")
	case <-p.exited:
		t.Fatalf("the gateway process ended at start: %v\n%s", p.waitErr, p.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway process did not start\n%s", p.output())
	}
	return p
}

func (p *gatewayChild) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// alive fails the test if the process has ended.
func (p *gatewayChild) alive(t *testing.T, when string) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("%s: the gateway process ended: %v\n%s", when, p.waitErr, p.output())
	default:
	}
}

// stop closes the child's standard input and fails unless it exits cleanly.
func (p *gatewayChild) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Errorf("the gateway process failed: %v\n%s", p.waitErr, p.output())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the gateway process did not stop")
	}
}

// Finding 1: past the open-file limit, accept4 failed with EMFILE, fasthttp's
// Serve returned, and the gateway process exited (~1,009 idle connections
// under ulimit -n 1024). Now the accept loop backs off and retries, and the
// default cap, derived from the limit, refuses a flood in JSON before it
// gets there. Each row runs a gateway process under a limit of 256 open
// files and opens 400 connections to it; the process stays up, and once
// they close a buyer is served.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	const nofile, conns = 256, 400
	tests := []struct {
		name, mode string
	}{
		// The caps were derived from the high limit; the process runs out of
		// descriptors and the accept loop must ride it out.
		{name: "limit lowered after start", mode: "after"},
		// The caps fit the limit: the flood is refused 503 in JSON, and
		// the process never runs out.
		{name: "limit at start", mode: "before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startGatewayChild(t, tt.mode, nofile)
			client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			do := func(method, url, body string, hdr map[string]string) (int, string) {
				req, _ := http.NewRequest(method, url, strings.NewReader(body))
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				res, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", method, url, err, p.output())
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b)
			}
			if code, body := do("PUT", "http://"+p.admin+"/admin/v1/sales/fd", `{"stock":5,"per_user_limit":5}`, auth); code != 201 {
				t.Fatalf("create sale: %d %s", code, body)
			}

			flood := make([]net.Conn, 0, conns)
			defer func() {
				for _, c := range flood {
					c.Close()
				}
			}()
			for range conns {
				flood = append(flood, dialFrom(t, "", p.public))
			}
			var statuses map[string]int
			switch tt.mode {
			case "after":
				select {
				case <-p.acceptRetried:
				case <-p.exited:
					t.Fatalf("the gateway process ended under the flood: %v\n%s", p.waitErr, p.output())
				case <-time.After(30 * time.Second):
					t.Fatalf("the flood did not run the process out of descriptors\n%s", p.output())
				}
			case "before":
				// Every connection is answered: refused at once (503), or
				// accepted and cut by the read timeout (408).
				statuses = readAll(flood, 30*time.Second)
				if statuses["unavailable"] == 0 || statuses["request_timeout"] == 0 ||
					statuses["unavailable"]+statuses["request_timeout"] != conns {
					t.Errorf("answers %v, want only unavailable and request_timeout, %d in all", statuses, conns)
				}
				select {
				case <-p.acceptRetried:
					t.Errorf("the derived cap let the process run out of descriptors\n%s", p.output())
				default:
				}
			}
			p.alive(t, "under the flood")
			for _, c := range flood {
				c.Close()
			}
			flood = nil
			if code, body := do("POST", "http://"+p.public+"/v1/sales/fd/orders", `{"user_id":"after-flood"}`, nil); code != 202 {
				t.Errorf("buy after the flood: %d %s", code, body)
			}
			p.alive(t, "after the flood")
			p.stop(t)
		})
	}
}

// readAll reads one answer from each connection, all within deadline, and
// counts their statuses.
func readAll(conns []net.Conn, deadline time.Duration) map[string]int {
	end := time.Now().Add(deadline)
	out := map[string]int{}
	for _, c := range conns {
		a, err := readAnswer(c, bufio.NewReader(c), time.Until(end))
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			out["no answer in time"]++
		case err != nil:
			out["no answer: "+err.Error()]++
		case a.hdr.Get("Content-Type") != "application/json":
			out["not JSON: "+strconv.Itoa(a.code)]++
		default:
			out[a.status]++
		}
	}
	return out
}

// Issue 12's fault test: thousands of idle connections and a few hundred
// slowloris ones (a header byte every 100 ms, never finished) from one
// address, while a buyer from another is served and the process stays up.
// Each hostile connection is cut by http.read_timeout with a 408 in JSON.
func TestIdleAndSlowlorisFlood(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Both ends of every connection live in this process; leave room.
	idleN, slowN := 2000, 200
	if room := (int(lim.Cur) - 1000) / 2; idleN+slowN > room {
		idleN, slowN = max(room*10/11, 10), max(room/11, 1)
	}
	g := startGateway(t, func(c *config.Config) { c.HTTP.ReadTimeout = 2 * time.Second })
	g.mustSale("flood", `{"stock":100,"per_user_limit":100}`)

	idle := make([]net.Conn, 0, idleN)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range idleN {
		idle = append(idle, dialFrom(t, "127.0.0.1", g.srv.Addr()))
	}
	stopSlow := make(chan struct{})
	var slowWG sync.WaitGroup
	var slowCut atomic.Int64
	for i := range slowN {
		c := dialFrom(t, "127.0.0.1", g.srv.Addr())
		slowWG.Add(1)
		go func() {
			defer slowWG.Done()
			defer c.Close()
			msg := "POST /v1/sales/flood/orders HTTP/1.1\r\nHost: x\r\nX-Slow-" + strconv.Itoa(i) + ": "
			if _, err := io.WriteString(c, msg); err != nil {
				slowCut.Add(1)
				return
			}
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stopSlow:
					return
				case <-tick.C:
				}
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write([]byte{'a'}); err != nil {
					slowCut.Add(1) // the server closed it
					return
				}
			}
		}()
	}
	defer func() {
		close(stopSlow)
		slowWG.Wait()
	}()

	buyer := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	defer buyer.CloseIdleConnections()
	for i := range 5 {
		res, err := buyer.Post(g.base+"/v1/sales/flood/orders", "application/json",
			strings.NewReader(`{"user_id":"buyer-`+strconv.Itoa(i)+`"}`))
		if err != nil {
			t.Fatalf("buyer during the flood: %v", err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 202 {
			t.Errorf("buyer during the flood: %d %s", res.StatusCode, body)
		}
	}
	if r := g.do("GET", g.base+"/healthz", "", nil); r.code != 200 {
		t.Errorf("/healthz during the flood: %d %s", r.code, r.raw)
	}

	// The idle connections are all cut by the read timeout, each with a
	// 408 in JSON; so are the slowloris ones, whose next byte then fails.
	statuses := readAll(idle, 30*time.Second)
	if statuses["request_timeout"] != idleN {
		t.Errorf("idle connections' answers: %v, want %d request_timeout", statuses, idleN)
	}
	for deadline := time.Now().Add(30 * time.Second); slowCut.Load() < int64(slowN) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := slowCut.Load(); n != int64(slowN) {
		t.Errorf("%d of %d slowloris connections cut by the server", n, slowN)
	}
	g.checkLedger("flood")
}
