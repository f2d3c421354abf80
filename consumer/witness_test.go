package consumer

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// TestSettled: what a consumer vouches for, for package repair's fence.
// Waiting with nothing in hand, it vouches for the moment witnessMargin
// ago; holding deliveries, for the publish time of the latest it settled,
// less a second, and never for a delivery it holds; once its session has
// ended it says when what it held went back to the queue.
func TestSettled(t *testing.T) {
	e := newEnv(t)
	cfg := *e.cfg
	cfg.Consumer.BatchSize = 10
	cfg.Consumer.Prefetch = 100
	cfg.Consumer.BatchWait = time.Minute // a batch short of 10 stays in hand
	c, stop := e.startConsumer(&cfg)
	if through, failed := c.Settled(time.Now()); !through.IsZero() || !failed.IsZero() {
		t.Fatalf("before anything: through %v, failed %v; want both zero", through, failed)
	}

	// Idle: the loop waits with nothing in hand.
	var through time.Time
	localstack.WaitFor(t, 20*time.Second, "an idle consumer vouching", func() bool {
		through, _ = c.Settled(time.Now())
		return !through.IsZero()
	})
	if now := time.Now(); !through.Before(now.Add(-witnessMargin + time.Millisecond)) {
		t.Errorf("idle: through %v, want at least %v before now %v", through, witnessMargin, now)
	}

	// A full batch published at ta, settled at once; then one message
	// published at tb, held while the batch waits for more.
	ta := time.Now().Add(-time.Hour).Truncate(time.Second)
	tb := time.Now().Truncate(time.Second)
	stamped := func(at time.Time, os []order.Order) []amqp.Publishing {
		msgs := make([]amqp.Publishing, len(os))
		for i, b := range bodies(t, os) {
			msgs[i] = amqp.Publishing{ContentType: order.ContentType, DeliveryMode: amqp.Persistent, Timestamp: at, Body: b}
		}
		return msgs
	}
	e.publishMessages(stamped(ta, orderdbtest.Orders("sa", 10))...)
	localstack.WaitFor(t, 20*time.Second, "the full batch written", func() bool { rows, _, _, _ := e.totals("sa"); return rows == 10 })
	e.publishMessages(stamped(tb, orderdbtest.Orders("sb", 1))...)
	localstack.WaitFor(t, 20*time.Second, "the consumer holding the held message", func() bool {
		ready, _ := e.queued()
		return ready == 0
	})
	// Whatever the loop does next, it holds sb's order: no witness may
	// vouch for tb, nor for anything after ta's batch less a second.
	want := ta.Add(-time.Second)
	if through, _ := c.Settled(time.Now()); !through.Equal(want) {
		t.Errorf("holding a delivery of %v after a batch of %v: through %v, want %v", tb, ta, through, want)
	}
	if rows, _, _, _ := e.totals("sb"); rows != 0 {
		t.Fatalf("the held batch was written early (%d rows)", rows)
	}

	before := time.Now()
	stop()
	if _, failed := c.Settled(time.Now()); failed.Before(before.Truncate(time.Millisecond)) {
		t.Errorf("after the session ended: failed %v, want at or after %v", failed, before)
	}
}
