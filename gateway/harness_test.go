package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/expiry"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/process"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/sale/saletest"
	"github.com/flashgate/flashgate/scripts"
)

// TestMain fails the package when a goroutine outlives its tests: every
// server, subscription, client and proxy a test starts must be stopped and
// waited for by its cleanup. (The tests that re-run this binary as a
// gateway process check that process too.) Ignored, as fasthttp's own:
// the Date header clock, one per process, started with the first server
// and never stopped; and a stopped server's idle-worker cleaner, which
// sleeps out its interval (Server.MaxIdleWorkerDuration, 10 s) before it
// sees the stop.
func TestMain(m *testing.M) {
	localstack.Main(m,
		localstack.IgnoreGoroutine("github.com/valyala/fasthttp.updateServerDate.func1"),
		localstack.IgnoreGoroutine("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

const testToken = "test-admin-token-0123456789"

// testGateway is a gateway on 127.0.0.1:0 against the real Redis of
// `make up` (or the Redis Cluster of `make up-cluster`), with its own key
// prefix so tests cannot see each other's sales.
type testGateway struct {
	t       testing.TB
	srv     *Server
	sales   *sale.Store
	sweeper *expiry.Sweeper
	cfg     *config.Config
	rdb     redis.UniversalClient
	loader  *scripts.Loader
	keys    scripts.Keys
	base    string // http://public
	admin   string // http://admin
	client  *http.Client
}

type gwOption func(*config.Config)

// onOwnRedis runs the gateway on a Redis of the test's own, of the shared
// one's shape (localstack.OwnRedis): for a test that empties every script
// cache again and again, which would meet the calls of the packages
// tested beside this one on the shared server.
func onOwnRedis(t testing.TB) gwOption {
	addrs := localstack.OwnRedis(t)
	return func(c *config.Config) { c.Redis.Addrs = addrs }
}

// redisAddr is FLASHGATE_REDIS_ADDRS as the tests read it
// (localstack.RedisAddrs): one address, or several for a Redis Cluster.
func redisAddr() string { return strings.Join(localstack.RedisAddrs, ",") }

// startGateway starts a gateway and stops it, and deletes its keys, when the
// test ends. It fails the test when Redis cannot be reached.
func startGateway(t testing.TB, opts ...gwOption) *testGateway {
	return startGatewayLog(t, zap.NewNop(), opts...)
}

// startGatewayLog is startGateway with the gateway logging to log.
func startGatewayLog(t testing.TB, log *zap.Logger, opts ...gwOption) *testGateway {
	t.Helper()
	cfg := config.Default()
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Admin.Token = testToken
	cfg.Redis.Addrs = append([]string(nil), localstack.RedisAddrs...)
	cfg.Redis.KeyPrefix = "t" + localstack.RandomHex(6)
	cfg.Shutdown.DrainDelay = 0
	// fasthttp (like net/http) counts a connection that has not sent its
	// first request as idle only after 5 s; shutdown waits that long for it.
	cfg.Shutdown.Timeout = 15 * time.Second
	for _, o := range opts {
		o(cfg)
	}
	// The client the binary builds (scripts.ClientOptions), of
	// cfg.Redis.Addrs as the options left them: one Redis, or the cluster
	// when FLASHGATE_REDIS_ADDRS names several nodes (`make test-cluster`).
	ro := scripts.ClientOptions(cfg.Redis)
	ro.PoolSize = 64
	rdb := localstack.NewRedis(&ro)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := localstack.Ping(ctx, rdb); err != nil {
		rdb.Close()
		t.Fatal(err)
	}
	// The parts the process runs around its Server (process.Gateway), but
	// the relay: the outboxes stay for the tests to read.
	parts, err := process.NewGateway(cfg, process.GatewayDeps{Log: log, Redis: rdb, NoRelay: true})
	if err != nil {
		rdb.Close()
		t.Fatal(err)
	}
	if _, err := parts.Loader.Load(ctx); err != nil {
		rdb.Close()
		t.Fatalf("load scripts: %v", err)
	}
	srv, err := New(cfg, Deps{Log: log, Sales: parts.Sales, Loader: parts.Loader, Reload: parts.Reload, Metrics: parts.WriteMetrics})
	if err != nil {
		rdb.Close()
		t.Fatal(err)
	}
	g := &testGateway{
		t: t, srv: srv, sales: parts.Sales, sweeper: parts.Sweeper, cfg: cfg, rdb: rdb, loader: parts.Loader,
		keys: scripts.Keys{Prefix: cfg.Redis.KeyPrefix},
		base: "http://" + srv.Addr(), admin: "http://" + srv.AdminAddr(),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256, DisableCompression: true}},
	}
	t.Cleanup(func() {
		g.client.CloseIdleConnections()
		localstack.DropKeys(t, rdb, cfg.Redis.KeyPrefix)
		rdb.Close()
	})
	localstack.RunUntilCleanup(t, "gateway", 20*time.Second, func(ctx context.Context) error { return parts.Run(ctx, srv) })
	// The announcements' subscription clears the closed-sale memory when it
	// comes up; wait for it, so that no test sees that happen mid-way.
	for deadline := time.Now().Add(10 * time.Second); !srv.closed.subscribed.Load(); {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not subscribe to sale announcements")
		}
		time.Sleep(time.Millisecond)
	}
	return g
}

