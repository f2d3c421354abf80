package relay

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/broker"
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

// A channel whose every publish is nacked for a second (three messages or
// more) is given up with errNacking, so that the session loop opens a new
// one; an ack between nacks starts the run over, and nacks within the
// second keep the channel.
func TestNackRunGivesUpTheChannel(t *testing.T) {
	p := newPublisher("x", 100, 10, func(*entry) {})
	p.returns = make(chan amqp.Return)
	p.bounced = map[bounce]int{}
	var tag uint64
	send := func() {
		tag++
		p.inflight = append(p.inflight, &message{tag: tag, orders: 1,
			parts: []part{{e: &entry{sale: "s", id: "1-0", orderIDs: []string{"o"}, unconfirmed: 1}, from: 0, to: 1}}})
		p.inflightLen++
	}
	settle := func(ack bool) error {
		send()
		return p.settle(amqp.Confirmation{DeliveryTag: tag, Ack: ack}, true)
	}
	p.s = &broker.Session{}
	for i := range 5 {
		if err := settle(false); err != nil {
			t.Fatalf("nack %d within the second: %v", i, err)
		}
	}
	p.nackSince = time.Now().Add(-2 * time.Second) // the run began two seconds ago
	if err := settle(true); err != nil {
		t.Fatalf("ack: %v", err)
	}
	for i := range 3 {
		if err := settle(false); err != nil {
			t.Fatalf("nack %d after an ack: %v; want the run started over", i, err)
		}
	}
	p.nackSince = time.Now().Add(-2 * time.Second)
	if err := settle(false); !errors.Is(err, errNacking) {
		t.Fatalf("a fourth nack, the run two seconds old: %v; want errNacking", err)
	}
}
