package consumer

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
	"github.com/flashgate/flashgate/scripts"
)

// TestMain runs the tests under the fault lock (shared: they use
// RabbitMQ or MariaDB, and stop neither) and fails the package when a
// goroutine outlives them: every client, session and server a test starts
// must be stopped and waited for by its cleanup.
func TestMain(m *testing.M) { localstack.Main(m, localstack.UsesServices()) }

// env is one test's private corner of the shared services: a Redis key
// prefix, an exchange and queues (localstack.Isolated), and a MySQL database
// of its own, all removed when it ends.
type env struct {
	t      *testing.T
	cfg    *config.Config
	db     *sql.DB
	rdb    redis.UniversalClient
	loader *scripts.Loader
	keys   scripts.Keys
	ch     *amqp.Channel
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := localstack.Isolated(t)
	cfg.Shutdown.Timeout = 10 * time.Second
	cfg.Consumer.BatchWait = 5 * time.Millisecond
	// The tests publish messages of one order mostly: the prefetch
	// (consumer.prefetch orders) is then as many messages.
	cfg.Relay.MessageOrders = 1
	db := orderdbtest.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One Redis, or a cluster client when FLASHGATE_REDIS_ADDRS names
	// several nodes (make test-cluster), as the consumer process has.
	rdb := localstack.Redis(t)
	loader := scripts.New(rdb, "", scripts.Keys{Prefix: cfg.Redis.KeyPrefix})
	if _, err := loader.Load(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := broker.Open(ctx, cfg.AMQP, "consumer test")
	if err != nil {
		t.Fatalf("RabbitMQ at %s does not answer (run `make up`): %v", cfg.AMQP.URL, err)
	}
	if err := s.Channel.Confirm(false); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, cfg: cfg, db: db, rdb: rdb, loader: loader, keys: scripts.Keys{Prefix: cfg.Redis.KeyPrefix}, ch: s.Channel}
	t.Cleanup(func() {
		_ = s.Close()
	})
	return e
}

// publish sends raw bodies to the orders exchange and waits for the
// broker's confirms.
func (e *env) publish(bodies ...[]byte) {
	e.t.Helper()
	msgs := make([]amqp.Publishing, len(bodies))
	for i, b := range bodies {
		msgs[i] = amqp.Publishing{ContentType: order.ContentType, DeliveryMode: amqp.Persistent, Body: b}
	}
	e.publishMessages(msgs...)
}

// publishMessages sends messages to the orders exchange and waits for the
// broker's confirms.
func (e *env) publishMessages(msgs ...amqp.Publishing) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dcs []*amqp.DeferredConfirmation
	for _, m := range msgs {
		dc, err := e.ch.PublishWithDeferredConfirm(e.cfg.AMQP.Exchange, broker.RoutingKey, true, false, m)
		if err != nil {
			e.t.Fatal(err)
		}
		dcs = append(dcs, dc)
	}
	for _, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			e.t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

func bodies(t *testing.T, os []order.Order) [][]byte {
	t.Helper()
	out := make([][]byte, len(os))
	for i, o := range os {
		b, err := o.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// startConsumer runs a consumer until the test ends (or the returned stop
// is called); Run must return nil within the shutdown deadline.
func (e *env) startConsumer(cfg *config.Config) (*Consumer, func()) {
	e.t.Helper()
	return e.startConsumerWith(cfg, Deps{})
}

// startConsumerWith is startConsumer with deps, whose DB and Redis are the
// env's.
func (e *env) startConsumerWith(cfg *config.Config, deps Deps) (*Consumer, func()) {
	e.t.Helper()
	if cfg == nil {
		cfg = e.cfg
	}
	deps.DB, deps.Redis = e.db, e.rdb
	c, err := New(cfg, deps)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("Run: %v", err)
			}
		case <-time.After(cfg.Shutdown.Timeout + 10*time.Second):
			e.t.Errorf("consumer: Run did not return after its ctx ended")
		}
	}
	e.t.Cleanup(stop)
	return c, stop
}

