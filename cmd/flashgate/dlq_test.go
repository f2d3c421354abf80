package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
)

// The dead-letter queue read and moved back by `flashgate dlq`, against
// the stack's own queues and a real consumer writing to MySQL.

// dlqOrders returns n orders of sale named prefix-i.
func (s *stack) dlqOrders(sale, prefix string, n int) []order.Order {
	now := time.UnixMilli(time.Now().UnixMilli()).UTC()
	os := make([]order.Order, n)
	for i := range os {
		os[i] = order.Order{OrderID: fmt.Sprintf("%s-%s-%s-%d", sale, s.id, prefix, i), SaleID: sale, UserID: prefix + "-u" + fmt.Sprint(i), Quantity: 1, ReservedAt: now}
	}
	return os
}

// dlqSession opens a session on the stack's topology, in confirm mode.
func (s *stack) dlqSession() *broker.Session {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := broker.Open(ctx, s.cfg.AMQP, "dlq test")
	if err != nil {
		s.t.Fatalf("RabbitMQ (run `make up`): %v", err)
	}
	s.t.Cleanup(func() { _ = sess.Close() })
	if err := sess.Channel.Confirm(false); err != nil {
		s.t.Fatal(err)
	}
	return sess
}

// dlqPublish publishes the orders as one message (a batch when more than
// one) to exchange with routing key, and waits for the confirm.
func (s *stack) dlqPublish(sess *broker.Session, exchange, key string, headers amqp.Table, os ...order.Order) {
	s.t.Helper()
	bodies := make([][]byte, len(os))
	for i, o := range os {
		b, err := o.Marshal()
		if err != nil {
			s.t.Fatal(err)
		}
		bodies[i] = b
	}
	msg := amqp.Publishing{ContentType: order.ContentType, DeliveryMode: amqp.Persistent, MessageId: os[0].OrderID,
		Type: order.TypeOrder, Timestamp: time.Now(), Headers: headers, Body: bodies[0]}
	if len(os) > 1 {
		msg.Type = order.TypeBatch
		msg.Body = order.AppendBatch(nil, bodies...)
		if msg.Headers == nil {
			msg.Headers = amqp.Table{}
		}
		msg.Headers[order.CountHeader] = int32(len(os))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := sess.Channel.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		s.t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		s.t.Fatalf("publish to %s not confirmed: %v", exchange, err)
	}
}

// dlqReject takes one message off the orders queue and rejects it without
// requeue, as the consumer rejects a message it can never process: the
// broker dead-letters it with its x-death header.
func (s *stack) dlqReject(sess *broker.Session) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		d, ok, err := sess.Channel.Get(s.cfg.AMQP.Queue, false)
		if err != nil {
			s.t.Fatal(err)
		}
		if ok {
			if err := d.Nack(false, false); err != nil {
				s.t.Fatal(err)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatal("no message on the orders queue to reject")
}

// deadDepth is the number of messages ready in the stack's dead-letter queue.
func (s *stack) deadDepth() int {
	s.t.Helper()
	c := s.cfg.AMQP
	c.Queue = broker.DeadLetter(c.Queue)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := broker.QueueDepth(ctx, c, "dlq test depth")
	if err != nil {
		s.t.Fatal(err)
	}
	return d.Ready
}

// dlq runs `flashgate dlq args...` and fails the test unless it exits with
// code want.
func (s *stack) dlq(want int, args ...string) string {
	s.t.Helper()
	out, code := s.command(append([]string{"dlq"}, args...)...)
	if code != want {
		s.t.Fatalf("flashgate dlq %v: exit %d, want %d\n%s", args, code, want, out)
	}
	return out
}

// waitOrdersQueueEmpty waits until the consumer has taken every message
// off the orders queue (delivered, perhaps not yet written).
func (s *stack) waitOrdersQueueEmpty() {
	s.t.Helper()
	localstack.WaitFor(s.t, time.Minute, "the orders queue empty", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := broker.QueueDepth(ctx, s.cfg.AMQP, "dlq test depth")
		return err == nil && d.Ready == 0
	})
}

func mustContain(t *testing.T, what, out string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(out, sub) {
			t.Fatalf("%s: no %q in\n%s", what, sub, out)
		}
	}
}

