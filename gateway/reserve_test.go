package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/sale/saletest"
	"github.com/flashgate/flashgate/scripts"
)

// forEachMode runs a correctness test on each path of the buy handler:
// batched with the closed-sale memory (the default), batched with several
// calls of a sale in flight at once, and one script call per buy with no
// memory (batching off).
func forEachMode(t *testing.T, f func(t *testing.T, mode gwOption)) {
	modes := []struct {
		name string
		opt  gwOption
	}{
		{"batched", func(c *config.Config) { c.Batch.MaxSize = 64; c.Cache.ClosedTTL = 500 * time.Millisecond }},
		{"batched-parallel", func(c *config.Config) { c.Batch.MaxSize = 16; c.Batch.Calls = 3; c.Cache.ClosedTTL = 0 }},
		{"single", func(c *config.Config) { c.Batch.MaxSize = 1; c.Cache.ClosedTTL = 0 }},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, m.opt) })
	}
}

// outcomes counts the answers of a burst, safely from many goroutines.
type outcomes struct {
	mu       sync.Mutex
	byStatus map[string]int
	orders   map[string]string // order id → user
	units    map[string]int64  // user → units accepted
	fivexx   []string
}

func newOutcomes() *outcomes {
	return &outcomes{byStatus: map[string]int{}, orders: map[string]string{}, units: map[string]int64{}}
}

func (o *outcomes) add(t *testing.T, r response, user string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.byStatus[r.status()]++
	if r.code >= 500 {
		o.fivexx = append(o.fivexx, fmt.Sprintf("%d %s", r.code, r.raw))
	}
	if r.code == 202 {
		id := r.str("order_id")
		if prev, dup := o.orders[id]; dup {
			t.Errorf("order id %s given twice (users %s, %s)", id, prev, user)
		}
		o.orders[id] = user
		o.units[user] += r.num("quantity")
	}
}

func (o *outcomes) accepted() (orders int, units int64) {
	for _, u := range o.units {
		units += u
	}
	return len(o.orders), units
}

// Invariant 1: sold + remaining = stock, remaining ≥ 0: a crowd larger than
// the stock buys exactly the stock, and Redis's records add up. Invariant 2:
// a user's units ≤ per_user_limit.
func TestOversell(t *testing.T) { forEachMode(t, testOversell) }

func testOversell(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	const stock, users, buys, limit = 300, 1000, 2500, 2
	g.mustSale("hot", fmt.Sprintf(`{"stock":%d,"per_user_limit":%d}`, stock, limit))
	o := newOutcomes()
	saletest.Burst(buys, 400, func(i int) {
		user := fmt.Sprintf("u%d", i%users)
		o.add(t, g.buy("hot", user, 1+i%2, ""), user)
	})
	_, units := o.accepted()
	if units != stock {
		t.Errorf("accepted %d units, stock is %d (outcomes %v)", units, stock, o.byStatus)
	}
	for u, n := range o.units {
		if n > limit {
			t.Errorf("user %s got %d units, limit %d", u, n, limit)
		}
	}
	if len(o.fivexx) > 0 {
		t.Errorf("%d 5xx answers, first %s", len(o.fivexx), o.fivexx[0])
	}
	if sold := g.checkLedger("hot"); sold != stock {
		t.Errorf("Redis sold %d, want %d", sold, stock)
	}
	if o.byStatus["sold_out"] == 0 {
		t.Errorf("no sold_out answer after the stock ran out: %v", o.byStatus)
	}
}

// Invariant 2: a user's units ≤ per_user_limit, one request after another
// and from many connections at once.
func TestPerUserLimit(t *testing.T) { forEachMode(t, testPerUserLimit) }

