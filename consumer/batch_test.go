package consumer

import (
	"bytes"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// batchMessage is a batch message as the relay publishes it.
func batchMessage(id string, parts ...[]byte) amqp.Publishing {
	return amqp.Publishing{
		ContentType: order.ContentType, DeliveryMode: amqp.Persistent, Type: order.TypeBatch,
		MessageId: id, Body: order.AppendBatch(nil, parts...),
	}
}

func units(os ...order.Order) int64 {
	var n int64
	for _, o := range os {
		n += int64(o.Quantity)
	}
	return n
}

// checkAlone fails the test unless d is an order of a batch that the
// consumer dead-lettered alone: exactly the element's bytes, persistent,
// with the reason (containing why) and the batch message's id and index,
// and not dead-lettered by the broker (no x-death).
func checkAlone(t *testing.T, d amqp.Delivery, body []byte, messageID string, index int32, why string) {
	t.Helper()
	if !bytes.Equal(d.Body, body) {
		t.Errorf("dead-lettered %q, want %q", d.Body, body)
	}
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("dead-lettered order not persistent (mode %d)", d.DeliveryMode)
	}
	if r, _ := d.Headers[headerReason].(string); r == "" || !strings.Contains(r, why) {
		t.Errorf("reason header %q, want one containing %q", r, why)
	}
	if id, _ := d.Headers[headerMessageID].(string); id != messageID {
		t.Errorf("message id header %q, want %q", id, messageID)
	}
	if i, ok := d.Headers[headerIndex].(int32); !ok || i != index {
		t.Errorf("index header %v, want %d", d.Headers[headerIndex], index)
	}
	if _, ok := d.Headers["x-death"]; ok {
		t.Errorf("dead-lettered by the broker, not published alone: %v", d.Headers)
	}
}

// TestBatchMessageWrittenOnce guards Invariant 3 for batch messages: a
// message of N orders becomes N rows, counted once in the ledger, and the
// same message delivered again (as after a lost acknowledgement) adds
// nothing. Every order is marked created, the message is acknowledged, and
// the metrics count messages and orders apart.
func TestBatchMessageWrittenOnce(t *testing.T) {
	e := newEnv(t)
	os := orderdbtest.Orders("s", 7)
	e.seedRecords("s", os)
	msg := batchMessage("b1", bodies(t, os)...)
	e.publishMessages(msg)
	c, stop := e.startConsumer(nil)
	localstack.WaitFor(t, 20*time.Second, "the batch written", func() bool { return c.Stats().Inserted == 7 })
	e.publishMessages(msg)
	localstack.WaitFor(t, 20*time.Second, "the second copy handled", func() bool { return c.Stats().Duplicates == 7 })

	rows, u, lu, lo := e.totals("s")
	if rows != 7 || u != units(os...) || lu != u || lo != 7 {
		t.Fatalf("rows %d units %d ledger %d/%d; want 7 rows, %d units, counted once", rows, u, lu, lo, units(os...))
	}
	if s := c.Stats(); s.Deliveries != 2 || s.Orders != 14 || s.Inserted != 7 || s.DeadLettered != 0 || s.Redelivered != 0 {
		t.Fatalf("stats %+v; want 2 deliveries, 14 orders, 7 inserted", s)
	}
	e.waitMarked("s", os)
	wantSeries(t, c,
		"flashgate_consumer_deliveries_total 2\n",
		"flashgate_consumer_orders_total 14\n",
		"flashgate_consumer_inserted_total 7\n",
		"flashgate_consumer_duplicates_total 7\n",
		"flashgate_consumer_dead_lettered_total 0\n",
	)
	stop()
	e.wantAcked()
}

