package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/reconcile"
	"github.com/flashgate/flashgate/relay"
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

	b := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + g.public}, Sales: []string{"burst"}, Workers: 64, Users: 6000})
	b.Wait()
	accepted := b.Check()["burst"]
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

	b := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + g.public}, Sales: []string{"crash"}, Workers: 32, Users: -1, Pause: time.Millisecond})
	b.WaitAccepted(2000, time.Minute)
	g.kill9(t)
	before := b.N202()
	s.startGateway(g) // same ports
	b.WaitAccepted(before+2000, time.Minute)
	b.Stop()
	accepted := b.Check()["crash"]

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

	// Each buy a new buyer on the next sale in turn, skipping the sold-out
	// ones, until every sale has answered sold_out.
	c := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + g.public}, Sales: names, SkipSoldOut: true,
		Users: -1, Prefix: "c", Workers: 48, Final: []string{"sold_out", "rate_limited"}})
	c.WaitAccepted(sales*stock/3, time.Minute)
	g.kill9(t)
	s.startGateway(g)
	c.Wait()
	accepted := c.Check()
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

	b := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + g.public}, Sales: []string{"outage"}, Workers: 16, Users: -1, Pause: 2 * time.Millisecond})
	b.WaitAccepted(1000, time.Minute)
	metrics := "http://" + g.admin + "/metrics"
	errs := scrapeURL(t, metrics)["flashgate_relay_errors_total"]
	localstack.Control(t, "stop", "rabbitmq")
	down := b.N202()
	// The outage lasts until the relay has failed to reach RabbitMQ twice
	// more and 1,000 more buys were accepted meanwhile.
	localstack.WaitFor(t, time.Minute, "the relay disconnected, 2 more relay errors, 1,000 buys accepted during the outage", func() bool {
		m := scrapeURL(t, metrics)
		return m["flashgate_relay_connected"] == 0 && m["flashgate_relay_errors_total"] >= errs+2 && b.N202() >= down+1000
	})
	during := b.N202() - down
	localstack.Control(t, "start", "rabbitmq")
	b.WaitAccepted(b.N202()+1000, time.Minute)
	b.Stop()
	accepted := b.Check()["outage"] // no 5xx, no unanswered buy
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
