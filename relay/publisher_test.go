package relay

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A confirm taken after the library closed the channel of returns (the
// channel shutting down, its last confirms still buffered) is settled, not
// spun on: a closed channel is always ready to receive. (The relay spun in
// settle for good after a RabbitMQ restart, never seeing its session end.)
func TestSettleAfterReturnsClosed(t *testing.T) {
	p := newPublisher("x", 10, 10, func(*entry) {})
	p.returns = make(chan amqp.Return, 1)
	p.returns <- amqp.Return{MessageId: "o1", CorrelationId: "1-0"} // buffered before the close: still read
	close(p.returns)
	p.bounced = map[bounce]int{}
	p.inflight = []*message{{tag: 7, orders: 1, parts: []part{{e: &entry{sale: "s", id: "1-0", orderIDs: []string{"o1"}, unconfirmed: 1}, from: 0, to: 1}}}}
	p.inflightLen = 1
	done := make(chan error, 1)
	go func() { done <- p.settle(amqp.Confirmation{DeliveryTag: 7, Ack: false}, true) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("settle: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("settle did not return with the channel of returns closed")
	}
	if len(p.inflight) != 0 || len(p.retry) != 1 {
		t.Errorf("after a nack: %d in flight, %d to retry; want 0 and 1", len(p.inflight), len(p.retry))
	}
	if len(p.bounced) != 1 {
		t.Errorf("the return buffered before the close was not read: bounced %v", p.bounced)
	}
}
