package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/internal/localstack"
)

// A real nginx (Debian's, deploy/local/nginx.sh) in front of two gateways,
// with the config rendered from the shipped deploy/nginx.conf
// (deploy/nginxlocal_test.go holds the two equal but for addresses and
// paths). The tests skip when nginx is not installed:
// `deploy/local/nginx.sh install` installs it.

const nginxBin = "/usr/sbin/nginx"

// nginxProc is an nginx master process started by a test (daemon off), and
// its access log read as it grows.
type nginxProc struct {
	t      *testing.T
	dir    string
	base   string // http://host:port of its public server
	cmd    *exec.Cmd
	exited chan struct{}
	log    *accessLog
}

// startNginx renders the local config for gateways and starts nginx on a
// free loopback port, waiting until it answers. It stops (SIGQUIT, then
// SIGKILL) when the test ends.
func startNginx(t *testing.T, gateways ...string) *nginxProc {
	t.Helper()
	if _, err := os.Stat(nginxBin); err != nil {
		t.Skipf("no %s: deploy/local/nginx.sh install", nginxBin)
	}
	// The status server listens on the public port + 10: both must be free.
	var listen string
	for range 20 {
		a := freeAddr(t)
		host, port, _ := strings.Cut(a, ":")
		var p int
		fmt.Sscan(port, &p)
		status := fmt.Sprintf("%s:%d", host, p+10)
		if l, err := net.Listen("tcp", status); err == nil {
			l.Close()
			listen = a
			break
		}
	}
	if listen == "" {
		t.Fatal("no two free ports for nginx")
	}
	dir := t.TempDir()
	script, err := filepath.Abs("../../deploy/local/nginx.sh")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", append([]string{script, "conf", dir, listen}, gateways...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx.sh conf: %v\n%s", err, out)
	}
	n := &nginxProc{t: t, dir: dir, base: "http://" + listen, exited: make(chan struct{})}
	n.cmd = exec.Command(nginxBin, "-p", dir+"/", "-e", filepath.Join(dir, "logs", "error.log"),
		"-c", filepath.Join(dir, "nginx.conf"), "-g", "daemon off;")
	n.cmd.Stdout, n.cmd.Stderr = os.Stderr, os.Stderr
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	t.Cleanup(n.stop)
	c := &http.Client{Timeout: time.Second}
	localstack.WaitFor(t, 10*time.Second, "nginx answers /readyz 200", func() bool {
		code, _, err := httpDo(c, "GET", n.base+"/readyz", "")
		return err == nil && code == 200
	})
	n.log = tailAccessLog(t, filepath.Join(dir, "logs", "access.log"))
	return n
}

func (n *nginxProc) stop() {
	select {
	case <-n.exited:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
	if n.t.Failed() {
		if raw, err := os.ReadFile(filepath.Join(n.dir, "logs", "error.log")); err == nil {
			s := string(raw)
			if len(s) > 4000 {
				s = "…" + s[len(s)-4000:]
			}
			n.t.Logf("---- nginx error.log ----\n%s", s)
		}
	}
}

// accessLog reads nginx's access log as it grows (every 5ms) and stamps
// each line with the time it was read: the shipped log format carries no
// time of its own (Docker stamps stdout).
type accessLog struct {
	mu    sync.Mutex
	lines []logLine
	stop  chan struct{}
	done  chan struct{}
}

type logLine struct {
	at   time.Time
	text string
}

func tailAccessLog(t *testing.T, path string) *accessLog {
	a := &accessLog{stop: make(chan struct{}), done: make(chan struct{})}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Seek(0, io.SeekEnd)
	go func() {
		defer close(a.done)
		defer f.Close()
		r := bufio.NewReader(f)
		var partial string
		for {
			line, err := r.ReadString('\n')
			partial += line
			if err == nil {
				a.mu.Lock()
				a.lines = append(a.lines, logLine{at: time.Now(), text: strings.TrimSuffix(partial, "\n")})
				a.mu.Unlock()
				partial = ""
				continue
			}
			select {
			case <-a.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(a.stop); <-a.done })
	return a
}

func (a *accessLog) snapshot() []logLine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]logLine(nil), a.lines...)
}