// queued returns how many messages are ready in the orders queue, and how
// many consumers it has.
func (e *env) queued() (messages, consumers int) {
	e.t.Helper()
	q, err := e.ch.QueueDeclarePassive(e.cfg.AMQP.Queue, true, false, false, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return q.Messages, q.Consumers
}

// dead takes every message the dead-letter queue holds now.
func (e *env) dead() []amqp.Delivery {
	e.t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := e.ch.Get(broker.DeadLetter(e.cfg.AMQP.Queue), true)
		if err != nil {
			e.t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// waitDead takes the messages of the dead-letter queue until it has had n,
// then whatever else it holds by then, and returns them all.
func (e *env) waitDead(n int) []amqp.Delivery {
	e.t.Helper()
	var out []amqp.Delivery
	localstack.WaitFor(e.t, 20*time.Second, fmt.Sprintf("%d messages in the dead-letter queue", n), func() bool {
		out = append(out, e.dead()...)
		return len(out) >= n
	})
	return append(out, e.dead()...)
}

// narrowQuantity makes MySQL refuse as data an order of more than 127
// units: the quantity column becomes a TINYINT.
func (e *env) narrowQuantity() {
	e.t.Helper()
	if _, err := e.db.Exec(`ALTER TABLE orders MODIFY quantity TINYINT NOT NULL`); err != nil {
		e.t.Fatal(err)
	}
}

// totals reads the sale's rows and ledger.
func (e *env) totals(sale string) (rows, units, ledgerUnits, ledgerOrders int64) {
	e.t.Helper()
	return orderdbtest.Totals(e.t, e.db, sale)
}

// viewCreated reads what the order view says of order id of sale (the
// order script's get, as the gateway calls it): whether its status is
// created.
func (e *env) viewCreated(sale, id string) bool {
	e.t.Helper()
	k := e.keys
	keys := []string{k.Meta(sale), k.Users(sale), k.Outbox(sale), k.Orders(sale), k.Due(sale), k.Created(sale)}
	r, err := e.loader.Order(context.Background(), keys, "get", k.Events(), sale, id)
	if err != nil || r.Code != scripts.CodeOK {
		e.t.Fatalf("order view of %s/%s: %+v, %v", sale, id, r, err)
	}
	return r.Record.Created
}

// waitMarked waits until the order view says created for every order of
// os, and checks that their records were not rewritten (the marker only
// adds their ids to the sale's created set).
func (e *env) waitMarked(sale string, os []order.Order) {
	e.t.Helper()
	localstack.WaitFor(e.t, 10*time.Second, "the orders marked created", func() bool {
		for _, o := range os {
			if !e.viewCreated(sale, o.OrderID) {
				return false
			}
		}
		return true
	})
	for _, o := range os {
		if v := e.rdb.HGet(context.Background(), e.keys.Orders(sale), o.OrderID).Val(); !strings.HasPrefix(v, "q:") {
			e.t.Errorf("record of %s rewritten by the mark: %q", o.OrderID, v)
		}
	}
}

// wantQueued fails the test unless the order view says queued for every
// order of os.
func (e *env) wantQueued(sale string, os []order.Order) {
	e.t.Helper()
	for _, o := range os {
		if e.viewCreated(sale, o.OrderID) {
			e.t.Errorf("order %s reads created before the consumer wrote it", o.OrderID)
		}
	}
}

// seedRecords writes the sale's order records into Redis as the reserve
// script leaves them (not yet marked created), for the consumer to mark.
func (e *env) seedRecords(sale string, os []order.Order) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, o := range os {
		rec := scripts.Record{Quantity: int64(o.Quantity), UserID: o.UserID}.String()
		if err := e.rdb.HSet(ctx, e.keys.Orders(sale), o.OrderID, rec).Err(); err != nil {
			e.t.Fatalf("seed order record %s: %v", o.OrderID, err)
		}
	}
}

// wantAcked fails the test when the queue holds messages: what the
// consumer had was not all acknowledged.
func (e *env) wantAcked() {
	e.t.Helper()
	if n, _ := e.queued(); n != 0 {
		e.t.Fatalf("%d messages back in the queue: not acknowledged", n)
	}
}

// wantSeries fails the test unless c's metrics hold every one of series
// (a name and value, or a name's prefix).
func wantSeries(t *testing.T, c *Consumer, series ...string) {
	t.Helper()
	var m bytes.Buffer
	c.WriteMetrics(&m)
	for _, s := range series {
		if !strings.Contains(m.String(), s) {
			t.Errorf("metrics lack %q:\n%s", s, m.String())
		}
	}
}
