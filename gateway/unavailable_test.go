package gateway

import (
	"github.com/flashgate/flashgate/internal/localstack"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// blackhole is a TCP proxy to Redis that can stop answering: while cut, it
// drops the connections it had and holds new ones open without a byte, as a
// dead or partitioned Redis does.
type blackhole struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *blackhole) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns[c] = struct{}{}
		cut := b.cut
		b.mu.Unlock()
		if cut {
			continue // hold it, say nothing
		}
		up, err := net.Dial("tcp", b.target)
		if err != nil {
			c.Close()
			continue
		}
		b.mu.Lock()
		b.conns[up] = struct{}{}
		b.mu.Unlock()
		b.wg.Add(2)
		go func() { defer b.wg.Done(); io.Copy(up, c); up.Close() }()
		go func() { defer b.wg.Done(); io.Copy(c, up); c.Close() }()
	}
}

func (b *blackhole) setCut(cut bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cut = cut
	if cut {
		for c := range b.conns {
			c.Close()
		}
		b.conns = map[net.Conn]struct{}{}
	}
}

func (b *blackhole) close() {
	b.ln.Close()
	b.setCut(true)
	b.wg.Wait()
}

// Invariant 7: when Redis cannot answer, the gateway says 503 and promises
// nothing (and invariant 1 holds across the outage).
func TestRedisDownIs503(t *testing.T) {
	localstack.SingleRedisOnly(t, "a proxy stands in front of one Redis")
	proxy := newBlackhole(t, redisAddr())
	g := startGateway(t, func(c *config.Config) { c.Redis.Addrs = []string{proxy.ln.Addr().String()} })
	g.mustSale("down", `{"stock":100,"per_user_limit":100}`)
	if r := g.buy("down", "u1", 1, ""); r.code != 202 {
		t.Fatalf("buy with Redis up: %d %s", r.code, r.raw)
	}
	proxy.setCut(true)
	checks := []struct{ name, method, url, body string }{
		{"buy", "POST", g.base + "/v1/sales/down/orders", `{"user_id":"u2"}`},
		{"sale view", "GET", g.base + "/v1/sales/down", ``},
		{"readyz", "GET", g.base + "/readyz", ``},
		{"admin lock", "POST", g.admin + "/admin/v1/sales/down/lock", ``},
	}
	for _, c := range checks {
		if r := g.do(c.method, c.url, c.body, auth); r.code != 503 || r.status() != "unavailable" {
			t.Errorf("%s with Redis gone: %d %s, want 503 unavailable", c.name, r.code, r.raw)
		}
	}
	if r := g.do("GET", g.base+"/healthz", "", nil); r.code != 200 {
		t.Errorf("healthz with Redis gone: %d %s", r.code, r.raw)
	}
	proxy.setCut(false)
	localstack.WaitFor(t, 20*time.Second, "buys to work again", func() bool { return g.buy("down", "u3", 1, "").code == 202 })
	// Whatever the 503s did, the ledger adds up.
	g.checkLedger("down")
}