// TestMixedMessagesInOneCollect: single-order messages (the format older
// than batches) and batch messages gathered by one collect are written
// together, a batch delivered twice within it included, in transactions of
// at most batch_size orders. A poison message holds the collect's highest
// tag: it is rejected and its tag is not acknowledged again (which would
// close the channel), so the consumer goes on in the same session.
func TestMixedMessagesInOneCollect(t *testing.T) {
	e := newEnv(t)
	singles := orderdbtest.Orders("s", 3)
	b1, b2 := orderdbtest.Orders("s", 4), orderdbtest.Orders("s", 5)
	sb := bodies(t, singles)
	one := func(b []byte) amqp.Publishing {
		return amqp.Publishing{ContentType: order.ContentType, DeliveryMode: amqp.Persistent, Type: order.TypeOrder, Body: b}
	}
	msgs := []amqp.Publishing{
		one(sb[0]), batchMessage("b1", bodies(t, b1)...), one(sb[1]), batchMessage("b2", bodies(t, b2)...),
		batchMessage("b1", bodies(t, b1)...), one(sb[2]), one([]byte("not json")),
	}
	cfg := *e.cfg
	// The collect ends when it holds every message published, never by
	// the clock: one collect, 16 orders, transactions of 7, 7 and 2.
	cfg.Consumer.BatchSize = len(msgs)
	cfg.Consumer.BatchWait = time.Minute
	e.publishMessages(msgs...)
	c, stop := e.startConsumer(&cfg)
	localstack.WaitFor(t, 20*time.Second, "the collected messages handled", func() bool { s := c.Stats(); return s.Inserted+s.Duplicates == 16 })
	rows, u, lu, lo := e.totals("s")
	all := slices.Concat(singles, b1, b2)
	if rows != 12 || u != units(all...) || lu != u || lo != 12 {
		t.Fatalf("rows %d units %d ledger %d/%d; want 12 rows, %d units, counted once", rows, u, lu, lo, units(all...))
	}
	if s := c.Stats(); s.Deliveries != 7 || s.Orders != 16 || s.Inserted != 12 || s.Duplicates != 4 || s.Batches != 3 || s.DeadLettered != 1 {
		t.Fatalf("stats %+v; want 7 deliveries, 16 orders, 12 inserted, 4 duplicates, 3 transactions, 1 dead-lettered", s)
	}

	// A channel closed by a bad acknowledgement would show as a new
	// session, and the collect's messages delivered again.
	more := orderdbtest.Orders("t", len(msgs))
	e.publish(bodies(t, more)...)
	localstack.WaitFor(t, 20*time.Second, "the later messages written", func() bool { r, _, _, _ := e.totals("t"); return r == int64(len(more)) })
	if s := c.Stats(); s.Reconnects != 0 || s.Redelivered != 0 || s.Deliveries != 14 {
		t.Fatalf("stats %+v; want the same session, nothing delivered again", s)
	}
	if dead := e.waitDead(1); len(dead) != 1 || string(dead[0].Body) != "not json" {
		t.Fatalf("dead-letter queue holds %d messages, want the poison alone", len(dead))
	}
	stop()
	e.wantAcked()
}

// TestBatchMalformedOrderDeadLetteredAlone: orders of a batch that are not
// orders (a missing field, an unknown state) reach the dead-letter queue
// alone, each its own message holding exactly its bytes, in the batch's
// order, with the reason; the rest of the batch is written and the batch is
// acknowledged, not delivered again.
func TestBatchMalformedOrderDeadLetteredAlone(t *testing.T) {
	e := newEnv(t)
	good := orderdbtest.Orders("s", 3)
	gb := bodies(t, good)
	bad := [][]byte{[]byte(`{"order_id":"x"}`),
		[]byte(`{"order_id":"o1","sale_id":"s","user_id":"u","quantity":1,"reserved_at":1,"state":"shipped"}`)}
	e.publishMessages(batchMessage("b1", gb[0], bad[0], gb[1], gb[2], bad[1]))
	c, stop := e.startConsumer(nil)
	localstack.WaitFor(t, 20*time.Second, "the good orders written", func() bool { r, _, _, _ := e.totals("s"); return r == 3 })
	dead := e.waitDead(2)
	stop()

	if len(dead) != 2 {
		t.Fatalf("dead-letter queue holds %d messages, want the 2 malformed orders", len(dead))
	}
	checkAlone(t, dead[0], bad[0], "b1", 1, order.ErrMalformed.Error())
	checkAlone(t, dead[1], bad[1], "b1", 4, "state")
	if _, u, lu, lo := e.totals("s"); u != units(good...) || lu != u || lo != 3 {
		t.Fatalf("units %d ledger %d/%d; want %d units, 3 orders", u, lu, lo, units(good...))
	}
	if s := c.Stats(); s.Deliveries != 1 || s.Orders != 3 || s.Inserted != 3 || s.DeadLettered != 2 || s.Redelivered != 0 {
		t.Fatalf("stats %+v; want 1 delivery, 3 orders, 2 dead-lettered, nothing delivered again", s)
	}
	e.wantAcked()
}

