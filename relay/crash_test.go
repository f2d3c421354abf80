package relay

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
)

// TestClaimsEntriesOfDeadRelay leaves entries pending with a consumer that
// never comes back. Invariant 6 (a crash of a relay at any instant loses no
// confirmed order): another relay claims and publishes them all.
func TestClaimsEntriesOfDeadRelay(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ids := e.addOrders("s", 50)
	// A relay reads the entries and dies before publishing them.
	if err := e.rdb.XGroupCreateMkStream(ctx, e.keys.Outbox("s"), Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: "dead", Streams: []string{e.keys.Outbox("s"), ">"}, Count: 100, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	r, _ := e.startRelay("alive")
	got := e.received(ids, 30*time.Second)
	if len(got) != 50 {
		t.Fatalf("%d orders arrived, want 50", len(got))
	}
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty("s") })
	if c := r.Stats().Claimed; c != 50 {
		t.Fatalf("claimed %d, want 50", c)
	}
}

// TestManyRelaysShareSales runs three relays on the same sales. Invariant
// 10 (adding a gateway never breaks 1-9): every order arrives and every
// outbox empties; duplicates are allowed (at least once) and counted. Each
// batch of orders is noticed by one relay, as by its gateway's, a
// different one from batch to batch, so every relay works on every sale.
func TestManyRelaysShareSales(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		e.rdb.SAdd(context.Background(), e.keys.Sales(), "s"+strconv.Itoa(i))
	}
	var relays []*Relay
	for i := range 3 {
		r, _ := e.startRelay("r" + strconv.Itoa(i))
		relays = append(relays, r)
	}
	var ids []string
	for k := range 10 {
		for i := range 3 {
			sale := "s" + strconv.Itoa(i)
			ids = append(ids, e.addOrders(sale, 100)...)
			relays[(i+k)%3].Wrote(sale)
		}
	}
	got := e.received(ids, 60*time.Second)
	dups := 0
	for _, n := range got {
		dups += n - 1
	}
	t.Logf("%d orders, %d duplicates on the broker", len(got), dups)
	for i := range 3 {
		sale := "s" + strconv.Itoa(i)
		localstack.WaitFor(t, 10*time.Second, sale+": the outbox emptied", func() bool { return e.outboxEmpty(sale) })
	}
}

// TestShutdownNeverDeletesUnconfirmed stops a relay in the middle of a
// backlog. Invariant 6 (a stop or crash of a relay loses no confirmed
// order): every entry gone from the outbox must be on the broker, and what
// is still in the outbox is there for the next relay.
func TestShutdownNeverDeletesUnconfirmed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ids := e.addOrders("s", 5000)
	r, stop := e.startRelay("r1")
	localstack.WaitFor(t, 20*time.Second, "an entry confirmed", func() bool { return r.Stats().Removed > 0 })
	stop()
	left := map[string]bool{}
	for _, m := range e.rdb.XRange(ctx, e.keys.Outbox("s"), "-", "+").Val() {
		o, err := order.FromStream(m.Values)
		if err != nil {
			t.Fatal(err)
		}
		left[o.OrderID] = true
	}
	var gone []string
	for _, id := range ids {
		if !left[id] {
			gone = append(gone, id)
		}
	}
	t.Logf("stopped with %d of %d entries relayed", len(gone), len(ids))
	e.received(gone, 30*time.Second) // fails unless every removed entry is on the broker

	// A second relay finishes the job, claiming what the first held.
	e.startRelay("r2")
	localstack.WaitFor(t, 30*time.Second, "the second relay draining the outbox", func() bool { return e.outboxEmpty("s") })
}