// triedSince returns when (after since) nginx logged requests that tried
// addr, in order ($upstream_addr names every gateway a request was sent
// to), and how many requests it logged in all since.
func (a *accessLog) triedSince(addr string, since time.Time) ([]time.Duration, int) {
	var tries []time.Duration
	var total int
	for _, l := range a.snapshot() {
		if l.at.Before(since) {
			continue
		}
		total++
		_, rest, _ := strings.Cut(l.text, " upstream=")
		ups, _, _ := strings.Cut(rest, " ")
		if slices.Contains(strings.Split(strings.ReplaceAll(ups, ",", " "), " "), addr) {
			tries = append(tries, l.at.Sub(since))
		}
	}
	return tries, total
}

// answeredBy counts the requests logged since since that gateway answered
// (the last address of $upstream_addr, with a status below 500).
func (a *accessLog) answeredBy(addr string, since time.Time) int {
	var n int
	for _, l := range a.snapshot() {
		if l.at.Before(since) {
			continue
		}
		_, rest, ok := strings.Cut(l.text, " upstream=")
		if !ok {
			continue
		}
		ups, rest, _ := strings.Cut(rest, " ustatus=")
		st, _, _ := strings.Cut(rest, " ")
		addrs := strings.Split(ups, ", ")
		codes := strings.Split(st, ", ")
		if addrs[len(addrs)-1] == addr && codes[len(codes)-1] < "500" {
			n++
		}
	}
	return n
}

// startLBBuyers runs workers buyers on sale through base, users in all at
// most, each buying once with an Idempotency-Key of its own and pausing
// pause after; a buy that gets no answer or a 5xx is sent again with the
// same key (every 20ms) until it gets a 2xx or 4xx, and one begun is not
// abandoned when the buyers stop, so that no reservation is left with an
// unknown outcome. They give up after two minutes, which fails the test.
func startLBBuyers(t *testing.T, base, sale string, workers, users int, pause time.Duration) *crowdtest.Crowd {
	return crowdtest.Start(t, crowdtest.Options{Bases: []string{base}, Sales: []string{sale}, Users: users, Prefix: "lb",
		Workers: workers, Pause: pause, Again: crowdtest.Retry5xx, Finish: true, Deadline: 2 * time.Minute, Timeout: 10 * time.Second})
}

// lbStack is the stack with two gateways behind nginx and one consumer.
func lbStack(t *testing.T, sale string) (*stack, [2]*gatewayProc, *nginxProc) {
	t.Helper()
	if _, err := os.Stat(nginxBin); err != nil {
		t.Skipf("no %s: deploy/local/nginx.sh install", nginxBin)
	}
	// The gateways' default drain: /readyz fails and answers say
	// Connection: close for 2s before the listener closes.
	s := newStack(t, "FLASHGATE_DRAIN_DELAY=2s", "FLASHGATE_LOG_LEVEL=warn")
	var gs [2]*gatewayProc
	for i := range gs {
		gs[i] = s.startGateway(nil)
	}
	s.startConsumers(1)
	s.createSale(gs[0], sale, 1000000, 1)
	n := startNginx(t, gs[0].public, gs[1].public)
	return s, gs, n
}