// TestUnsplittableBatchDeadLetteredWhole: a message that is not one order
// nor a batch of them is poison whole, whatever good orders it holds, and
// so is a batch of one malformed order (a message of one order): each goes
// to the dead-letter queue as it came, nothing of it is written, and the
// consumer keeps going.
func TestUnsplittableBatchDeadLetteredWhole(t *testing.T) {
	e := newEnv(t)
	good := bodies(t, orderdbtest.Orders("s", 3))
	poison := []struct {
		name string
		body []byte
	}{
		{"unterminated array", []byte(`[{"order_id":"a"}`)},
		{"empty array", []byte(`[]`)},
		{"element not an object", order.AppendBatch(nil, good[1], []byte("7"))},
		{"array of one malformed order", []byte(`[{"order_id":"x"}]`)},
	}
	msgs := []amqp.Publishing{batchMessage("good", good[0])}
	for _, p := range poison {
		msgs = append(msgs, amqp.Publishing{ContentType: order.ContentType, DeliveryMode: amqp.Persistent,
			Type: order.TypeBatch, MessageId: p.name, Body: p.body})
	}
	e.publishMessages(msgs...)
	c, stop := e.startConsumer(nil)
	dead := e.waitDead(len(poison))
	e.publish(good[2]) // and it keeps going
	localstack.WaitFor(t, 20*time.Second, "the good orders written", func() bool { r, _, _, _ := e.totals("s"); return r == 2 })
	stop()

	if len(dead) != len(poison) {
		t.Fatalf("dead-letter queue holds %d messages, want %d", len(dead), len(poison))
	}
	byID := map[string]amqp.Delivery{}
	for _, d := range dead {
		byID[d.MessageId] = d
	}
	for _, p := range poison {
		d, ok := byID[p.name]
		switch {
		case !ok:
			t.Errorf("%s: not in the dead-letter queue", p.name)
		case !bytes.Equal(d.Body, p.body):
			t.Errorf("%s: dead-lettered %q, want it as it came, %q", p.name, d.Body, p.body)
		case d.Headers[headerReason] != nil:
			t.Errorf("%s: published by the consumer, not rejected whole", p.name)
		}
	}
	if rows, _, _, lo := e.totals("s"); rows != 2 || lo != 2 {
		t.Fatalf("%d rows, ledger %d orders; want only the 2 good messages' orders", rows, lo)
	}
	if s := c.Stats(); s.DeadLettered != uint64(len(poison)) || s.Orders != 2 {
		t.Fatalf("stats %+v; want %d dead-lettered, 2 orders", s, len(poison))
	}
}

// TestBatchDataErrorIsolatesTheOrder makes MySQL refuse an order of a batch
// as data (a column too narrow for it): only that order reaches the
// dead-letter queue, alone, and the rest of the batch is written. A
// one-order message refused alike beside it is rejected whole, as before
// batches.
func TestBatchDataErrorIsolatesTheOrder(t *testing.T) {
	e := newEnv(t)
	e.narrowQuantity()
	os := orderdbtest.Orders("s", 5)
	os[2].Quantity = 200 // out of TINYINT's range
	os[4].Quantity = 201
	bs := bodies(t, os)
	e.publishMessages(batchMessage("b1", bs[:4]...))
	e.publish(bs[4])
	c, stop := e.startConsumer(nil)
	localstack.WaitFor(t, 20*time.Second, "the other orders written", func() bool { r, _, _, _ := e.totals("s"); return r == 3 })
	dead := e.waitDead(2)
	stop()

	if len(dead) != 2 {
		t.Fatalf("dead-letter queue holds %d messages, want 2", len(dead))
	}
	alone, whole := dead[0], dead[1]
	if alone.Headers[headerReason] == nil {
		alone, whole = whole, alone
	}
	checkAlone(t, alone, bs[2], "b1", 2, "quantity")
	if !bytes.Equal(whole.Body, bs[4]) || whole.Headers[headerReason] != nil {
		t.Errorf("one-order message dead-lettered as %q (headers %v), want it rejected as it came", whole.Body, whole.Headers)
	}
	if _, u, lu, lo := e.totals("s"); u != units(os[0], os[1], os[3]) || lu != u || lo != 3 {
		t.Fatalf("units %d ledger %d/%d; want %d units, 3 orders", u, lu, lo, units(os[0], os[1], os[3]))
	}
	if s := c.Stats(); s.DeadLettered != 2 || s.Redelivered != 0 {
		t.Fatalf("stats %+v; want 2 dead-lettered, nothing delivered again", s)
	}
	e.wantAcked()
}

