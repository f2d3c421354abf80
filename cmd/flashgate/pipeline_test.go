package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
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

// TestPipelineRabbitMQOutage guards invariant 6: "a restart of RabbitMQ
// ... loses no confirmed order and duplicates none". RabbitMQ is stopped
// for several seconds in the middle of a burst. Buys keep being accepted
// (the outbox holds them); once RabbitMQ is back every order arrives, once.
func TestPipelineRabbitMQOutage(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(2)
	s.createSale(g, "outage", 1000000, 1)

	b := startBuyers(t, "http://"+g.public, "outage", 16, -1, 2*time.Millisecond)
	b.waitAccepted(1000, time.Minute)
	localstack.Control(t, "stop", "rabbitmq")
	down := b.n202.Load()
	time.Sleep(3 * time.Second) // the outage lasts; buyers keep buying
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
	waitUntil(t, 30*time.Second, "first entries relayed", func() bool { return s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val() == 0 })

	localstack.Control(t, "stop", "rabbitmq")
	ids = append(ids, s.addOutbox("rl", 500)...)
	errs := r.Stats().Errors
	waitUntil(t, time.Minute, "relay noticed the outage", func() bool { st := r.Stats(); return !st.Connected && st.Errors >= errs+2 })
	if n := s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val(); n != 500 {
		t.Fatalf("outbox holds %d entries while RabbitMQ is down, want 500", n)
	}
	localstack.Control(t, "start", "rabbitmq")
	waitUntil(t, 2*time.Minute, "outbox drained after RabbitMQ came back", func() bool { return s.rdb.XLen(ctx, s.keys.Outbox("rl")).Val() == 0 })
	s.consumeIDs(ids)
	t.Logf("relay stats %+v", r.Stats())
}