func testPerUserLimit(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	g.mustSale("lim", `{"stock":1000,"per_user_limit":5}`)
	steps := []struct {
		name   string
		qty    int
		status string
	}{
		{"two of five", 2, "accepted"},
		{"two more, four of five", 2, "accepted"},
		{"two would make six", 2, "limit_reached"},
		{"one makes five", 1, "accepted"},
		{"one more would make six", 1, "limit_reached"},
	}
	for _, s := range steps {
		if r := g.buy("lim", "alice", s.qty, ""); r.status() != s.status {
			t.Fatalf("%s: got %d %s, want %s", s.name, r.code, r.raw, s.status)
		}
	}
	// The same user from many connections at once: limit 5, quantity 2.
	o := newOutcomes()
	saletest.Burst(60, 60, func(int) { o.add(t, g.buy("lim", "bob", 2, ""), "bob") })
	if n, units := o.accepted(); n != 2 || units != 4 {
		t.Errorf("bob: %d orders, %d units accepted; want 2 orders, 4 units (%v)", n, units, o.byStatus)
	}
	if o.byStatus["limit_reached"] != 58 {
		t.Errorf("bob: %v, want 58 limit_reached", o.byStatus)
	}
	g.checkLedger("lim")
}

// Invariant 4: a repeated Idempotency-Key returns the first reply and
// reserves nothing, also when the repeats arrive together.
func TestIdempotencyKey(t *testing.T) { forEachMode(t, testIdempotencyKey) }

func testIdempotencyKey(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	g.mustSale("idem", `{"stock":10,"per_user_limit":3}`)
	var bodies [][]byte
	var mu sync.Mutex
	saletest.Burst(50, 50, func(int) {
		r := g.buy("idem", "carol", 2, "click-1")
		mu.Lock()
		bodies = append(bodies, r.raw)
		mu.Unlock()
	})
	for _, b := range bodies[1:] {
		if !bytes.Equal(b, bodies[0]) {
			t.Fatalf("replies differ: %s vs %s", b, bodies[0])
		}
	}
	if !bytes.Contains(bodies[0], []byte(`"accepted"`)) {
		t.Fatalf("first reply %s", bodies[0])
	}
	if v := g.view("idem"); v.num("sold") != 2 || v.num("buyers") != 1 {
		t.Errorf("after 50 repeats of one key: sold %d buyers %d, want 2 and 1", v.num("sold"), v.num("buyers"))
	}
	cases := []struct {
		name       string
		user       string
		qty        int
		key        string
		code       int
		status     string
		sameAsLast bool
	}{
		{"same key, other quantity", "carol", 1, "click-1", 422, "idempotency_conflict", false},
		{"same key, other user", "dave", 2, "click-1", 422, "idempotency_conflict", false},
		{"a rejection is replayed too", "carol", 2, "click-2", 409, "limit_reached", false},
		{"replay of the rejection", "carol", 2, "click-2", 409, "limit_reached", true},
		{"other key, new order", "erin", 1, "click-3", 202, "accepted", false},
	}
	var last []byte
	for _, c := range cases {
		r := g.buy("idem", c.user, c.qty, c.key)
		if r.code != c.code || r.status() != c.status {
			t.Errorf("%s: got %d %s, want %d %s", c.name, r.code, r.raw, c.code, c.status)
		}
		if c.sameAsLast && !bytes.Equal(r.raw, last) {
			t.Errorf("%s: %s differs from %s", c.name, r.raw, last)
		}
		last = r.raw
	}
	// A key is scoped to its sale.
	g.mustSale("idem2", `{"stock":10}`)
	if r := g.buy("idem2", "carol", 2, "click-1"); r.code != 409 && r.code != 202 {
		t.Errorf("same key on another sale: %d %s", r.code, r.raw)
	}
	g.checkLedger("idem")
}

