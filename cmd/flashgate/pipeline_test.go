package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/reconcile"
	"github.com/flashgate/flashgate/relay"
	"github.com/flashgate/flashgate/retry"
)

// The whole path, gateway (with its relay) to MySQL, under a crowd, with
// the gateway killed and RabbitMQ stopped on the way.

// TestPipelineBurst guards invariant 3 ("every 202 becomes exactly one
// MySQL row; no row exists without a reservation") and invariant 1 (sold +
// remaining = stock): ≥ 5,000 buys at once over two consumers sell exactly
// the stock, MySQL holds exactly the accepted orders, each once; reconcile
// agrees, and notices a planted row.
func TestPipelineBurst(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	s.createSale(g, "burst", 5000, 1)

	b := startBuyers(t, "http://"+g.public, "burst", 64, 6000, 0)
	b.wait()
	accepted := b.check()
	if len(accepted) != 5000 {
		t.Fatalf("%d buys accepted, want 5000 (the stock)", len(accepted))
	}
	s.waitDrained("burst", 2*time.Minute)
	s.checkExactlyOnce("burst", accepted)
	s.checkNoDrift("burst")

	// A row that no reservation made: reconcile must say so, exit 3.
	if _, err := orderdb.WriteOrders(context.Background(), s.db, []order.Order{{
		OrderID: "planted-" + s.id, SaleID: "burst", UserID: "intruder", Quantity: 1, ReservedAt: time.Now(),
	}}); err != nil {
		t.Fatal(err)
	}
	out, code := s.reconcile("burst", 0)
	if code != 3 || !strings.Contains(out, "DRIFT") || !strings.Contains(out, "planted-"+s.id) {
		t.Fatalf("reconcile after a planted row: exit %d\n%s", code, out)
	}
	t.Logf("reconcile on a planted row:\n%s", out)
}

// TestPipelineGatewayKill9 guards invariant 6: "a crash (kill -9) of any
// gateway ... loses no confirmed order and duplicates none". The gateway
// dies (SIGKILL) mid-burst, with reservations whose replies were lost and
// outbox entries its relay had read but not confirmed; a new gateway takes
// over. Every order a buyer saw accepted reaches MySQL once, and MySQL ends
// up with what Redis sold.
func TestPipelineGatewayKill9(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	s.createSale(g, "crash", 1000000, 1)

	b := startBuyers(t, "http://"+g.public, "crash", 32, -1, time.Millisecond)
	b.waitAccepted(2000, time.Minute)
	g.kill9(t)
	before := b.n202.Load()
	s.startGateway(g) // same ports
	b.waitAccepted(before+2000, time.Minute)
	b.stop()
	accepted := b.check()

	s.waitDrained("crash", 2*time.Minute)
	s.checkExactlyOnce("crash", accepted)
	s.checkNoDrift("crash")
}

// TestPipelineManySales guards invariants 3 and 6 over many sales at once,
// and invariant 10 ("on Redis Cluster every invariant holds as on one
// Redis"): a crowd buys from 200 sales together, and the gateway is killed
// (SIGKILL) mid-burst and started again, so that its relay, and then the
// new one claiming what the dead one held, read, publish, confirm and
// remove entries of many sales in the same rounds. On a cluster those
// outboxes live on every primary: a removal or any other transaction
// holding two sales is refused (CROSSSLOT), and the relay that retries it
// stalls every sale behind it. Every sale sells exactly its stock, every
// order a buyer saw accepted reaches MySQL once, and reconcile finds no
// drift on any sale.
func TestPipelineManySales(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	const sales, stock = 200, 25
	names := make([]string, sales)
	for i := range names {
		names[i] = "m" + strconv.Itoa(i)
		s.createSale(g, names[i], stock, 1)
	}
	s.logSpread(names)

	c := startManyCrowd(t, "http://"+g.public, names, 48)
	c.waitAccepted(sales*stock/3, time.Minute)
	g.kill9(t)
	s.startGateway(g)
	c.wait()
	accepted := c.check()
	for _, sale := range names {
		if len(accepted[sale]) != stock {
			t.Fatalf("sale %s: %d buys accepted, want %d (the stock)", sale, len(accepted[sale]), stock)
		}
	}

	deadline := time.Now().Add(3 * time.Minute)
	for _, sale := range names {
		s.waitDrained(sale, max(time.Until(deadline), time.Second))
	}
	for _, sale := range names {
		s.checkExactlyOnce(sale, accepted[sale])
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := reconcile.Sale(ctx, s.rdb, s.keys, s.db, sale)
		cancel()
		if err != nil {
			t.Fatalf("reconcile %s: %v", sale, err)
		}
		if d := r.Drift(); len(d) > 0 {
			t.Fatalf("reconcile %s: drift %q", sale, d)
		}
	}
	s.checkNoDrift(names[0]) // and the binary's own client agrees
}

