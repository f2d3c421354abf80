package consumer

import (
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// witnessMargin is how long the consume loop must have waited with nothing
// in hand before it vouches for every delivery sent to it until then, less
// the margin: what RabbitMQ sent it that long ago has arrived (a delivery
// crosses a LAN and one goroutine hop in far less) and would have ended the
// wait. It is also the skew allowed between the clocks of the consumer and
// of the process that compares its witness (package repair).
const witnessMargin = 200 * time.Millisecond

// witness is what the consume loop records for Settled: its own goroutine
// writes, any goroutine reads.
type witness struct {
	// idleSince is when the loop began waiting for a delivery with none in
	// hand (Unix ms); 0 while it holds deliveries, or has no session.
	idleSince atomic.Int64
	// stamp is the latest publish time (Unix ms, the AMQP timestamp, whole
	// seconds) of a delivery settled: acknowledged after its orders were
	// committed, or dead-lettered.
	stamp atomic.Int64
	// failed is the last time (Unix ms) deliveries sent to this consumer
	// went back to the queue unsettled: a session lost or given up.
	failed atomic.Int64
}

func (w *witness) waiting(now time.Time) { w.idleSince.Store(now.UnixMilli()) }

func (w *witness) busy() { w.idleSince.Store(0) }

// settled records a batch settled whole.
func (w *witness) settled(batch []amqp.Delivery) {
	var latest int64
	for i := range batch {
		if ts := batch[i].Timestamp; !ts.IsZero() {
			latest = max(latest, ts.UnixMilli())
		}
	}
	if latest > w.stamp.Load() {
		w.stamp.Store(latest)
	}
}

// lost records the end of a session: until the next one settles or waits,
// the consumer vouches for nothing (it is not on the queue).
func (w *witness) lost(now time.Time) {
	w.idleSince.Store(0)
	w.stamp.Store(0)
	w.failed.Store(now.UnixMilli())
}

// Settled says up to when every order RabbitMQ sent this consumer is in
// MySQL: through is a time before which every delivery sent to it has been
// settled (its orders committed, or dead-lettered); failed is the last time
// deliveries sent to it went back to the queue unsettled (zero: never), to
// be delivered again, possibly to another consumer. through is zero while
// the consumer has no session, and from the start of a session until it
// has waited or settled: it vouches for nothing then.
//
// A consume loop that has waited with nothing in hand for witnessMargin
// vouches for now less the margin. A busy one vouches for the publish time
// of the latest delivery it settled, less a second (the AMQP timestamp's
// resolution, and the skew between the clocks of the relay that stamped it
// and of the reader): RabbitMQ sends a consumer its messages in the order
// they were queued, so every message sent to it before that one was queued
// came first, and has been settled too. Package repair compares these with
// the moment it saw the orders queue empty. It is safe for concurrent use
// and does no I/O.
func (c *Consumer) Settled(now time.Time) (through, failed time.Time) {
	w := &c.witness
	var ms int64
	if idle := w.idleSince.Load(); idle > 0 && now.UnixMilli()-idle >= witnessMargin.Milliseconds() {
		ms = now.Add(-witnessMargin).UnixMilli()
	} else if st := w.stamp.Load(); st > 0 {
		ms = st - time.Second.Milliseconds()
	}
	if ms > 0 {
		through = time.UnixMilli(ms)
	}
	if f := w.failed.Load(); f > 0 {
		failed = time.UnixMilli(f)
	}
	return through, failed
}

// Name returns the consumer's name: its consumer tags start with it, and
// its repairer's witness is filed under it.
func (c *Consumer) Name() string { return c.name }
