package consumer

import (
	"testing"
	"time"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// TestConsumerIdempotentAndMarks guards Invariant 3 (every 202 becomes
// exactly one MySQL row) where RabbitMQ delivers an order twice: one row,
// counted once in the ledger, then marked created for status polling. The
// consumer's metrics say the same: the second copy of each is a duplicate
// (a snapshot of an order already in MySQL) that changed no state.
func TestConsumerIdempotentAndMarks(t *testing.T) {
	e := newEnv(t)
	os := orderdbtest.Orders("s", 3)
	e.seedRecords("s", os)
	e.wantQueued("s", os)
	bs := bodies(t, os)
	e.publish(append(bs, bs...)...) // every message twice
	c, _ := e.startConsumer(nil)
	localstack.WaitFor(t, 20*time.Second, "six deliveries handled", func() bool { s := c.Stats(); return s.Inserted+s.Duplicates == 6 })
	rows, units, lu, lo := e.totals("s")
	if rows != 3 || units != 6 || lu != 6 || lo != 3 {
		t.Fatalf("rows %d units %d ledger %d/%d; want 3 rows, 6 units, counted once", rows, units, lu, lo)
	}
	if s := c.Stats(); s.Inserted != 3 || s.Duplicates != 3 {
		t.Fatalf("stats %+v", s)
	}
	e.waitMarked("s", os)
	wantSeries(t, c,
		"flashgate_consumer_inserted_total 3\n",
		"flashgate_consumer_duplicates_total 3\n",
		"flashgate_consumer_state_updates_total 0\n",
		"flashgate_consumer_deliveries_total 6\n",
		"flashgate_consumer_connected 1\n",
		"flashgate_consumer_batch_size_count ",
		"flashgate_consumer_insert_duration_seconds_count ",
	)
}

// TestConsumerStateSnapshots guards Invariants 3 and 8 through RabbitMQ:
// snapshots of orders in their states arrive in any order and some twice.
// Each order is one row, counted once in the ledger, in its latest state,
// and a final state stays final whatever is delivered after it: a pending
// order then paid then its pending snapshot again stays paid; a payment
// delivered before its order inserts the order (paid) and the order's own
// message changes nothing; a confirmed order cancelled stays cancelled when
// its confirmed snapshot comes again. Every order is marked created.
func TestConsumerStateSnapshots(t *testing.T) {
	e := newEnv(t)
	os := orderdbtest.Orders("s", 3)
	e.seedRecords("s", os)
	payBy := time.UnixMilli(time.Now().Add(time.Minute).UnixMilli()).UTC()
	in := func(o order.Order, state string) order.Order {
		o.State = state
		if state != order.StateConfirmed && state != order.StateCancelled {
			o.PayBy = payBy
		}
		return o
	}
	a, b, c := os[0], os[1], os[2]
	seq := []order.Order{
		in(a, order.StatePendingPayment), in(b, order.StatePaid), in(c, order.StateConfirmed),
		in(a, order.StatePaid), in(b, order.StatePendingPayment), in(c, order.StateCancelled),
		in(c, order.StateConfirmed), in(a, order.StatePendingPayment),
	}
	// One at a time, so that some land in batches of their own and some
	// together: the outcome must not depend on it.
	cons, _ := e.startConsumer(nil)
	for _, body := range bodies(t, seq) {
		e.publish(body)
	}
	localstack.WaitFor(t, 20*time.Second, "eight deliveries handled", func() bool { s := cons.Stats(); return s.Inserted+s.Duplicates == 8 })
	if s := cons.Stats(); s.Inserted != 3 || s.Duplicates != 5 || s.DeadLettered != 0 {
		t.Fatalf("stats %+v; want 3 inserted, 5 duplicates", s)
	}
	rows, units, lu, lo := e.totals("s")
	if rows != 3 || lo != 3 || lu != units {
		t.Fatalf("rows %d units %d ledger %d/%d; want 3 rows, counted once", rows, units, lu, lo)
	}
	for _, want := range []struct {
		o     order.Order
		state string
	}{{a, order.StatePaid}, {b, order.StatePaid}, {c, order.StateCancelled}} {
		if st, _ := orderdbtest.State(t, e.db, want.o.OrderID); st != want.state {
			t.Errorf("order %s: state %q, want %q", want.o.OrderID, st, want.state)
		}
	}
	e.waitMarked("s", os)
}

// TestPoisonMessageIsDeadLettered: a message that is not an order (an
// unknown state included) goes to the dead-letter queue, as it came, and
// the consumer keeps going.
func TestPoisonMessageIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	good := orderdbtest.Orders("s", 4)
	gb := bodies(t, good)
	poison := [][]byte{[]byte("not json"), []byte(`{"order_id":"x"}`),
		[]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"shipped"}`)}
	e.publish(gb[0], poison[0], gb[1], poison[1], poison[2])
	c, _ := e.startConsumer(nil)
	localstack.WaitFor(t, 20*time.Second, "the poison dead-lettered", func() bool { return c.Stats().DeadLettered == 3 })
	e.publish(gb[2], gb[3]) // and it keeps going
	localstack.WaitFor(t, 20*time.Second, "the good orders written", func() bool { r, _, _, _ := e.totals("s"); return r == 4 })

	var dead []string
	localstack.WaitFor(t, 10*time.Second, "the poison in the dead-letter queue", func() bool {
		d, ok, err := e.ch.Get(broker.DeadLetter(e.cfg.AMQP.Queue), true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			dead = append(dead, string(d.Body))
		}
		return len(dead) == 3
	})
	if dead[0] != string(poison[0]) || dead[1] != string(poison[1]) || dead[2] != string(poison[2]) {
		t.Fatalf("dead-letter queue holds %q", dead)
	}
}

// TestShutdownFinishesBatchInHand guards Invariant 6 on the graceful path (a
// stopped consumer loses no confirmed order and duplicates none): cancelled
// while it holds deliveries it has not written yet, it must write and
// acknowledge them before Run returns, leaving nothing to redeliver.
func TestShutdownFinishesBatchInHand(t *testing.T) {
	e := newEnv(t)
	cfg := *e.cfg
	cfg.Consumer.BatchSize = 1000
	cfg.Consumer.Prefetch = 1000
	cfg.Consumer.BatchWait = time.Minute // only the shutdown ends this batch
	e.publish(bodies(t, orderdbtest.Orders("s", 200))...)
	c, stop := e.startConsumer(&cfg)
	localstack.WaitFor(t, 20*time.Second, "the consumer holding the deliveries", func() bool {
		q, err := e.ch.QueueDeclarePassive(e.cfg.AMQP.Queue, true, false, false, false, nil)
		return err == nil && q.Messages == 0 && c.Stats().Connected
	})
	if rows, _, _, _ := e.totals("s"); rows != 0 {
		t.Fatalf("%d rows before the batch was due", rows)
	}
	stop()
	if rows, _, _, lo := e.totals("s"); rows != 200 || lo != 200 {
		t.Fatalf("after shutdown: %d rows, ledger %d orders; want 200", rows, lo)
	}
	// Everything was acknowledged: nothing comes back to the queue.
	localstack.WaitFor(t, 5*time.Second, "the queue empty", func() bool {
		q, err := e.ch.QueueDeclarePassive(e.cfg.AMQP.Queue, true, false, false, false, nil)
		return err == nil && q.Messages == 0 && q.Consumers == 0
	})
}

// TestDataErrorIsolatesTheOrder makes MySQL refuse one order as data (a
// column too narrow for it): only that one is dead-lettered.
func TestDataErrorIsolatesTheOrder(t *testing.T) {
	e := newEnv(t)
	e.narrowQuantity()
	os := orderdbtest.Orders("s", 3)
	os[1].Quantity = 200 // out of TINYINT's range
	e.publish(bodies(t, os)...)
	c, _ := e.startConsumer(nil)
	localstack.WaitFor(t, 20*time.Second, "the refused order dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	localstack.WaitFor(t, 10*time.Second, "the other orders written", func() bool { r, _, _, _ := e.totals("s"); return r == 2 })
	_, units, lu, _ := e.totals("s")
	if units != int64(os[0].Quantity+os[2].Quantity) || lu != units {
		t.Fatalf("units %d ledger %d", units, lu)
	}
}

// The prefetch counts orders: a consumer takes consumer.prefetch ÷
// relay.message_orders messages at a time, so that a second consumer on a
// filled queue of batch messages gets its share.
func TestPrefetchCountsOrders(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ prefetch, per, want int }{{512, 128, 4}, {512, 1, 512}, {100, 128, 1}, {513, 128, 5}} {
		cfg := *e.cfg
		cfg.Consumer.Prefetch, cfg.Relay.MessageOrders = c.prefetch, c.per
		con, err := New(&cfg, Deps{DB: e.db})
		if err != nil {
			t.Fatal(err)
		}
		if got := con.prefetch(); got != c.want {
			t.Errorf("prefetch %d orders, %d per message: %d messages, want %d", c.prefetch, c.per, got, c.want)
		}
	}
}