// response is an HTTP answer with its body decoded.
type response struct {
	code int
	raw  []byte
	body map[string]any
	hdr  http.Header
}

func (r response) status() string { s, _ := r.body["status"].(string); return s }

func (r response) num(k string) int64 { f, _ := r.body[k].(float64); return int64(f) }

func (r response) str(k string) string { s, _ := r.body[k].(string); return s }

// exchange sends a request and reads its answer whole.
func (g *testGateway) exchange(method, url, body string, hdr map[string]string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := g.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res, raw, err
}

func (g *testGateway) do(method, url, body string, hdr map[string]string) response {
	g.t.Helper()
	res, raw, err := g.exchange(method, url, body, hdr)
	if err != nil {
		g.t.Errorf("%s %s: %v", method, url, err)
		return response{}
	}
	r := response{code: res.StatusCode, raw: raw, hdr: res.Header}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		g.t.Errorf("%s %s: %d body is not JSON: %q", method, url, res.StatusCode, raw)
	}
	return r
}

var auth = map[string]string{"Authorization": "Bearer " + testToken}

func (g *testGateway) buy(sale, user string, qty int, idem string) response {
	var hdr map[string]string
	if idem != "" {
		hdr = map[string]string{"Idempotency-Key": idem}
	}
	body := `{"user_id":"` + user + `","quantity":` + itoa(qty) + `}`
	return g.do("POST", g.base+"/v1/sales/"+sale+"/orders", body, hdr)
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n < 0 {
		return appendInt(append(b, '-'), -n)
	}
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func (g *testGateway) put(sale, body string) response {
	return g.do("PUT", g.admin+"/admin/v1/sales/"+sale, body, auth)
}

func (g *testGateway) adminPost(sale, action, body string) response {
	return g.do("POST", g.admin+"/admin/v1/sales/"+sale+"/"+action, body, auth)
}

func (g *testGateway) view(sale string) response {
	return g.do("GET", g.admin+"/admin/v1/sales/"+sale, "", auth)
}

// mustSale creates a sale and fails the test unless it was created.
func (g *testGateway) mustSale(sale, body string) {
	g.t.Helper()
	if r := g.put(sale, body); r.code != 201 {
		g.t.Fatalf("create sale %s: %d %s", sale, r.code, r.raw)
	}
}

// checkLedger checks invariant 1 and that Redis's own records agree: units
// held by users, outbox entries and the orders hash all add up to sold.
func (g *testGateway) checkLedger(sale string) (sold int64) {
	g.t.Helper()
	v := g.view(sale)
	stock, sold, remaining := v.num("stock"), v.num("sold"), v.num("remaining")
	if sold+remaining != stock || remaining < 0 {
		g.t.Errorf("sold %d + remaining %d != stock %d", sold, remaining, stock)
	}
	ctx := context.Background()
	held, err := g.rdb.HGetAll(ctx, g.keys.Users(sale)).Result()
	if err != nil {
		g.t.Fatal(err)
	}
	var units int64
	for _, h := range held {
		units += int64(atoi(h))
	}
	if units != sold {
		g.t.Errorf("users hold %d units, sold is %d", units, sold)
	}
	os := saletest.OutboxOrders(g.t, g.rdb, g.keys.Outbox(sale))
	var outUnits int64
	seen := map[string]bool{}
	for _, o := range os {
		outUnits += int64(o.Quantity)
		if seen[o.OrderID] {
			g.t.Errorf("order %s twice in the outbox", o.OrderID)
		}
		seen[o.OrderID] = true
	}
	if outUnits != sold {
		g.t.Errorf("outbox holds %d units, sold is %d", outUnits, sold)
	}
	if n := g.rdb.HLen(ctx, g.keys.Orders(sale)).Val(); n != int64(len(os)) {
		g.t.Errorf("orders hash has %d orders, outbox %d", n, len(os))
	}
	if p := v.num("outbox_pending"); p != int64(len(os)) {
		g.t.Errorf("outbox_pending %d, the outbox holds %d orders", p, len(os))
	}
	return sold
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

var _ = bytes.Equal