// TestDLQ: dead letters of both kinds (a batch the consumer rejected whole,
// dead-lettered by the broker with x-death; orders the consumer
// dead-lettered alone with its reason), one of them an order already in
// MySQL. list and show read them and leave them; requeue by reason moves
// only those; an interrupted requeue loses nothing; the rest requeued, a
// real consumer writes every order to MySQL once.
func TestDLQ(t *testing.T) {
	s := newStack(t)
	const sale = "dlq"
	sess := s.dlqSession()
	ex, dlx := s.cfg.AMQP.Exchange, broker.DeadLetter(s.cfg.AMQP.Exchange)

	// A batch of three, rejected whole (no consumer runs yet).
	rejected := s.dlqOrders(sale, "rej", 3)
	s.dlqPublish(sess, ex, broker.RoutingKey, nil, rejected...)
	s.dlqReject(sess)
	localstack.WaitFor(t, 30*time.Second, "the rejected batch in the dead-letter queue", func() bool { return s.deadDepth() == 1 })

	// An order the consumer writes, and which is also a dead letter.
	written := s.dlqOrders(sale, "done", 1)
	s.startConsumers(1)
	s.dlqPublish(sess, ex, broker.RoutingKey, nil, written...)
	localstack.WaitFor(t, time.Minute, "the written order in MySQL", func() bool { r, _ := s.count(sale); return r == 1 })

	// Orders dead-lettered alone by the consumer, with its reason.
	const why = "orderdb: insert: Error 1406: Data too long for column"
	alone := s.dlqOrders(sale, "alone", 4)
	for _, o := range append(alone, written...) {
		s.dlqPublish(sess, dlx, "", amqp.Table{broker.ReasonHeader: why, "x-flashgate-message-id": "m-1", "x-flashgate-index": int32(0)}, o)
	}
	if n := s.deadDepth(); n != 6 {
		t.Fatalf("dead-letter queue: %d messages, want 6", n)
	}

	// list and show read and put back.
	out := s.dlq(0, "list")
	mustContain(t, "dlq list", out, "6 messages", "orders: 8", "oldest: ", "1  rejected", "5  "+why)
	out = s.dlq(0, "show", "2")
	mustContain(t, "dlq show 2", out, "showing 2", "reason: rejected", "reason: "+why,
		"order "+rejected[0].OrderID, "order "+rejected[2].OrderID, "order "+alone[0].OrderID)
	if strings.Contains(out, alone[1].OrderID) {
		t.Fatalf("dlq show 2 shows a third message:\n%s", out)
	}
	if n := s.deadDepth(); n != 6 {
		t.Fatalf("after list and show: %d dead letters, want the 6 still there", n)
	}
	t.Logf("list and show read 6 dead letters (8 orders) and left them")

	// requeue by reason moves only those.
	out = s.dlq(0, "requeue", "--reason", "rejected")
	mustContain(t, "dlq requeue --reason rejected", out, "requeue: 1 message moved", "5 left")
	localstack.WaitFor(t, time.Minute, "the rejected batch in MySQL", func() bool { r, _ := s.count(sale); return r == 4 })
	if n := s.deadDepth(); n != 5 {
		t.Fatalf("after requeue --reason rejected: %d dead letters, want 5", n)
	}

	// An interrupted requeue: cancelled after its second move.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := broker.Requeue(ctx, s.cfg.AMQP, "dlq test requeue", broker.RequeueOptions{Max: 1000, OnMoved: func(r broker.RequeueResult) {
		if r.Moved == 2 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) || res.Moved != 2 {
		t.Fatalf("interrupted requeue: moved %d, %v; want 2 and context.Canceled", res.Moved, err)
	}
	localstack.WaitFor(t, 30*time.Second, "the three others back in the dead-letter queue", func() bool { return s.deadDepth() == 3 })
	// Nothing lost: each order is in MySQL (once the consumer has written
	// what it took) or still a dead letter.
	var rows map[string]int
	var dead []broker.Dead
	var missing []string
	localstack.WaitFor(t, time.Minute, "every order in MySQL or a dead letter", func() bool {
		rows, _, _ = s.mysqlOrders(sale)
		var err error
		if dead, _, err = broker.Browse(context.Background(), s.cfg.AMQP, "dlq test browse", 100); err != nil {
			t.Fatal(err)
		}
		for _, d := range dead {
			o, err := order.Unmarshal(d.Delivery.Body)
			if err != nil {
				t.Fatal(err)
			}
			rows[o.OrderID]++
		}
		missing = missing[:0]
		for _, o := range append(append([]order.Order(nil), alone...), written...) {
			if rows[o.OrderID] == 0 {
				missing = append(missing, o.OrderID)
			}
		}
		if len(missing) > 0 {
			t.Logf("not yet in MySQL nor a dead letter: %v", missing)
		}
		return len(missing) == 0
	})
	t.Logf("interrupted requeue: 2 moved, %d still dead letters, none of the 5 orders lost", len(dead))

	// --max bounds a requeue.
	out = s.dlq(0, "requeue", "--max", "1")
	mustContain(t, "dlq requeue --max 1", out, "requeue: 1 message moved", "2 left")

	// The rest, the order already in MySQL among them.
	out = s.dlq(0, "requeue")
	mustContain(t, "dlq requeue", out, "requeue: 2 messages moved", "0 left")
	want := append(append(append([]order.Order(nil), rejected...), alone...), written...)
	localstack.WaitFor(t, time.Minute, "every order in MySQL", func() bool { r, _ := s.count(sale); return r == int64(len(want)) })
	// The consumer has taken every message off the orders queue (the
	// requeued copy of the written order included) before the rows are
	// counted for the last time.
	s.waitOrdersQueueEmpty()
	s.checkRows(sale, want)
	if n := s.deadDepth(); n != 0 {
		t.Fatalf("after requeue: %d dead letters, want 0", n)
	}
	mustContain(t, "dlq list (empty)", s.dlq(0, "list"), "0 messages")
	t.Logf("%d orders requeued from 6 dead letters, each in MySQL once (the one already there too)", len(want))
}