// Invariant 1 under retries: a retried script call (go-redis retries after
// a lost reply) must not reserve twice; the second run answers as the first
// did.
func TestReservationIDReplay(t *testing.T) {
	g := startGateway(t)
	g.mustSale("rid", `{"stock":5,"per_user_limit":5}`)
	rs := []sale.Reservation{{OrderID: "fixed-order-1", UserID: "frank", Quantity: 2}}
	for i := 0; i < 3; i++ {
		out := make([]sale.Result, 1)
		if err := g.sales.Reserve(context.Background(), "rid", rs, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Err != nil || out[0].OrderID != "fixed-order-1" {
			t.Fatalf("run %d: %+v", i, out[0])
		}
	}
	if v := g.view("rid"); v.num("sold") != 2 || v.num("outbox_pending") != 1 {
		t.Errorf("after three runs of one reservation: %s", v.raw)
	}
	// The same id with another user is a collision, never an accept.
	out := make([]sale.Result, 1)
	rs[0].UserID = "grace"
	if err := g.sales.Reserve(context.Background(), "rid", rs, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err == nil {
		t.Errorf("colliding order id accepted: %+v", out[0])
	}
	g.checkLedger("rid")
}

// A batch sent again (its reply lost) answers as the first time, whatever
// its first reservation's outcome: the script reads the records of every
// id of the batch, not only of the first, before it decides anything. An
// id twice in one batch is refused the second time, never accepted twice.
func TestReservationBatchReplay(t *testing.T) {
	g := startGateway(t)
	g.mustSale("rbr", `{"stock":5,"per_user_limit":2,"payment_window":600}`)
	rs := []sale.Reservation{
		{OrderID: "batch-1", UserID: "ann", Quantity: 3}, // over the limit: refused
		{OrderID: "batch-2", UserID: "bob", Quantity: 2},
		{OrderID: "batch-3", UserID: "cid", Quantity: 1},
		{OrderID: "batch-4", UserID: "dee", Quantity: 2},
	}
	var first []sale.Result
	for run := range 3 {
		out := make([]sale.Result, len(rs))
		if err := g.sales.Reserve(context.Background(), "rbr", rs, out); err != nil {
			t.Fatal(err)
		}
		if run == 0 {
			first = out
			if !errors.Is(out[0].Err, sale.ErrLimitReached) || out[1].Err != nil || out[2].Err != nil || out[3].Err != nil {
				t.Fatalf("first run: %+v", out)
			}
			continue
		}
		for i := 1; i < len(rs); i++ {
			if out[i] != first[i] {
				t.Errorf("run %d, reservation %d: %+v, first %+v", run, i, out[i], first[i])
			}
		}
	}
	if v := g.view("rbr"); v.num("sold") != 5 || v.num("outbox_pending") != 3 || v.num("pending_payment") != 3 {
		t.Errorf("after three runs of one batch: %s", v.raw)
	}
	g.mustSale("rbd", `{"stock":5,"per_user_limit":5}`)
	dup := []sale.Reservation{{OrderID: "twice", UserID: "eve", Quantity: 1}, {OrderID: "twice", UserID: "eve", Quantity: 1}}
	out := make([]sale.Result, 2)
	if err := g.sales.Reserve(context.Background(), "rbd", dup, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Err != nil || out[1].Err == nil {
		t.Errorf("an id twice in one batch: %+v, want the first accepted and the second refused", out)
	}
	if v := g.view("rbd"); v.num("sold") != 1 {
		t.Errorf("an id twice in one batch: %s, want sold 1", v.raw)
	}
	g.checkLedger("rbr")
	g.checkLedger("rbd")
}

// Invariant 5: once a lock call returns, no buy is accepted until unlock.
func TestLockDuringBurst(t *testing.T) { forEachMode(t, testLockDuringBurst) }

func testLockDuringBurst(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	g.mustSale("lk", `{"stock":100000,"per_user_limit":1000}`)
	var lockedAt atomic.Bool // set once the lock call has returned
	var late atomic.Int64    // accepts of requests sent after that
	var accepted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sentAfterLock := lockedAt.Load()
				r := g.buy("lk", fmt.Sprintf("w%d-%d", w, i%500), 1, "")
				if r.code == 202 {
					accepted.Add(1)
					if sentAfterLock {
						late.Add(1)
					}
				}
			}
		}(w)
	}
	localstack.WaitFor(t, 20*time.Second, "some accepts before the lock", func() bool { return accepted.Load() > 200 })
	if r := g.adminPost("lk", "lock", ""); r.code != 200 || r.body["locked"] != true {
		t.Fatalf("lock: %d %s", r.code, r.raw)
	}
	lockedAt.Store(true)
	soldAtLock := g.view("lk").num("sold")
	time.Sleep(300 * time.Millisecond) // let the burst run against the lock
	if r := g.buy("lk", "after", 1, ""); r.code != 423 || r.status() != "locked" {
		t.Errorf("buy while locked: %d %s", r.code, r.raw)
	}
	if n := late.Load(); n > 0 {
		t.Errorf("%d buys sent after the lock returned were accepted", n)
	}
	if sold := g.view("lk").num("sold"); sold != soldAtLock {
		t.Errorf("sold moved from %d to %d while locked", soldAtLock, sold)
	}
	if r := g.adminPost("lk", "unlock", ""); r.code != 200 || r.body["locked"] != false {
		t.Fatalf("unlock: %d %s", r.code, r.raw)
	}
	before := accepted.Load()
	localstack.WaitFor(t, 20*time.Second, "accepts after unlock", func() bool { return accepted.Load() > before+50 })
	close(stop)
	wg.Wait()
	g.checkLedger("lk")
}