// TestBatchLargerThanBatchSize: a message carrying more orders than
// consumer.batch_size is written in several transactions, none larger than
// batch_size, and nothing is lost.
func TestBatchLargerThanBatchSize(t *testing.T) {
	e := newEnv(t)
	cfg := *e.cfg
	cfg.Consumer.BatchSize = 5
	var largest atomic.Int64
	observe := func(n int, _ time.Duration) {
		for {
			m := largest.Load()
			if int64(n) <= m || largest.CompareAndSwap(m, int64(n)) {
				return
			}
		}
	}
	os := orderdbtest.Orders("s", 12)
	e.publishMessages(batchMessage("b1", bodies(t, os)...))
	c, stop := e.startConsumerWith(&cfg, Deps{ObserveWrite: observe})
	localstack.WaitFor(t, 20*time.Second, "the orders written", func() bool { return c.Stats().Inserted == 12 })
	stop()

	if rows, u, lu, lo := e.totals("s"); rows != 12 || u != units(os...) || lu != u || lo != 12 {
		t.Fatalf("rows %d units %d ledger %d/%d; want 12 rows, %d units", rows, u, lu, lo, units(os...))
	}
	if s := c.Stats(); s.Batches != 3 || s.Orders != 12 || s.Deliveries != 1 {
		t.Fatalf("stats %+v; want 1 delivery of 12 orders in 3 transactions", s)
	}
	if n := largest.Load(); n > 5 {
		t.Fatalf("a transaction of %d orders; batch_size is 5", n)
	}
	e.wantAcked()
}

// TestDeadLetterFailureAcknowledgesNothing: when the broker cannot take an
// order of a batch into the dead-letter queue (here unroutable: the queue
// unbound, so the publish is returned), the batch is not acknowledged. The
// session ends and the batch comes again; the next session declares the
// binding again, the order reaches the dead-letter queue once, and the
// orders written twice are counted once.
func TestDeadLetterFailureAcknowledgesNothing(t *testing.T) {
	e := newEnv(t)
	c, stop := e.startConsumer(nil)
	localstack.WaitFor(t, 20*time.Second, "the consumer connected", func() bool { return c.Stats().Connected })
	// The session has declared its topology; the next one declares it again.
	if err := e.ch.QueueUnbind(broker.DeadLetter(e.cfg.AMQP.Queue), "", broker.DeadLetter(e.cfg.AMQP.Exchange), nil); err != nil {
		t.Fatal(err)
	}
	good := orderdbtest.Orders("s", 3)
	gb := bodies(t, good)
	bad := []byte(`{"order_id":"x"}`)
	e.publishMessages(batchMessage("b1", gb[0], gb[1], bad, gb[2]))
	dead := e.waitDead(1)
	localstack.WaitFor(t, 20*time.Second, "the batch acknowledged in the end", func() bool { n, _ := e.queued(); return n == 0 && c.Stats().DeadLettered == 1 })
	stop()

	if len(dead) != 1 {
		t.Fatalf("dead-letter queue holds %d messages, want the malformed order once", len(dead))
	}
	checkAlone(t, dead[0], bad, "b1", 2, order.ErrMalformed.Error())
	s := c.Stats()
	if s.Redelivered == 0 || s.Reconnects == 0 || s.DeadLettered != 1 {
		t.Fatalf("stats %+v; want the batch delivered again in a new session, one order dead-lettered", s)
	}
	if rows, u, lu, lo := e.totals("s"); rows != 3 || u != units(good...) || lu != u || lo != 3 {
		t.Fatalf("rows %d units %d ledger %d/%d; want 3 rows, counted once", rows, u, lu, lo)
	}
	e.wantAcked()
}
