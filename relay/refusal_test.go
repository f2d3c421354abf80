package relay

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
)

// TestReturnedEntriesStayPending makes every publish unroutable. Invariant 3
// (every 202 becomes exactly one MySQL row): an entry RabbitMQ returned
// stays in the outbox and is published again once the binding is back.
func TestReturnedEntriesStayPending(t *testing.T) {
	e := newEnv(t)
	e.addOrders("s", 1) // the relay learns the sale
	r, _ := e.startRelay("r1")
	localstack.WaitFor(t, 10*time.Second, "the first order removed", func() bool { return e.outboxEmpty("s") })

	// Unroutable from now on: every publish comes back.
	if err := e.ch.QueueUnbind(e.cfg.AMQP.Queue, broker.RoutingKey, e.cfg.AMQP.Exchange, nil); err != nil {
		t.Fatal(err)
	}
	ids := e.addOrders("s", 10)
	r.Wrote("s")
	localstack.WaitFor(t, 10*time.Second, "10 returns counted", func() bool { return r.Stats().Returned >= 10 })
	if n := e.rdb.XLen(context.Background(), e.keys.Outbox("s")).Val(); n != 10 {
		t.Fatalf("outbox has %d entries after returns, want 10", n)
	}
	localstack.WaitFor(t, 5*time.Second, "Stats.Sales showing the pending entries", func() bool {
		for _, s := range r.Stats().Sales {
			if s.Sale == "s" && s.Pending == 10 && s.OldestAge > 0 {
				return true
			}
		}
		return false
	})

	if err := e.ch.QueueBind(e.cfg.AMQP.Queue, broker.RoutingKey, e.cfg.AMQP.Exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	got := e.received(ids, 20*time.Second)
	for _, id := range ids {
		if got[id] == 0 {
			t.Fatalf("order %s did not arrive after the binding came back", id)
		}
	}
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied after the retry", func() bool { return e.outboxEmpty("s") })
}

func TestMalformedEntryStaysInStream(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ids := e.addOrders("s", 5)
	bad, err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox("s"), Values: []any{"order_id", "x", "quantity", "lots"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, e.addOrders("s", 5)...)
	r, _ := e.startRelay("r1")
	e.received(ids, 20*time.Second)
	localstack.WaitFor(t, 10*time.Second, "the good entries removed", func() bool {
		n := e.rdb.XLen(ctx, e.keys.Outbox("s")).Val()
		p := e.rdb.XPending(ctx, e.keys.Outbox("s"), Group).Val()
		return n == 1 && p != nil && p.Count == 0
	})
	left := e.rdb.XRange(ctx, e.keys.Outbox("s"), "-", "+").Val()
	if len(left) != 1 || left[0].ID != bad {
		t.Fatalf("outbox holds %v, want only the malformed entry %s", left, bad)
	}
	if m := r.Stats().Malformed; m != 1 {
		t.Fatalf("malformed = %d, want 1", m)
	}
}

// rabbitmqctl runs the local node's rabbitmqctl (deploy/local/rabbitmq-cli.sh).
func rabbitmqctl(t *testing.T, args ...string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := filepath.Join(dir, "..", "deploy", "local", "rabbitmq-cli.sh")
	out, err := exec.CommandContext(ctx, cli, append([]string{"rabbitmqctl"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestNackedEntriesStayPending makes RabbitMQ refuse publishes (a length
// limit with reject-publish overflow, set by policy). Invariant 3 (every 202
// becomes exactly one MySQL row): the refused entries stay in the outbox and
// are published again once the queue takes them again.
func TestNackedEntriesStayPending(t *testing.T) {
	e := newEnv(t)
	policy := "test-maxlen-" + localstack.RandomHex(4)
	rabbitmqctl(t, "set_policy", "--apply-to", "queues", policy, "^"+regexp.QuoteMeta(e.cfg.AMQP.Queue)+"$", `{"max-length":5}`)
	t.Cleanup(func() { rabbitmqctl(t, "clear_policy", policy) })
	// Policies apply asynchronously.
	localstack.WaitFor(t, 30*time.Second, "the policy applied", func() bool {
		for _, line := range strings.Split(rabbitmqctl(t, "list_queues", "--no-table-headers", "name", "policy"), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == e.cfg.AMQP.Queue && f[1] == policy {
				return true
			}
		}
		return false
	})

	// Fill the queue until RabbitMQ refuses (the limit is approximate
	// for a quorum queue).
	localstack.WaitFor(t, 30*time.Second, "the queue full", func() bool {
		ok, err := publishFiller(e)
		if err != nil {
			t.Fatal(err)
		}
		return !ok
	})

	ids := e.addOrders("s", 10)
	r, _ := e.startRelay("r1")
	localstack.WaitFor(t, 20*time.Second, "10 nacks", func() bool { return r.Stats().Nacked >= 10 })
	if n := e.rdb.XLen(context.Background(), e.keys.Outbox("s")).Val(); n != 10 {
		t.Fatalf("outbox holds %d entries after the nacks, want 10", n)
	}
	e.received(ids, 30*time.Second) // consuming frees the queue: the retries get in
	localstack.WaitFor(t, 20*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty("s") })
}

// publishFiller publishes an order of another sale on a confirm channel and reports whether RabbitMQ accepted it.
func publishFiller(e *env) (bool, error) {
	conn, err := broker.Dial(context.Background(), e.cfg.AMQP.URL, "filler")
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return false, err
	}
	if err := ch.Confirm(false); err != nil {
		return false, err
	}
	o := order.Order{OrderID: "filler-" + localstack.RandomHex(4), SaleID: "filler", UserID: "filler", Quantity: 1, ReservedAt: time.Now()}
	body, err := o.Marshal()
	if err != nil {
		return false, err
	}
	dc, err := ch.PublishWithDeferredConfirm(e.cfg.AMQP.Exchange, broker.RoutingKey, true, false,
		amqp.Publishing{Body: body, MessageId: o.OrderID, ContentType: order.ContentType, DeliveryMode: amqp.Persistent})
	if err != nil {
		return false, err
	}
	return dc.Wait(), nil
}