// TestLBRollingRestart: buyers buy through nginx at a steady pace while
// each gateway in turn gets SIGTERM, drains, exits and is started again
// (ready) before the other one goes. No buy fails (after the client's
// retries with the same key), no key gets two orders, and every 202 is in
// MySQL once. The 5xx buyers saw on the way are logged.
func TestLBRollingRestart(t *testing.T) {
	s, gs, n := lbStack(t, "roll")
	b := startLBBuyers(t, n.base, "roll", 16, 12000, 40*time.Millisecond)
	b.WaitAccepted(500, time.Minute)
	for i, g := range gs {
		before := b.N202()
		start := time.Now()
		g.signal(t, syscall.SIGTERM)
		if code := g.waitExit(t, 30*time.Second); code != 0 {
			t.Fatalf("gateway %d: exit %d after SIGTERM\n%s", i+1, code, g.out)
		}
		exited := time.Since(start)
		s.startGateway(g) // same ports
		ready := time.Since(start)
		// Passive checks: the connects refused while it was down count as
		// failures, and nginx leaves it alone for fail_timeout (5s) even
		// though it is ready. Taking the other one down before nginx sends
		// to this one again leaves nginx with no live upstream: every
		// request is a 502 at once ("no live upstreams"). So the next
		// restart waits until nginx's access log shows this one answering.
		localstack.WaitFor(t, 30*time.Second, fmt.Sprintf("nginx sends to gateway %d again", i+1), func() bool {
			return n.log.answeredBy(g.public, start.Add(ready)) > 0
		})
		t.Logf("gateway %d: exited %v after SIGTERM, ready %v, back in nginx's rotation %v after SIGTERM; %d buys accepted meanwhile, 5xx so far %v",
			i+1, exited.Round(time.Millisecond), ready.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), b.N202()-before, b.FiveXX())
		b.WaitAccepted(b.N202()+300, time.Minute)
	}
	b.Stop()
	accepted := b.Check()["roll"]
	s.waitDrained("roll", 2*time.Minute)
	s.checkExactlyOnce("roll", accepted)
	rows, _ := s.count("roll")
	t.Logf("rolling restart: %d 202s, 5xx %v, %d MySQL rows", len(accepted), b.FiveXX(), rows)
	s.checkNoDrift("roll")
}

// TestLBKill9: one gateway is killed (SIGKILL) mid-burst. Buyers retry
// through nginx with the same Idempotency-Key; no key gets two orders and
// every 202 is in MySQL once. How long nginx kept trying the dead gateway
// (passive checks: max_fails within fail_timeout, then fail_timeout off) is
// read from its access log and logged, not asserted.
func TestLBKill9(t *testing.T) {
	s, gs, n := lbStack(t, "crash")
	b := startLBBuyers(t, n.base, "crash", 32, 50000, 5*time.Millisecond)
	b.WaitAccepted(1000, time.Minute)
	dead := gs[0].public
	killed := time.Now()
	gs[0].kill9(t)
	b.WaitAccepted(b.N202()+1000, time.Minute) // through the other one
	// Until nginx has taken the dead one on trial again, once its
	// fail_timeout (5s) has passed.
	localstack.WaitFor(t, time.Minute, "nginx tries the dead gateway again after fail_timeout", func() bool {
		tries, _ := n.log.triedSince(dead, killed)
		return len(tries) > 0 && tries[len(tries)-1] >= 4*time.Second
	})
	b.Stop()
	accepted := b.Check()["crash"]

	tries, total := n.log.triedSince(dead, killed)
	after := len(tries)
	sort.Slice(tries, func(i, j int) bool { return tries[i] < tries[j] })
	var firstBurst time.Duration
	for i, d := range tries {
		if i > 0 && d-tries[i-1] > 2*time.Second {
			break
		}
		firstBurst = d
	}
	t.Logf("after the kill: %d requests through nginx, %d of them tried the dead gateway (in flight, refused, or a trial after fail_timeout); the last of the first run %v after the kill; tries at (first and last ones) %v",
		total, after, firstBurst.Round(time.Millisecond), roundAll(tries))

	s.startGateway(gs[0]) // its relay's pending entries are claimed either way
	s.waitDrained("crash", 2*time.Minute)
	s.checkExactlyOnce("crash", accepted)
	rows, _ := s.count("crash")
	t.Logf("kill -9: %d 202s, 5xx %v, %d MySQL rows", len(accepted), b.FiveXX(), rows)
	s.checkNoDrift("crash")
}

// roundAll returns the first and the last few of ds, rounded to the
// millisecond.
func roundAll(ds []time.Duration) []time.Duration {
	var out []time.Duration
	for i, d := range ds {
		if i < 8 || i >= len(ds)-4 {
			out = append(out, d.Round(time.Millisecond))
		}
	}
	return out
}