// TestDLQUsage: bad command lines exit 2, an unreachable RabbitMQ exits 1
// within --timeout.
func TestDLQUsage(t *testing.T) {
	cfg := localstack.Isolated(t)
	env := serviceEnv(cfg)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no command", []string{"dlq"}, 2, "needs a command"},
		{"unknown command", []string{"dlq", "drop"}, 2, "unknown command"},
		{"show without N", []string{"dlq", "show"}, 2, "needs N"},
		{"show zero", []string{"dlq", "show", "0"}, 2, "whole number"},
		{"reason on list", []string{"dlq", "list", "--reason", "x"}, 2, "flag of requeue"},
		{"max zero", []string{"dlq", "requeue", "--max", "0"}, 2, "--max"},
		{"help", []string{"dlq", "--help"}, 0, "usage: flashgate dlq"},
		{"no RabbitMQ", []string{"dlq", "list", "--timeout", "5s"}, 1, "dial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env
			if tc.name == "no RabbitMQ" {
				e = append(append([]string(nil), env...), "FLASHGATE_AMQP_URL=amqp://guest:guest@127.0.0.1:1/")
			}
			out, code := runFlashgate(t, e, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.says) {
				t.Fatalf("exit %d, want %d; want %q in\n%s", code, tc.code, tc.says, out)
			}
		})
	}
}