// logSpread logs on how many primaries the sales' outboxes are; on a
// cluster they must be on more than one, or the test proves nothing there.
func (s *stack) logSpread(sales []string) {
	s.t.Helper()
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	per := map[string]int{}
	for _, sale := range sales {
		node, err := cc.MasterForKey(ctx, s.keys.Outbox(sale))
		if err != nil {
			s.t.Fatal(err)
		}
		per[node.Options().Addr]++
	}
	if len(per) < 2 {
		s.t.Fatalf("the outboxes of %d sales are all on one primary: %v", len(sales), per)
	}
	s.t.Logf("outboxes per primary: %v", per)
}

// manyCrowd buys from many sales at once until every one has answered
// sold_out: each buy is a new user on the next sale in turn (skipping the
// sold-out ones), sent again with the same Idempotency-Key while it gets no
// answer or a 503, as buyers does. It gives up after three minutes, which
// fails the test.
type manyCrowd struct {
	t        *testing.T
	mu       sync.Mutex
	accepted map[string]map[string]string // sale → order id → user
	soldOut  map[string]bool
	codes    map[int]int
	bad      []string
	n202     atomic.Int64
	wg       sync.WaitGroup
	cancel   context.CancelFunc
}

func startManyCrowd(t *testing.T, base string, sales []string, workers int) *manyCrowd {
	c := &manyCrowd{t: t, accepted: map[string]map[string]string{}, soldOut: map[string]bool{}, codes: map[int]int{}}
	for _, sale := range sales {
		c.accepted[sale] = map[string]string{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	c.cancel = cancel
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	again := retry.Backoff{Min: 20 * time.Millisecond, Max: 20 * time.Millisecond}
	var next atomic.Int64
	for range workers {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for ctx.Err() == nil {
				n := next.Add(1)
				sale, open := c.pick(sales, int(n))
				if !open {
					return
				}
				user := fmt.Sprintf("c%d", n)
				err := retry.Until(ctx, again, func(context.Context) error {
					code, id, body, err := buyOnce(client, base, sale, user)
					if err != nil || code == 503 {
						return errNoAnswer
					}
					c.record(sale, user, code, id, body)
					return nil
				}, nil)
				if err != nil {
					c.fail("manyCrowd deadline passed")
					return
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); c.wg.Wait(); client.CloseIdleConnections() })
	return c
}

// pick returns the first sale from the n-th in turn that is not sold out.
func (c *manyCrowd) pick(sales []string, n int) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range sales {
		if sale := sales[(n+i)%len(sales)]; !c.soldOut[sale] {
			return sale, true
		}
	}
	return "", false
}

func (c *manyCrowd) record(sale, user string, code int, id, body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.codes[code]++
	switch code {
	case 202:
		if id == "" {
			c.bad = append(c.bad, "202 without order id: "+body)
			return
		}
		if _, dup := c.accepted[sale][id]; dup {
			c.bad = append(c.bad, "order id "+id+" accepted twice")
		}
		c.accepted[sale][id] = user
		c.n202.Add(1)
	case 410:
		c.soldOut[sale] = true
	case 429: // shed: this user goes without
	default:
		c.bad = append(c.bad, sale+": "+strconv.Itoa(code)+" "+body)
	}
}

func (c *manyCrowd) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bad = append(c.bad, msg)
}

