package relay

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
)

// addOrders writes n entries to the sale's outbox the way the reserve script
// does, registers the sale and returns the order ids.
func (e *env) addOrders(sale string, n int) []string {
	e.t.Helper()
	ctx := context.Background()
	if err := e.rdb.SAdd(ctx, e.keys.Sales(), sale).Err(); err != nil {
		e.t.Fatal(err)
	}
	ids := make([]string, n)
	pipe := e.rdb.Pipeline()
	for i := range ids {
		ids[i] = sale + "-o" + strconv.Itoa(i) + "-" + localstack.RandomHex(3)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox(sale), Values: []any{
			"order_id", ids[i], "sale_id", sale, "user_id", "u" + strconv.Itoa(i),
			"quantity", strconv.Itoa(1 + i%3), "reserved_at", strconv.FormatInt(time.Now().UnixMilli(), 10),
		}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// startRelay runs a relay on the env's Redis until the test ends; the test
// fails if Run does not return within its drain bound.
func (e *env) startRelay(name string) (*Relay, context.CancelFunc) {
	e.t.Helper()
	return e.startRelayWith(context.Background(), Deps{Redis: e.rdb, Name: name}, nil)
}

// startRelayWith is startRelay with deps of the test's (Deps.Redis, Name
// and ScanEvery), a change of the relay before Run (nil: none), and a ctx
// whose values Run's calls carry.
func (e *env) startRelayWith(ctx context.Context, deps Deps, tweak func(*Relay)) (*Relay, context.CancelFunc) {
	e.t.Helper()
	r, err := New(e.cfg, deps)
	if err != nil {
		e.t.Fatal(err)
	}
	if tweak != nil {
		tweak(r)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("Run: %v", err)
			}
		case <-time.After(r.drain + 10*time.Second):
			e.t.Errorf("relay %s: Run did not return after its ctx ended", r.Name())
		}
	}
	var once sync.Once
	e.t.Cleanup(func() { once.Do(stop) })
	return r, func() { once.Do(stop) }
}

// received consumes the queue until every id in want has arrived or the
// timeout passes, and returns how often each order id arrived.
func (e *env) received(want []string, timeout time.Duration) map[string]int {
	e.t.Helper()
	return consumeUntil(e.t, e.ch, e.cfg.AMQP.Queue, want, timeout)
}