// Invariant 1 across a restock: the crowd buys exactly the stock after it.
func TestRestockMidSale(t *testing.T) { forEachMode(t, testRestockMidSale) }

func testRestockMidSale(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	g.mustSale("rs", `{"stock":100,"per_user_limit":1}`)
	var accepted atomic.Int64
	var restocked atomic.Bool
	o := newOutcomes()
	saletest.Burst(1200, 64, func(i int) {
		if accepted.Load() >= 50 && restocked.CompareAndSwap(false, true) {
			if r := g.adminPost("rs", "restock", `{"quantity":75}`); r.code != 200 || r.num("stock") != 175 {
				t.Errorf("restock: %d %s", r.code, r.raw)
			}
		}
		user := fmt.Sprintf("b%d", i)
		r := g.buy("rs", user, 1, "")
		if r.code == 202 {
			accepted.Add(1)
		}
		o.add(t, r, user)
	})
	if !restocked.Load() {
		t.Fatal("never restocked")
	}
	if _, units := o.accepted(); units != 175 {
		t.Errorf("accepted %d units after restock to 175 (%v)", units, o.byStatus)
	}
	if sold := g.checkLedger("rs"); sold != 175 {
		t.Errorf("sold %d, want 175", sold)
	}
}

func TestWindowsAndUnknownSale(t *testing.T) {
	g := startGateway(t)
	now := time.Now().UTC()
	g.mustSale("future", fmt.Sprintf(`{"stock":5,"starts_at":%q}`, now.Add(time.Hour).Format(time.RFC3339)))
	g.mustSale("past", fmt.Sprintf(`{"stock":5,"starts_at":%q,"ends_at":%q}`,
		now.Add(-2*time.Hour).Format(time.RFC3339), now.Add(-time.Hour).Format(time.RFC3339)))
	g.mustSale("open", fmt.Sprintf(`{"stock":5,"starts_at":%q,"ends_at":%q}`,
		now.Add(-time.Hour).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339)))
	cases := []struct {
		sale, status, state string
		code                int
	}{
		{"future", "not_started", "upcoming", 403},
		{"past", "ended", "ended", 403},
		{"open", "accepted", "active", 202},
		{"nosuchsale", "not_found", "", 404},
	}
	for _, c := range cases {
		t.Run(c.sale, func(t *testing.T) {
			if r := g.buy(c.sale, "henry", 1, ""); r.code != c.code || r.status() != c.status {
				t.Errorf("buy: %d %s, want %d %s", r.code, r.raw, c.code, c.status)
			}
			v := g.do("GET", g.base+"/v1/sales/"+c.sale, "", nil)
			if c.state == "" {
				if v.code != 404 {
					t.Errorf("view: %d %s", v.code, v.raw)
				}
				return
			}
			if v.code != 200 || v.str("state") != c.state {
				t.Errorf("view: %d %s, want state %s", v.code, v.raw, c.state)
			}
		})
	}
	// Clearing the end reopens the ended sale.
	if r := g.put("past", `{"ends_at":null}`); r.code != 200 || r.body["ends_at"] != nil {
		t.Fatalf("clear ends_at: %d %s", r.code, r.raw)
	}
	if r := g.buy("past", "henry", 1, ""); r.code != 202 {
		t.Errorf("buy after clearing the end: %d %s", r.code, r.raw)
	}
}