func (c *manyCrowd) waitAccepted(n int64, timeout time.Duration) {
	c.t.Helper()
	localstack.WaitFor(c.t, timeout, fmt.Sprintf("%d buys accepted", n), func() bool { return c.n202.Load() >= n })
}

// wait waits until every sale is sold out (or the manyCrowd gave up).
func (c *manyCrowd) wait() { c.wg.Wait(); c.cancel() }

// check fails the test on any answer no buyer should get and returns the
// accepted orders of each sale.
func (c *manyCrowd) check() map[string]map[string]string {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		c.t.Fatalf("%d unexpected answers, first ones: %q", len(c.bad), c.bad[:min(len(c.bad), 10)])
	}
	c.t.Logf("answers %v", c.codes)
	return c.accepted
}

// TestPipelineRabbitMQOutage guards invariant 6: "a restart of RabbitMQ
// ... loses no confirmed order and duplicates none". RabbitMQ is stopped
// in the middle of a burst, until the relay has failed to reach it twice
// more and a thousand more buys were accepted. Buys keep being accepted
// (the outbox holds them); once RabbitMQ is back every order arrives, once.
func TestPipelineRabbitMQOutage(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	s.createSale(g, "outage", 1000000, 1)

	b := startBuyers(t, "http://"+g.public, "outage", 16, -1, 2*time.Millisecond)
	b.waitAccepted(1000, time.Minute)
	metrics := "http://" + g.admin + "/metrics"
	errs := scrapeURL(t, metrics)["flashgate_relay_errors_total"]
	localstack.Control(t, "stop", "rabbitmq")
	down := b.n202.Load()
	// The outage lasts until the relay has failed to reach RabbitMQ twice
	// more and 1,000 more buys were accepted meanwhile.
	localstack.WaitFor(t, time.Minute, "the relay disconnected, 2 more relay errors, 1,000 buys accepted during the outage", func() bool {
		m := scrapeURL(t, metrics)
		return m["flashgate_relay_connected"] == 0 && m["flashgate_relay_errors_total"] >= errs+2 && b.n202.Load() >= down+1000
	})
	during := b.n202.Load() - down
	localstack.Control(t, "start", "rabbitmq")
	b.waitAccepted(b.n202.Load()+1000, time.Minute)
	b.stop()
	accepted := b.check() // no 5xx, no unanswered buy
	if during == 0 {
		t.Fatal("no buy was accepted while RabbitMQ was down")
	}
	t.Logf("%d buys accepted while RabbitMQ was down", during)

	s.waitDrained("outage", 3*time.Minute)
	s.checkExactlyOnce("outage", accepted)
	s.checkNoDrift("outage")
}

// TestRelayRabbitMQOutage guards invariant 6 at the relay: RabbitMQ is
// stopped under a running relay; entries added meanwhile stay in the
// outbox, and all reach the queue once it is back.
func TestRelayRabbitMQOutage(t *testing.T) {
	s := newStack(t)
	r, err := relay.New(s.cfg, relay.Deps{Redis: s.rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("relay did not stop")
		}
	})
	ids := s.addOutbox("rl", 100)
	localstack.WaitFor(t, 30*time.Second, "first entries relayed", func() bool { return s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val() == 0 })

	localstack.Control(t, "stop", "rabbitmq")
	ids = append(ids, s.addOutbox("rl", 500)...)
	errs := r.Stats().Errors
	localstack.WaitFor(t, time.Minute, "relay noticed the outage", func() bool { st := r.Stats(); return !st.Connected && st.Errors >= errs+2 })
	if n := s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val(); n != 500 {
		t.Fatalf("outbox holds %d entries while RabbitMQ is down, want 500", n)
	}
	localstack.Control(t, "start", "rabbitmq")
	localstack.WaitFor(t, 2*time.Minute, "outbox drained after RabbitMQ came back", func() bool { return s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val() == 0 })
	s.consumeIDs(ids)
	t.Logf("relay stats %+v", r.Stats())
}
