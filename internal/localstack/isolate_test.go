package localstack

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
)

// TestMain runs the tests under the fault lock (shared: one uses RabbitMQ,
// and none stops a service) and fails the package when a goroutine
// outlives them.
func TestMain(m *testing.M) { Main(m, UsesServices()) }

// Isolated deletes, when its test ends, the topology that broker declares
// for the test's settings: its exchange and queue, and the dead-letter
// exchange and queue beside them (broker.DeadLetter's names).
func TestIsolatedDropsBrokersTopology(t *testing.T) {
	var c config.AMQP
	t.Run("isolated", func(t *testing.T) {
		c = Isolated(t).AMQP
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		s, err := broker.Open(ctx, c, "localstack test")
		if err != nil {
			t.Fatalf("RabbitMQ at %s (run `make up`): %v", c.URL, err)
		}
		_ = s.Close()
		// What the cleanup must delete exists now.
		if got := existing(t, c); len(got) != 4 {
			t.Fatalf("broker declared only %v", got)
		}
	})
	if left := existing(t, c); len(left) > 0 {
		t.Errorf("left after the test: %v", left)
	}
}

// existing returns which of c's exchange and queue and their dead-letter
// exchange and queue exist, each checked by a passive declare on a channel
// of its own (a failed one closes its channel).
func existing(t *testing.T, c config.AMQP) (names []string) {
	t.Helper()
	conn, err := amqp.DialConfig(c.URL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func(name string, declare func(ch *amqp.Channel) error) {
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		if declare(ch) == nil {
			names = append(names, name)
		}
	}
	for _, q := range []string{c.Queue, broker.DeadLetter(c.Queue)} {
		check("queue "+q, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			return err
		})
	}
	for _, x := range []string{c.Exchange, broker.DeadLetter(c.Exchange)} {
		check("exchange "+x, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(x, "direct", true, false, false, false, nil)
		})
	}
	return names
}
