package consumer

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

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
func TestMain(m *testing.M) {
	code := localstack.Run(m, false)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is one test's private corner of the shared services: a Redis key
// prefix, an exchange and queues (localstack.Isolated), and a MySQL database
// of its own, all removed when it ends.
type env struct {
	t      *testing.T
	cfg    *config.Config
	db     *sql.DB
	rdb    *redis.Client
	loader *scripts.Loader
	keys   scripts.Keys
	ch     *amqp.Channel
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := localstack.Isolated(t)
	cfg.Shutdown.Timeout = 10 * time.Second
	cfg.Consumer.BatchWait = 5 * time.Millisecond
	db := orderdbtest.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Redis.Addrs[0]})
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (run `make up`): %v", cfg.Redis.Addrs[0], err)
	}
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
		_ = rdb.Close()
	})
	return e
}

// publish sends raw bodies to the orders exchange and waits for the
// broker's confirms.
func (e *env) publish(bodies ...[]byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dcs []*amqp.DeferredConfirmation
	for _, b := range bodies {
		dc, err := e.ch.PublishWithDeferredConfirm(e.cfg.AMQP.Exchange, broker.RoutingKey, true, false, amqp.Publishing{
			ContentType: order.ContentType, DeliveryMode: amqp.Persistent, Body: b,
		})
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
	if cfg == nil {
		cfg = e.cfg
	}
	c, err := New(cfg, Deps{DB: e.db, Redis: e.rdb, Loader: e.loader})
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

// totals reads the sale's rows and ledger.
func (e *env) totals(sale string) (rows, units, ledgerUnits, ledgerOrders int64) {
	e.t.Helper()
	return orderdbtest.Totals(e.t, e.db, sale)
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
