package consumer

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
)

// TestCollect drives collect's one select through each way a batch ends,
// on a channel the test feeds: batch_size reached (counted in orders),
// batch_wait passed (batch_wait 0 included: the deadline passes at once, a
// batch short of batch_size is not held), the channel closed, ctx ended
// while watched; and ctx not watched. Whatever ends it, the loop has left
// its idle state (Settled vouches for nothing it holds).
func TestCollect(t *testing.T) {
	one := amqp.Delivery{}
	five := amqp.Delivery{Headers: amqp.Table{order.CountHeader: int32(5)}}
	tests := []struct {
		name   string
		size   int
		wait   time.Duration
		watch  bool
		give   []amqp.Delivery // in the channel's buffer before collect
		close  bool            // the channel closed after them
		cancel bool            // ctx ended before collect
		// feed, when set, runs while collect does, on an unbuffered channel.
		feed func(t *testing.T, c *Consumer, deliveries chan<- amqp.Delivery, cancel context.CancelFunc)
		want int // deliveries in the batch
		open bool
		left int // deliveries still in the channel's buffer after it
	}{
		{name: "batch_size reached", size: 3, wait: time.Minute, watch: true,
			give: []amqp.Delivery{one, one, one, one, one}, want: 3, open: true, left: 2},
		{name: "batch_size counted in orders", size: 5, wait: time.Minute, watch: true,
			give: []amqp.Delivery{five, one}, want: 1, open: true, left: 1},
		{name: "batch_wait passed", size: 10, wait: 10 * time.Millisecond, watch: true,
			give: []amqp.Delivery{one}, want: 1, open: true},
		{name: "batch_wait 0 waits for nothing", size: 10, wait: 0, watch: true,
			give: []amqp.Delivery{one}, want: 1, open: true},
		{name: "closed after deliveries", size: 10, wait: time.Minute, watch: true,
			give: []amqp.Delivery{one, one}, close: true, want: 2, open: false},
		{name: "closed with nothing in hand", size: 10, wait: time.Minute, watch: true,
			close: true, want: 0, open: false},
		{name: "ctx ended with nothing in hand", size: 10, wait: time.Minute, watch: true,
			cancel: true, want: 0, open: true},
		{name: "ctx ends a batch in hand", size: 10, wait: time.Minute, watch: true,
			feed: func(t *testing.T, c *Consumer, deliveries chan<- amqp.Delivery, cancel context.CancelFunc) {
				localstack.WaitFor(t, 10*time.Second, "collect waiting idle", func() bool { return c.witness.idleSince.Load() != 0 })
				deliveries <- one
				cancel()
			},
			want: 1, open: true},
		{name: "ctx not watched", size: 10, wait: 0, watch: false,
			give: []amqp.Delivery{one}, cancel: true, want: 1, open: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Consumer{cfg: config.Consumer{BatchSize: tt.size, BatchWait: tt.wait}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			deliveries := make(chan amqp.Delivery, len(tt.give))
			for _, d := range tt.give {
				deliveries <- d
			}
			if tt.close {
				close(deliveries)
			}
			if tt.cancel {
				cancel()
			}
			type result struct {
				batch []amqp.Delivery
				open  bool
			}
			got := make(chan result, 1)
			go func() {
				batch, open := c.collect(ctx, deliveries, tt.watch)
				got <- result{batch, open}
			}()
			if tt.feed != nil {
				tt.feed(t, c, deliveries, cancel)
			}
			var r result
			select {
			case r = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("collect did not return")
			}
			if len(r.batch) != tt.want || r.open != tt.open {
				t.Errorf("collect: %d deliveries, open %v; want %d, open %v", len(r.batch), r.open, tt.want, tt.open)
			}
			if n := len(deliveries); n != tt.left {
				t.Errorf("%d deliveries left in the channel, want %d", n, tt.left)
			}
			if idle := c.witness.idleSince.Load(); idle != 0 {
				t.Errorf("collect returned idle (since %d): the witness would vouch for deliveries in hand", idle)
			}
		})
	}
}