func consumeUntil(t *testing.T, ch *amqp.Channel, queue string, want []string, timeout time.Duration) map[string]int {
	t.Helper()
	tag := "test-" + localstack.RandomHex(4)
	deliveries, err := ch.Consume(queue, tag, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	defer func() { _ = ch.Cancel(tag, false) }()
	missing := map[string]bool{}
	for _, id := range want {
		missing[id] = true
	}
	got := map[string]int{}
	deadline := time.After(timeout)
	for len(missing) > 0 {
		select {
		case d, ok := <-deliveries:
			if !ok {
				t.Fatalf("deliveries closed with %d orders missing", len(missing))
			}
			for _, o := range ordersOf(t, d) {
				got[o.OrderID]++
				delete(missing, o.OrderID)
			}
		case <-deadline:
			t.Fatalf("after %v, %d of %d orders have not arrived", timeout, len(missing), len(want))
		}
	}
	return got
}

// ordersOf decodes a message of one order or a batch and, when the relay
// sent it, checks its properties: persistent, the content type of its form
// (lines, the default, or JSON), the type saying which, the first order's
// id as message id.
func ordersOf(t *testing.T, d amqp.Delivery) []order.Order {
	t.Helper()
	parts, err := order.Split(d.Body)
	if err != nil {
		t.Fatalf("message %q: %v", d.Body, err)
	}
	os := make([]order.Order, len(parts))
	for i, p := range parts {
		if os[i], err = order.Unmarshal(p); err != nil {
			t.Fatalf("message %q: element %d is not an order: %v", d.Body, i, err)
		}
	}
	typ := order.TypeOrder
	if len(os) > 1 {
		typ = order.TypeBatch
	}
	if d.AppId != "flashgate" {
		return os // a test's own message (publishFiller)
	}
	ct := order.ContentType
	if order.IsLines(d.Body) {
		ct = order.ContentTypeLines
	}
	if d.MessageId != os[0].OrderID || d.CorrelationId == "" || d.ContentType != ct || d.DeliveryMode != amqp.Persistent || d.Type != typ {
		t.Fatalf("message properties: id %q (first order %q), correlation id %q, content type %q, mode %d, type %q (%d orders)",
			d.MessageId, os[0].OrderID, d.CorrelationId, d.ContentType, d.DeliveryMode, d.Type, len(os))
	}
	return os
}

// outboxEmpty reports whether the sale's outbox has no entry and its group
// nothing pending.
func (e *env) outboxEmpty(sale string) bool {
	ctx := context.Background()
	n, err := e.rdb.XLen(ctx, e.keys.Outbox(sale)).Result()
	if err != nil || n != 0 {
		return false
	}
	p, err := e.rdb.XPending(ctx, e.keys.Outbox(sale), Group).Result()
	return err == nil && p.Count == 0
}

// TestPublishesThenDeletes relays two sales' backlogs. Invariant 3 (the
// relay's leg: every 202 becomes exactly one MySQL row): every entry reaches
// the queue, and only then leaves its outbox.
func TestPublishesThenDeletes(t *testing.T) {
	e := newEnv(t)
	a := e.addOrders("sale-a", 700)
	b := e.addOrders("sale-b", 300)
	r, _ := e.startRelay("r1")

	got := e.received(append(a, b...), 30*time.Second)
	if len(got) != 1000 {
		t.Fatalf("%d distinct orders arrived, want 1000", len(got))
	}
	localstack.WaitFor(t, 10*time.Second, "the outboxes emptied", func() bool { return e.outboxEmpty("sale-a") && e.outboxEmpty("sale-b") })
	localstack.WaitFor(t, 5*time.Second, "the stats of the relayed entries", func() bool {
		s := r.Stats()
		return s.Removed >= 1000 && s.InFlight == 0 && s.Tracked == 0 && s.Connected
	})
	s := r.Stats()
	if s.Confirmed < 1000 || s.Published < s.Confirmed || s.Malformed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRunTwice(t *testing.T) {
	e := newEnv(t)
	r, _ := e.startRelay("r1")
	localstack.WaitFor(t, 10*time.Second, "the relay connected", func() bool { return r.Stats().Connected })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // in case the first Run has not started after all
	if err := r.Run(ctx); err == nil {
		t.Fatal("second Run returned nil")
	}
}

func TestNewValidates(t *testing.T) {
	e := newEnv(t)
	if _, err := New(e.cfg, Deps{}); err == nil {
		t.Fatal("New without Redis succeeded")
	}
	cfg := *e.cfg
	cfg.Relay.MaxInFlight = 0
	if _, err := New(&cfg, Deps{Redis: e.rdb}); err == nil {
		t.Fatal("New with max_in_flight 0 succeeded")
	}
}

// TestRelaysStateSnapshots guards Invariant 8's relay leg (MySQL's state
// follows Redis's): an order's entry and the entry of its change of state,
// as the reserve and order scripts write them, are published as they are,
// each, and then deleted; each message
// names its order (message id) and its entry (correlation id), so that a
// return of one is never taken for the other's. An entry written before
// payment windows (no state) is published as a confirmed order.
func TestRelaysStateSnapshots(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const sale = "s"
	if err := e.rdb.SAdd(ctx, e.keys.Sales(), sale).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	finals := []string{order.StatePaid, order.StateCancelled, order.StateExpired}
	type sent struct{ id, state string }
	var want []sent
	pipe := e.rdb.Pipeline()
	add := func(id, state string, fields ...any) {
		v := append([]any{"order_id", id, "sale_id", sale, "user_id", "u-" + id, "quantity", "2",
			"reserved_at", strconv.FormatInt(now, 10)}, fields...)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox(sale), Values: v})
		want = append(want, sent{id, state})
	}
	for i := range 30 {
		id := "o" + strconv.Itoa(i) + "-" + localstack.RandomHex(3)
		payBy := strconv.FormatInt(now+60_000, 10)
		add(id, order.StatePendingPayment, "state", order.StatePendingPayment, "pay_by", payBy)
		add(id, finals[i%3], "state", finals[i%3], "pay_by", payBy)
	}
	add("old-"+localstack.RandomHex(3), order.StateConfirmed) // no state, no pay_by
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	e.startRelay("r1")

	tag := "test-" + localstack.RandomHex(4)
	deliveries, err := e.ch.Consume(e.cfg.AMQP.Queue, tag, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.ch.Cancel(tag, false) }()
	missing := map[sent]bool{}
	for _, w := range want {
		missing[w] = true
	}
	entries := map[string]sent{} // correlation id → what it carried
	timeout := time.After(30 * time.Second)
	for len(missing) > 0 {
		select {
		case d := <-deliveries:
			os := ordersOf(t, d)
			first := sent{os[0].OrderID, os[0].State}
			if prev, seen := entries[d.CorrelationId]; seen && prev != first {
				t.Fatalf("message of %v: correlation id %q carried %v before", first, d.CorrelationId, prev)
			}
			entries[d.CorrelationId] = first
			for _, o := range os {
				if o.State == order.StatePendingPayment && o.PayBy.UnixMilli() != now+60_000 {
					t.Fatalf("order %s: pay_by %v", o.OrderID, o.PayBy)
				}
				delete(missing, sent{o.OrderID, o.State})
			}
		case <-timeout:
			t.Fatalf("%d of %d messages never arrived: %v", len(missing), len(want), missing)
		}
	}
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty(sale) })
}