func TestOrderStatus(t *testing.T) {
	g := startGateway(t)
	g.mustSale("st", `{"stock":5}`)
	r := g.buy("st", "ivan", 1, "")
	if r.code != 202 {
		t.Fatalf("buy: %d %s", r.code, r.raw)
	}
	id := r.str("order_id")
	s := g.do("GET", g.base+"/v1/sales/st/orders/"+id, "", nil)
	if s.code != 200 || s.status() != "queued" || s.str("user_id") != "ivan" || s.num("quantity") != 1 {
		t.Errorf("status: %d %s", s.code, s.raw)
	}
	ctx := context.Background()
	if err := g.rdb.SAdd(ctx, g.keys.Created("st"), id).Err(); err != nil {
		t.Fatal(err)
	}
	if s := g.do("GET", g.base+"/v1/sales/st/orders/"+id, "", nil); s.status() != "created" {
		t.Errorf("after mark: %d %s", s.code, s.raw)
	}
	if s := g.do("GET", g.base+"/v1/sales/st/orders/nope", "", nil); s.code != 404 {
		t.Errorf("unknown order: %d %s", s.code, s.raw)
	}
	// One SADD for a batch, as the consumers mark: ids already created,
	// unknown, or named twice change nothing more; each queued one reads
	// created, and no record is rewritten.
	var ids []any
	for _, u := range []string{"jan", "kim", "lea"} {
		r := g.buy("st", u, 1, "")
		if r.code != 202 {
			t.Fatalf("buy: %d %s", r.code, r.raw)
		}
		ids = append(ids, r.str("order_id"))
	}
	before, err := g.rdb.HGetAll(ctx, g.keys.Orders("st")).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range ids {
		if s := g.do("GET", g.base+"/v1/sales/st/orders/"+o.(string), "", nil); s.status() != "queued" {
			t.Errorf("%s before the batch mark: %d %s", o, s.code, s.raw)
		}
	}
	if err := g.rdb.SAdd(ctx, g.keys.Created("st"), id, ids[0], "nope", ids[1], ids[0], ids[2]).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := g.rdb.HGetAll(ctx, g.keys.Orders("st")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(after, before) {
		t.Errorf("the mark changed the records: %v before, %v after", before, after)
	}
	for _, o := range append(ids, id) {
		k := o.(string)
		if s := g.do("GET", g.base+"/v1/sales/st/orders/"+k, "", nil); s.status() != "created" {
			t.Errorf("%s after the batch mark: %d %s", k, s.code, s.raw)
		}
	}
	// A record a release before the created set marked (flag "c"), with no
	// id in the set, reads created; one flagged "q" and not in the set
	// reads queued; so does a pay's answer.
	old := scripts.Record{Created: true, State: order.StateConfirmed, ReservedAt: 1, Quantity: 1, UserID: "old"}
	fresh := scripts.Record{State: order.StateConfirmed, ReservedAt: 1, Quantity: 1, UserID: "new"}
	if err := g.rdb.HSet(ctx, g.keys.Orders("st"), "old1", old.String(), "new1", fresh.String()).Err(); err != nil {
		t.Fatal(err)
	}
	for oid, want := range map[string]string{"old1": "created", "new1": "queued"} {
		if s := g.do("GET", g.base+"/v1/sales/st/orders/"+oid, "", nil); s.code != 200 || s.status() != want {
			t.Errorf("%s: %d %s, want status %s", oid, s.code, s.raw, want)
		}
	}
}

// Invariant 1 with quantities: an order larger than what is left is
// refused whole, and the rest still sells.
func TestInsufficientStock(t *testing.T) { forEachMode(t, testInsufficientStock) }

func testInsufficientStock(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	g.mustSale("few", `{"stock":3,"per_user_limit":10}`)
	steps := []struct {
		qty    int
		code   int
		status string
	}{{2, 202, "accepted"}, {2, 409, "insufficient_stock"}, {1, 202, "accepted"}, {1, 410, "sold_out"}}
	for i, s := range steps {
		if r := g.buy("few", "jack", s.qty, ""); r.code != s.code || r.status() != s.status {
			t.Errorf("step %d (quantity %d): %d %s, want %d %s", i, s.qty, r.code, r.raw, s.code, s.status)
		}
	}
	if sold := g.checkLedger("few"); sold != 3 {
		t.Errorf("sold %d, want 3", sold)
	}
}
