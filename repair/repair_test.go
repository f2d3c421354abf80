package repair

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
	"github.com/flashgate/flashgate/scripts"
)

// TestMain runs the tests under the local stack's shared lock (they stop
// no service) and fails the package when a goroutine outlives them.
func TestMain(m *testing.M) { localstack.Main(m, localstack.UsesServices()) }

// env is one test's corner of the shared Redis and MariaDB: a key prefix,
// a database, and the scripts loaded under that prefix.
type env struct {
	t      *testing.T
	ctx    context.Context
	rdb    redis.UniversalClient
	db     *sql.DB
	loader *scripts.Loader
	keys   scripts.Keys
	sale   string
	n      int // order ids made so far
}

func newEnv(t *testing.T, sale string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	rdb := localstack.Redis(t)
	prefix := "t" + localstack.RandomHex(5)
	localstack.DropKeys(t, rdb, prefix)
	e := &env{t: t, ctx: ctx, rdb: rdb, db: orderdbtest.Open(t), keys: scripts.Keys{Prefix: prefix}, sale: sale}
	e.loader = scripts.New(rdb, "", e.keys)
	if _, err := e.loader.Load(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// create makes the sale as the gateway does: registry first, then the
// admin script.
func (e *env) create(stock, limit, window int64) {
	e.t.Helper()
	k := e.keys
	if err := e.rdb.SAdd(e.ctx, k.Sales(), e.sale).Err(); err != nil {
		e.t.Fatal(err)
	}
	a, err := e.loader.Admin(e.ctx, []string{k.Meta(e.sale), k.Users(e.sale), k.Outbox(e.sale)},
		"upsert", k.Events(), e.sale, stock, limit, "", "", window)
	if err != nil {
		e.t.Fatal(err)
	}
	if a.Code != scripts.CodeOK {
		e.t.Fatalf("create: code %d", a.Code)
	}
}

// reserve runs the reserve script for one buyer; it returns the outcome
// code and the order id answered.
func (e *env) reserve(user string, qty int64, idem string) (scripts.Code, string) {
	e.t.Helper()
	k := e.keys
	e.n++
	oid := fmt.Sprintf("o%d-%s", e.n, localstack.RandomHex(4))
	keys := []string{k.Meta(e.sale), k.Users(e.sale), k.Outbox(e.sale), k.Orders(e.sale), k.Due(e.sale)}
	ik := 0
	if idem != "" {
		keys = append(keys, k.Idem(e.sale, idem))
		ik = len(keys)
	}
	r, err := e.loader.Reserve(e.ctx, keys, e.sale, new(scripts.ReserveBatch).Add(oid, user, int(qty), ik))
	if err != nil {
		e.t.Fatal(err)
	}
	return r.At(0).Code, r.At(0).OrderID
}

// orderOp runs the order script (pay, cancel) on one order.
func (e *env) orderOp(op, oid string) scripts.Code {
	e.t.Helper()
	k := e.keys
	v, err := e.loader.Run(e.ctx, scripts.Order, []string{k.Meta(e.sale), k.Users(e.sale), k.Outbox(e.sale), k.Orders(e.sale), k.Due(e.sale)},
		op, k.Events(), e.sale, oid)
	if err != nil {
		e.t.Fatal(err)
	}
	return scripts.Code(v.([]any)[0].(int64))
}

// forward does what relay and consumer do: every outbox entry into MySQL,
// then the outbox emptied and the orders marked created.
func (e *env) forward() {
	e.t.Helper()
	k := e.keys
	entries, err := e.rdb.XRange(e.ctx, k.Outbox(e.sale), "-", "+").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var orders []order.Order
	var ids []string
	for _, x := range entries {
		os, err := order.FromStreamEntry(x.Values)
		if err != nil {
			e.t.Fatal(err)
		}
		orders = append(orders, os...)
		ids = append(ids, x.ID)
	}
	if _, err := orderdb.WriteOrders(e.ctx, e.db, orders); err != nil {
		e.t.Fatal(err)
	}
	if len(ids) > 0 {
		if err := e.rdb.XDel(e.ctx, k.Outbox(e.sale), ids...).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, o := range orders {
		if err := e.rdb.SAdd(e.ctx, k.Created(e.sale), o.OrderID).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// view is what the order view says of oid: the order script's get, with
// the created set, as the gateway runs it.
func (e *env) view(oid string) scripts.OrderReply {
	e.t.Helper()
	k := e.keys
	r, err := e.loader.Order(e.ctx, []string{k.Meta(e.sale), k.Users(e.sale), k.Outbox(e.sale), k.Orders(e.sale), k.Due(e.sale),
		k.Created(e.sale)}, "get", k.Events(), e.sale, oid)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// snapshot is the sale's keys as DUMP has them: what Redis's disk holds at
// one instant.
type snapshot map[string]string

func (e *env) snapshot() snapshot {
	e.t.Helper()
	s := snapshot{}
	for _, key := range e.saleKeys() {
		v, err := e.rdb.Dump(e.ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		s[key] = v
	}
	return s
}

// saleKeys are the keys the tests' sales may have, named one by one (KEYS
// would ask one node of a cluster only).
func (e *env) saleKeys() []string {
	k := e.keys
	return []string{k.Meta(e.sale), k.Users(e.sale), k.Outbox(e.sale), k.Orders(e.sale), k.Due(e.sale),
		k.Created(e.sale), k.Idem(e.sale, "k1"), k.Idem(e.sale, "k2")}
}

// rollBack puts the sale's keys back as they were in s and makes the sale
// look as if this Redis were another process than the one it was last
// checked under: a restart that lost every write since s.
func (e *env) rollBack(s snapshot) {
	e.t.Helper()
	if err := e.rdb.Del(e.ctx, e.saleKeys()...).Err(); err != nil {
		e.t.Fatal(err)
	}
	for key, v := range s {
		if err := e.rdb.Restore(e.ctx, key, 0, v).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := e.rdb.HSet(e.ctx, e.keys.Meta(e.sale), "rid", "0000").Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) meta() map[string]string {
	e.t.Helper()
	m, err := e.rdb.HGetAll(e.ctx, e.keys.Meta(e.sale)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) repairer() *Repairer {
	e.t.Helper()
	r, err := New(Config{}, Deps{Redis: e.rdb, DB: e.db, Loader: e.loader, Keys: e.keys,
		Queue: func(context.Context) (broker.Depth, error) { return broker.Depth{}, nil }})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// A Redis that lost writes whose orders reached MySQL holds the sale, then
// gets back from MySQL exactly what it forgot: new orders, a state change of
// an order it remembers, the buyers' units, the pending payments and the
// idempotency keys (Invariants 1, 2, 4 across a rollback); it sells on
// after that, and replayed keys answer their first orders.
func TestRepairRestoresWhatMySQLHolds(t *testing.T) {
	e := newEnv(t, "rb")
	e.create(10, 2, 300)

	codeA, a := e.reserve("u1", 1, "k1")
	if codeA != scripts.CodeOK {
		t.Fatalf("first buy: %s", codeA)
	}
	e.forward()
	before := e.snapshot()

	// What the lost writes did, and MySQL got: two more orders, one with
	// a key, and the first order paid.
	_, b := e.reserve("u2", 2, "k2")
	_, c := e.reserve("u3", 1, "")
	if code := e.orderOp("pay", a); code != scripts.CodeOK {
		t.Fatalf("pay: %s", code)
	}
	e.forward()
	maxSeq, err := orderdb.MaxSeq(e.ctx, e.db, e.sale)
	if err != nil {
		t.Fatal(err)
	}
	if maxSeq != 4 {
		t.Fatalf("MySQL's seq %d, want 4 (three reservations and a pay)", maxSeq)
	}

	e.rollBack(before)
	if m := e.meta(); m["sold"] != "1" {
		t.Fatalf("after the rollback Redis has sold %s, want 1 (the test's rollback did not take)", m["sold"])
	}
	held, err := e.loader.HoldPass(e.ctx)
	if err != nil || held != 1 {
		t.Fatalf("hold pass: %d held, %v; want 1", held, err)
	}
	if code, _ := e.reserve("u9", 1, ""); code != scripts.CodeRepairing {
		t.Fatalf("buy on a held sale: %s, want REPAIRING", code)
	}
	if code := e.orderOp("cancel", a); code != scripts.CodeRepairing {
		t.Fatalf("cancel on a held sale: %s, want REPAIRING", code)
	}
	if code, id := e.reserve("u2", 2, "k2"); code != scripts.CodeRepairing || id != "" {
		t.Fatalf("replayed key on a held sale: %s %q, want REPAIRING", code, id)
	}

	r := e.repairer()
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Repaired != 1 || s.Restored != 3 {
		t.Errorf("stats %+v, want 1 sale repaired, 3 orders restored (b, c, a's pay)", s)
	}

	m := e.meta()
	want := map[string]string{"sold": "4", "stock": "10", "pending": "2", "paid": "1", "seq": "4"}
	for f, v := range want {
		if m[f] != v {
			t.Errorf("meta %s = %q, want %q (meta %v)", f, m[f], v, m)
		}
	}
	if _, ok := m["hold"]; ok {
		t.Errorf("sale still held: %v", m)
	}
	users, _ := e.rdb.HGetAll(e.ctx, e.keys.Users(e.sale)).Result()
	if users["u1"] != "1" || users["u2"] != "2" || users["u3"] != "1" || len(users) != 3 {
		t.Errorf("users %v, want u1 1, u2 2, u3 1", users)
	}
	recs, _ := e.rdb.HGetAll(e.ctx, e.keys.Orders(e.sale)).Result()
	for id, st := range map[string]string{a: order.StatePaid, b: order.StatePendingPayment, c: order.StatePendingPayment} {
		rec, err := scripts.ParseRecord(recs[id])
		if err != nil || rec.State != st || !rec.Created {
			t.Errorf("record of %s: %+v, %v; want %s, in MySQL", id, rec, err, st)
		}
		row := orderdbtest.Row(t, e.db, id)
		if rec.PayBy != 0 && rec.PayBy != row.PayBy.UnixMilli() {
			t.Errorf("%s: pay_by %d in Redis, %d in MySQL", id, rec.PayBy, row.PayBy.UnixMilli())
		}
	}
	due, _ := e.rdb.ZRange(e.ctx, e.keys.Due(e.sale), 0, -1).Result()
	if len(due) != 2 || due[0] == a || due[1] == a {
		t.Errorf("due %v, want b and c only", due)
	}

	// The sale sells on, and a replayed key answers its first order.
	if code, id := e.reserve("u2", 2, "k2"); code != scripts.CodeOK || id != b {
		t.Errorf("replayed k2: %s %q, want OK %q", code, id, b)
	}
	if code, _ := e.reserve("u2", 1, ""); code != scripts.CodeLimitReached {
		t.Errorf("u2 again: %s, want LIMIT_REACHED (u2 holds 2 of 2)", code)
	}
	if code, _ := e.reserve("u4", 1, ""); code != scripts.CodeOK {
		t.Errorf("new buyer: %s", code)
	}
	if s := e.meta()["seq"]; s != "5" {
		t.Errorf("seq after a new order %s, want 5: MySQL's 4 and one more", s)
	}
	if n, _ := e.rdb.SCard(e.ctx, e.keys.Held()).Result(); n != 0 {
		t.Errorf("%d sales left in the held set", n)
	}

	// A second pass holds nothing: the sale was checked under this Redis.
	if held, err := e.loader.HoldPass(e.ctx); err != nil || held != 0 {
		t.Errorf("hold pass after the repair: %d held, %v", held, err)
	}
}

// Only the whole sale's truth counts: an order Redis remembers as pending
// that MySQL has cancelled gives its units back, and units MySQL holds
// beyond the stock Redis remembers (a restock lost with the same writes)
// raise the stock instead of leaving remaining below 0 (Invariant 1).
func TestRepairCancelledAndLostRestock(t *testing.T) {
	e := newEnv(t, "rc")
	e.create(2, 5, 300)
	_, a := e.reserve("u1", 1, "")
	e.forward()
	before := e.snapshot()

	k := e.keys
	if _, err := e.loader.Run(e.ctx, scripts.Admin, []string{k.Meta(e.sale), k.Users(e.sale), k.Outbox(e.sale), k.Op(e.sale, "r1")},
		"restock", k.Events(), e.sale, 3, 1000000); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if code, _ := e.reserve("v"+strconv.Itoa(i), 1, ""); code != scripts.CodeOK {
			t.Fatalf("buy %d: %s", i, code)
		}
	}
	if code := e.orderOp("cancel", a); code != scripts.CodeOK {
		t.Fatalf("cancel: %s", code)
	}
	e.forward()
	e.rollBack(before)
	if _, err := e.loader.HoldPass(e.ctx); err != nil {
		t.Fatal(err)
	}
	r := e.repairer()
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	m := e.meta()
	if m["sold"] != "4" || m["stock"] != "4" || m["cancelled"] != "1" || m["pending"] != "4" {
		t.Errorf("meta %v: want sold 4 (a cancelled, four live), stock raised from 2 to 4, 1 cancelled, 4 pending", m)
	}
	if s := r.Stats(); s.Raised != 2 {
		t.Errorf("stats %+v, want the stock raised by 2", s)
	}
	if u, _ := e.rdb.HGet(e.ctx, k.Users(e.sale), "u1").Result(); u != "" {
		t.Errorf("u1 holds %q after MySQL's cancel, want none", u)
	}
	if code, _ := e.reserve("w", 1, ""); code != scripts.CodeSoldOut {
		t.Errorf("buy after the repair: %s, want SOLD_OUT", code)
	}
}

// While the orders queue has messages ready, a held sale waits: an order
// still on its way to MySQL would otherwise be missed.
func TestRepairWaitsForTheQueue(t *testing.T) {
	e := newEnv(t, "rq")
	e.create(5, 1, 0)
	before := e.snapshot()
	e.reserve("u1", 1, "")
	e.forward()
	e.rollBack(before)
	if _, err := e.loader.HoldPass(e.ctx); err != nil {
		t.Fatal(err)
	}
	ready := 3
	// A loader of its own, not loaded yet, as a consumer's is until its
	// first use.
	r, err := New(Config{}, Deps{Redis: e.rdb, DB: e.db, Loader: scripts.New(e.rdb, "", e.keys), Keys: e.keys,
		Queue: func(context.Context) (broker.Depth, error) { return broker.Depth{Ready: ready}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if m := e.meta(); m["hold"] != "1" || m["sold"] != "0" {
		t.Fatalf("with 3 messages ready the sale was repaired: %v", m)
	}
	ready = 0
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if m := e.meta(); m["hold"] != "" || m["sold"] != "1" {
		t.Errorf("after the queue drained: %v, want released with sold 1", m)
	}
}

// After a Redis restart the order views are right once the sale is
// repaired: an order whose mark Redis kept reads created; one whose mark
// was lost with Redis's last writes (its record kept) is marked again from
// MySQL; one Redis forgot is restored flagged in MySQL; one not in MySQL
// reads queued. The repair marks again only the rows with an event since
// the sale's last repair (meta cseq): a second restart marks only the
// order that came since.
func TestRepairViews(t *testing.T) {
	e := newEnv(t, "rv")
	e.create(10, 5, 0)
	_, a := e.reserve("u1", 1, "")
	e.forward() // a in MySQL, marked
	_, d := e.reserve("u2", 1, "")
	before := e.snapshot()
	e.forward() // d in MySQL, marked: the mark lost below
	_, b := e.reserve("u3", 1, "")
	e.forward() // b in MySQL, marked: its record lost below
	e.rollBack(before)
	if in, _ := e.rdb.SIsMember(e.ctx, e.keys.Created(e.sale), d).Result(); in {
		t.Fatalf("d's mark survived the rollback")
	}
	if held, err := e.loader.HoldPass(e.ctx); err != nil || held != 1 {
		t.Fatalf("hold pass: %d held, %v; want 1", held, err)
	}
	r := e.repairer()
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Repaired != 1 || s.Restored != 1 || s.Remarked != 3 {
		t.Errorf("stats %+v; want 1 sale repaired, b restored, a, d and b marked again (a sale never repaired: all its orders)", s)
	}
	_, q := e.reserve("u4", 1, "") // not in MySQL
	for oid, want := range map[string]bool{a: true, d: true, b: true, q: false} {
		if v := e.view(oid); v.Code != scripts.CodeOK || v.Record.Created != want {
			t.Errorf("view of %s after the repair: %+v; want created %v", oid, v, want)
		}
	}
	if m := e.meta(); m["cseq"] != "3" {
		t.Errorf("meta cseq %q after the repair, want 3 (a, d, b)", m["cseq"])
	}

	// Another restart, after q reached MySQL and was marked: nothing lost,
	// and only q has an event since the last repair.
	e.forward()
	e.rollBack(e.snapshot())
	if held, err := e.loader.HoldPass(e.ctx); err != nil || held != 1 {
		t.Fatalf("second hold pass: %d held, %v; want 1", held, err)
	}
	r = e.repairer()
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Remarked != 1 || s.Restored != 0 || s.Released != 1 {
		t.Errorf("second repair: stats %+v; want q alone marked again, nothing restored, the sale released as it was", s)
	}
	if v := e.view(q); !v.Record.Created {
		t.Errorf("view of q after the second repair: %+v", v)
	}
}
