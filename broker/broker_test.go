package broker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
)

// TestMain runs the tests under the fault lock (shared: they use
// RabbitMQ or MariaDB, and stop neither) and fails the package when a
// goroutine outlives them: every client, session and server a test starts
// must be stopped and waited for by its cleanup.
func TestMain(m *testing.M) { localstack.Main(m, localstack.UsesServices()) }

func testAMQP(t *testing.T) config.AMQP {
	t.Helper()
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	c := config.Default().AMQP
	if u := os.Getenv("FLASHGATE_AMQP_URL"); u != "" {
		c.URL = u
	}
	c.Exchange = "test.broker." + hex.EncodeToString(b)
	c.Queue = c.Exchange
	c.DeliveryLimit = 2
	t.Cleanup(func() {
		localstack.DropTopology(t, c.URL, []string{c.Queue, broker.DeadLetter(c.Queue)}, []string{c.Exchange, broker.DeadLetter(c.Exchange)})
	})
	return c
}

func open(t *testing.T, c config.AMQP) *broker.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := broker.Open(ctx, c, "broker test")
	if err != nil {
		t.Fatalf("RabbitMQ at %s (run `make up`): %v", c.URL, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// get waits for one message on queue.
func get(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message on %s", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTopologyIsIdempotentAndDeadLetters(t *testing.T) {
	c := testAMQP(t)
	s := open(t, c)
	s2 := open(t, c) // declares the same topology again
	if err := broker.Declare(s2.Channel, c); err != nil {
		t.Fatalf("declaring twice: %v", err)
	}
	if err := s.Channel.Publish(c.Exchange, broker.RoutingKey, true, false, amqp.Publishing{Body: []byte("bad"), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	if err := s.Channel.Publish(c.Exchange, broker.RoutingKey, true, false, amqp.Publishing{Body: []byte("retried"), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}

	// Rejected without requeue: dead-lettered at once.
	d := get(t, s.Channel, c.Queue)
	if string(d.Body) != "bad" {
		t.Fatalf("first message %q", d.Body)
	}
	if err := d.Nack(false, false); err != nil {
		t.Fatal(err)
	}
	if d := get(t, s.Channel, broker.DeadLetter(c.Queue)); string(d.Body) != "bad" {
		t.Fatalf("dead-letter queue holds %q", d.Body)
	} else {
		_ = d.Ack(false)
	}

	// Requeued past the delivery limit (2): dead-lettered too.
	for i := range 3 {
		d := get(t, s.Channel, c.Queue)
		if string(d.Body) != "retried" {
			t.Fatalf("delivery %d: %q", i, d.Body)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	if d := get(t, s.Channel, broker.DeadLetter(c.Queue)); string(d.Body) != "retried" {
		t.Fatalf("dead-letter queue holds %q", d.Body)
	}
}

// A queue declared earlier with another delivery limit cannot be changed in
// place: Declare says so, and Open uses the queue as it is, with a warning,
// rather than refuse to start (an operator changing the setting must not
// stop the pipeline).
func TestConflictingQueueArgs(t *testing.T) {
	c := testAMQP(t)
	first := open(t, c)
	other := c
	other.DeliveryLimit = 7
	ch, err := first.Conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.Declare(ch, other); !errors.Is(err, broker.ErrQueueArgs) {
		t.Fatalf("Declare with another delivery limit: %v, want ErrQueueArgs", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := broker.Open(ctx, other, "broker test")
	if err != nil {
		t.Fatalf("Open with another delivery limit: %v", err)
	}
	defer s.Close()
	if s.Warning == "" {
		t.Error("no warning about the queue's arguments")
	}
	// The session works: a message published to the exchange reaches the queue.
	if err := s.Channel.PublishWithContext(ctx, c.Exchange, broker.RoutingKey, true, false, amqp.Publishing{Body: []byte("still works")}); err != nil {
		t.Fatal(err)
	}
	if d := get(t, s.Channel, c.Queue); string(d.Body) != "still works" {
		t.Fatalf("queue holds %q", d.Body)
	}
}

func TestSessionDoneAndCloseTwice(t *testing.T) {
	c := testAMQP(t)
	s := open(t, c)
	select {
	case <-s.Done():
		t.Fatal("Done before Close")
	default:
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	<-s.Done()
	if s.Err() == nil {
		t.Fatal("Err is nil after Done")
	}
}

func TestOpenFailsFast(t *testing.T) {
	c := config.Default().AMQP
	c.URL = "amqp://guest:guest@127.0.0.1:1/" // nothing listens there
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := broker.Open(ctx, c, "broker test"); err == nil {
		t.Fatal("Open succeeded")
	}
}
