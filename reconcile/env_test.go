package reconcile

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
	"github.com/flashgate/flashgate/scripts"
)

// TestMain runs the tests under the fault lock (shared: they use
// RabbitMQ or MariaDB, and stop neither) and fails the package when a
// goroutine outlives them: every client, session and server a test starts
// must be stopped and waited for by its cleanup.
func TestMain(m *testing.M) { localstack.Main(m, localstack.UsesServices()) }

// env is one test's private corner of the shared services: a Redis key
// prefix and a MySQL database of its own, both removed when it ends.
type env struct {
	t      *testing.T
	db     *sql.DB
	rdb    *redis.Client
	loader *scripts.Loader
	keys   scripts.Keys
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := orderdbtest.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: localstack.RedisAddr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (run `make up`): %v", localstack.RedisAddr, err)
	}
	prefix := "t" + localstack.RandomHex(5)
	loader := scripts.New(rdb, "", scripts.Keys{Prefix: prefix})
	if _, err := loader.Load(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		localstack.DropKeys(t, rdb, prefix)
		_ = rdb.Close()
	})
	return &env{t: t, db: db, rdb: rdb, loader: loader, keys: scripts.Keys{Prefix: prefix}}
}

// sell creates a sale and reserves n orders of quantity 1 or 2 with the
// reserve script, as the gateway does: confirmed orders.
func (e *env) sell(sale string, n int) { e.sellWindow(sale, n, 0) }

// sellWindow is sell on a sale with a payment window of window seconds (0:
// none): its orders are pending_payment until then.
func (e *env) sellWindow(sale string, n, window int) {
	e.t.Helper()
	ctx := context.Background()
	k := e.keys
	// rid: the sale is this Redis's (a sale of another history would be
	// held, the hold script).
	info, err := e.rdb.Info(ctx, "replication").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	_, rid, _ := strings.Cut(info, "master_replid:")
	rid, _, _ = strings.Cut(rid, "\r\n")
	if err := e.rdb.HSet(ctx, k.Meta(sale), "stock", 100000, "sold", 0, "limit", 10, "starts", 0, "ends", 0, "locked", 0,
		"window", window, "rid", rid).Err(); err != nil {
		e.t.Fatal(err)
	}
	// One call per order, so that each is an outbox entry of its own and
	// the tests can deliver or lose one at a time.
	for i := range n {
		r, err := e.loader.Reserve(ctx, e.saleKeys(sale), sale, new(scripts.ReserveBatch).Add(sale+"-o"+strconv.Itoa(i), "u"+strconv.Itoa(i), 1+i%2, 0))
		if err != nil {
			e.t.Fatal(err)
		}
		if code := r.At(0).Code; code != scripts.CodeOK {
			e.t.Fatalf("reservation %d: code %d", i, code)
		}
	}
}

// saleKeys are the keys of the reserve and order scripts.
func (e *env) saleKeys(sale string) []string {
	k := e.keys
	return []string{k.Meta(sale), k.Users(sale), k.Outbox(sale), k.Orders(sale), k.Due(sale)}
}

// change runs the order script's op (pay, cancel) on one order, as the
// admin API does, and fails the test unless it answers OK.
func (e *env) change(sale, op, id string) {
	e.t.Helper()
	v, err := e.loader.Run(context.Background(), scripts.Order, e.saleKeys(sale), op, e.keys.Events(), sale, id)
	if err != nil {
		e.t.Fatal(err)
	}
	if code := v.([]any)[0].(int64); code != 0 {
		e.t.Fatalf("%s %s: code %d", op, id, code)
	}
}

// deliver moves up to n outbox entries into MySQL as the relay and the
// consumer would, and returns them.
func (e *env) deliver(sale string, n int64) []order.Order {
	e.t.Helper()
	ctx := context.Background()
	msgs, err := e.rdb.XRangeN(ctx, e.keys.Outbox(sale), "-", "+", n).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var os []order.Order
	for _, m := range msgs {
		batch, err := order.FromStreamEntry(m.Values)
		if err != nil {
			e.t.Fatal(err)
		}
		os = append(os, batch...)
		e.rdb.XDel(ctx, e.keys.Outbox(sale), m.ID)
	}
	if _, err := orderdb.WriteOrders(ctx, e.db, os); err != nil {
		e.t.Fatal(err)
	}
	// Marked created, as a consumer marks what it wrote.
	for _, o := range os {
		if err := e.rdb.SAdd(ctx, e.keys.Created(sale), o.OrderID).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	return os
}

// dropOutbox deletes every entry of the sale's outbox undelivered: what a
// loss between Redis and MySQL would leave.
func (e *env) dropOutbox(sale string) {
	e.t.Helper()
	if err := e.rdb.Del(context.Background(), e.keys.Outbox(sale)).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// wantDrift fails the test unless r's drift is one sentence per want, in
// its order, each containing that want.
func wantDrift(t *testing.T, r *Report, want []string) {
	t.Helper()
	d := r.Drift()
	if len(d) != len(want) {
		t.Fatalf("drift %q, want %d like %q (report %+v)", d, len(want), want, r)
	}
	for i := range d {
		if !strings.Contains(d[i], want[i]) {
			t.Fatalf("drift %q, want like %q", d, want)
		}
	}
}