// TestLBPerIPCapSeesNginx: behind nginx a gateway's per-address cap
// (http.max_conns_per_ip) counts nginx, not the buyers: every connection
// comes from nginx's address, its idle kept-alive ones included, and the
// cap only reads the TCP peer (never X-Forwarded-For or X-Real-IP, which
// nginx sets but a client can forge). With a cap of 4 and rounds of 32 buys
// at once through nginx, buyers get the gateways' 429 rate_limited although
// each of them has one connection: behind a balancer the cap must stay 0
// (the default), and a per-client limit belongs in nginx (limit_conn on
// $binary_remote_addr).
func TestLBPerIPCapSeesNginx(t *testing.T) {
	if _, err := os.Stat(nginxBin); err != nil {
		t.Skipf("no %s: deploy/local/nginx.sh install", nginxBin)
	}
	s := newStack(t, "FLASHGATE_HTTP_MAX_CONNS_PER_IP=4", "FLASHGATE_LOG_LEVEL=error")
	g1, g2 := s.startGateway(nil), s.startGateway(nil)
	s.createSale(g1, "perip", 1000000, 1)
	n := startNginx(t, g1.public, g2.public)

	codes := map[int]int{}
	var mu sync.Mutex
	var user atomic.Int64
	for round := 0; round < 20 && codes[429] == 0; round++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &http.Client{Timeout: 10 * time.Second} // a connection of its own
				defer c.CloseIdleConnections()
				<-start
				code, _, body, err := crowdtest.Buy(c, n.base, "perip", fmt.Sprintf("p%d", user.Add(1)))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					codes[-1]++
					return
				}
				codes[code]++
				if code == 429 && !strings.Contains(body, "rate_limited") {
					t.Errorf("429 without rate_limited: %s", body)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	t.Logf("answers through nginx, per-IP cap 4 on each gateway: %v", codes)
	if codes[429] == 0 {
		t.Fatalf("no buy was refused by the per-IP cap behind nginx: %v", codes)
	}
}

// TestLBKeepAlive: nginx keeps its connections to the gateways open between
// requests (upstream keepalive, HTTP/1.1, Connection ""): after 200 buys one
// after another, the gateways still hold connections from nginx, and no more
// than one per nginx worker and gateway, where without keep-alive each buy
// would open one and close it.
func TestLBKeepAlive(t *testing.T) {
	if _, err := os.Stat(nginxBin); err != nil {
		t.Skipf("no %s: deploy/local/nginx.sh install", nginxBin)
	}
	s := newStack(t, "FLASHGATE_LOG_LEVEL=warn")
	gs := []*gatewayProc{s.startGateway(nil), s.startGateway(nil)}
	s.createSale(gs[0], "keep", 1000000, 1)
	n := startNginx(t, gs[0].public, gs[1].public)
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	for i := range 200 {
		code, _, body, err := crowdtest.Buy(c, n.base, "keep", fmt.Sprintf("k%d", i))
		if err != nil || code != 202 {
			t.Fatalf("buy %d through nginx: %d %s %v", i, code, body, err)
		}
	}
	workers := nginxWorkers(t, n)
	var open float64
	for _, g := range gs {
		open += scrapeURL(t, "http://"+g.admin+"/metrics")[`flashgate_http_connections{listener="public"}`]
	}
	t.Logf("after 200 buys one after another: %v connections open from nginx (%d workers) to the two gateways", open, workers)
	// At most one per worker and gateway, and the readiness probe's own
	// connection to each gateway, should its client still keep it.
	if most := 2*workers + len(gs); open < 1 || open > float64(most) {
		t.Fatalf("%v connections open to the gateways after 200 buys through nginx, want 1 to %d (one per nginx worker and gateway): keep-alive to the upstreams is not working", open, most)
	}
}

// nginxWorkers counts the worker processes of n's master.
func nginxWorkers(t *testing.T, n *nginxProc) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var workers int
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		_, rest, ok := strings.Cut(string(stat), ") ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == fmt.Sprint(n.cmd.Process.Pid) {
			workers++
		}
	}
	if workers == 0 {
		t.Fatal("nginx has no worker processes")
	}
	return workers
}