// TestDLQRealConsumer: a real consumer dead-letters what MySQL refuses (a
// user_id column made too narrow in the test's database): a message of one
// order whole (the broker's reason: rejected), the refused orders of a
// batch alone (the consumer's reason), and writes the rest. Once the column
// is fixed, requeue moves them back and the consumer writes every order
// once.
func TestDLQRealConsumer(t *testing.T) {
	s := newStack(t)
	const sale = "dlqreal"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alter := func(width int) {
		t.Helper()
		q := fmt.Sprintf("ALTER TABLE orders MODIFY user_id VARCHAR(%d) CHARACTER SET ascii COLLATE ascii_bin NOT NULL", width)
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	alter(8) // the fault: user ids of more than 8 characters are refused

	short := s.dlqOrders(sale, "s", 3) // user ids "s-u0"..: written at once
	long := s.dlqOrders(sale, "long-buyer", 3)
	sess := s.dlqSession()
	ex := s.cfg.AMQP.Exchange
	s.dlqPublish(sess, ex, broker.RoutingKey, nil, short[0], long[0], short[1], long[1], short[2])
	s.dlqPublish(sess, ex, broker.RoutingKey, nil, long[2])
	s.startConsumers(1)
	localstack.WaitFor(t, time.Minute, "the short orders in MySQL and the long ones dead letters", func() bool {
		r, _ := s.count(sale)
		return r == 3 && s.deadDepth() == 3
	})

	out := s.dlq(0, "list")
	mustContain(t, "dlq list", out, "3 messages", "orders: 3", "1  rejected", "Data too long")
	t.Logf("dlq list:\n%s", out)
	out = s.dlq(0, "show", "3")
	for _, o := range long {
		mustContain(t, "dlq show 3", out, "order "+o.OrderID+"  sale "+sale+"  user "+o.UserID)
	}
	t.Logf("dlq show 3:\n%s", out)

	alter(64) // fixed
	out = s.dlq(0, "requeue")
	mustContain(t, "dlq requeue", out, "requeue: 3 messages moved", "0 left")
	localstack.WaitFor(t, time.Minute, "every order in MySQL", func() bool { r, _ := s.count(sale); return r == 6 })
	s.waitOrdersQueueEmpty()
	s.checkRows(sale, append(append([]order.Order(nil), short...), long...))
	if n := s.deadDepth(); n != 0 {
		t.Fatalf("after requeue: %d dead letters, want 0", n)
	}
	t.Logf("3 orders dead-lettered by the consumer (1 rejected whole, 2 alone), requeued after the fix: 6 rows, each once")
}

// TestDLQRequeueConnectionCut: the connection of a requeue is cut after
// the broker confirmed a message's publish and before its dead letter is
// acknowledged, the one window where a message is in both queues. Nothing
// is lost: the message is back in the dead-letter queue as well as on the
// orders queue; requeued again, the consumer writes it once.
func TestDLQRequeueConnectionCut(t *testing.T) {
	s := newStack(t)
	const sale = "dlqcut"
	sess := s.dlqSession()
	dlx := broker.DeadLetter(s.cfg.AMQP.Exchange)
	os := s.dlqOrders(sale, "cut", 4)
	for _, o := range os {
		s.dlqPublish(sess, dlx, "", amqp.Table{broker.ReasonHeader: "test: refused"}, o)
	}
	s.startConsumers(1)

	u, err := url.Parse(s.cfg.AMQP.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := localstack.NewProxy(t, u.Host)
	u.Host = p.Addr()
	viaProxy := s.cfg.AMQP
	viaProxy.URL = u.String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := broker.Requeue(ctx, viaProxy, "dlq test requeue", broker.RequeueOptions{Max: 1000, OnConfirmed: func(r broker.RequeueResult) {
		if r.Moved == 1 { // the second message is confirmed, not acknowledged
			p.Cut()
		}
	}})
	if err == nil {
		t.Fatalf("requeue through a cut connection: moved %d, no error", res.Moved)
	}
	t.Logf("requeue cut after the second confirm: moved %d, %v", res.Moved, err)
	// The broker never saw the second ack: that dead letter is back, and
	// the two others with it.
	localstack.WaitFor(t, 30*time.Second, "3 dead letters back", func() bool { return s.deadDepth() == 3 })
	localstack.WaitFor(t, time.Minute, "the 2 requeued orders in MySQL", func() bool { r, _ := s.count(sale); return r == 2 })

	out := s.dlq(0, "requeue")
	mustContain(t, "dlq requeue", out, "requeue: 3 messages moved", "0 left")
	localstack.WaitFor(t, time.Minute, "every order in MySQL", func() bool { r, _ := s.count(sale); return r == int64(len(os)) })
	s.waitOrdersQueueEmpty()
	s.checkRows(sale, os)
	t.Logf("4 orders, one of them requeued twice across the cut: 4 rows, each once")
}

// TestDLQDeliveryLimit: a message that comes back more often than the
// delivery limit allows is dead-lettered by the broker, and list says so.
func TestDLQDeliveryLimit(t *testing.T) {
	s := newStack(t)
	sess := s.dlqSession()
	os := s.dlqOrders("dlqlimit", "loop", 1)
	s.dlqPublish(sess, s.cfg.AMQP.Exchange, broker.RoutingKey, nil, os...)
	returned := 0
	localstack.WaitFor(t, time.Minute, "the message dead-lettered past the delivery limit", func() bool {
		d, ok, err := sess.Channel.Get(s.cfg.AMQP.Queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			returned++
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			return false
		}
		return s.deadDepth() == 1
	})
	if returned <= s.cfg.AMQP.DeliveryLimit {
		t.Fatalf("dead-lettered after %d returns, the limit is %d", returned, s.cfg.AMQP.DeliveryLimit)
	}
	out := s.dlq(0, "list")
	mustContain(t, "dlq list", out, "1 message\n", "1  delivery_limit")
	t.Logf("dead-lettered after %d returns (limit %d); list: %q", returned, s.cfg.AMQP.DeliveryLimit, out)
}
