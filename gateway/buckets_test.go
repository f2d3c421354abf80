package gateway

import (
	"context"
	"fmt"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale/saletest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// The tests of sales of several buckets (API.md "buckets", buckets.go):
// whatever the buckets do inside, buyers and admins see one sale, and every
// unit is at each instant in exactly one of the pool, a bucket's stock or a
// move record. They run on one Redis and on the cluster of `make up-cluster`
// (FLASHGATE_REDIS_ADDRS), where the buckets sit on distinct primaries.

// checkBuckets checks a quiet bucketed sale's records
// (saletest.CheckBuckets), and its admin view against their sums: stock,
// sold, remaining, buyers and buckets.
func checkBuckets(t testing.TB, g *testGateway, sale string) saletest.Buckets {
	t.Helper()
	l := saletest.CheckBuckets(t, g.rdb, g.keys, sale)
	v := g.view(sale)
	if v.num("stock") != l.Stock || v.num("sold") != l.Sold() || v.num("remaining") != l.Stock-l.Sold() ||
		v.num("buyers") != int64(len(l.Held)) || v.num("buckets") != int64(len(l.Names)) {
		t.Errorf("%s: view %s; Redis: stock %d, sold %d, %d buyers, %d buckets", sale, v.raw, l.Stock, l.Sold(),
			len(l.Held), len(l.Names))
	}
	return l
}

// Invariants 1 and 2 over three buckets: a crowd of twice the stock, each
// buyer asking twice, buys exactly the stock; nobody holds more than the
// limit or holds units in two buckets; every order is in the outbox of its
// buyer's bucket, under the sale's id, its id ending in that bucket; no
// refusal but sold_out and limit_reached.
func TestBucketOversell(t *testing.T) { forEachMode(t, testBucketOversell) }

func testBucketOversell(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	const sale, stock, users = "bhot", 1000, 5000
	g.mustSale(sale, `{"stock":1000,"per_user_limit":1,"buckets":3}`)
	names := saletest.BucketNames(t, g.rdb, g.keys, sale)
	if len(names) != 3 {
		t.Fatalf("names %v, want 3 buckets", names)
	}
	o := newOutcomes()
	saletest.Burst(2*users, 64, func(i int) {
		user := "u" + itoa(i%users)
		o.add(t, g.buy(sale, user, 1, ""), user)
	})
	orders, units := o.accepted()
	if orders != stock || units != stock {
		t.Errorf("accepted %d orders of %d units, stock %d (%v)", orders, units, stock, o.byStatus)
	}
	for status, n := range o.byStatus {
		if status != "accepted" && status != "sold_out" && status != "limit_reached" {
			t.Errorf("%d answers %q (%v): a bucketed sale must answer as a one-bucket sale; "+
				"TestBucketReserveContention shows the Store's error", n, status, o.byStatus)
		}
	}
	for u, n := range o.units {
		if n > 1 {
			t.Errorf("user %s was accepted %d units, limit 1", u, n)
		}
	}
	l := checkBuckets(t, g, sale)
	if v := g.view(sale); v.num("sold") != stock || v.num("remaining") != 0 || v.num("buyers") != stock {
		t.Errorf("view %s, want sold %d, remaining 0, buyers %d", v.raw, stock, stock)
	}
	var held int64
	for u, n := range l.Held {
		held += n
		if n > 1 {
			t.Errorf("user %s holds %d units, limit 1", u, n)
		}
	}
	if held != stock || l.OutUnits != stock || len(l.AcceptedIDs) != stock {
		t.Errorf("users hold %d units, outboxes %d units in %d orders; want %d", held, l.OutUnits, len(l.AcceptedIDs), stock)
	}
	for id, user := range o.orders {
		b, ok := l.AcceptedIDs[id]
		if !ok {
			t.Errorf("order %s answered 202 to %s is in no outbox", id, user)
		} else if want := scripts.BucketOf(user, len(names)); b != want {
			t.Errorf("order %s of %s is in bucket %d, the user's is %d", id, user, b, want)
		}
	}
	for i, n := range l.BucketSold {
		t.Logf("bucket %s: sold %d of %d handed", names[i], n, l.BucketStock[i])
	}
}

// Stock goes where the buyers are: ten buyers allowed 100 each, buying one
// unit at a time from three connections each, buy the whole 300 however they
// hash onto the buckets; a buyer stops at sold_out (which must then mean
// the whole sale is gone) or at the limit.
func TestBucketStockFollowsBuyers(t *testing.T) { forEachMode(t, testBucketStockFollowsBuyers) }

func testBucketStockFollowsBuyers(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	const sale, stock, buyers, limit = "bfollow", 300, 10, 100
	g.mustSale(sale, `{"stock":300,"per_user_limit":100,"buckets":3}`)
	names := saletest.BucketNames(t, g.rdb, g.keys, sale)
	perBucket := make([]int, len(names))
	for u := range buyers {
		perBucket[scripts.BucketOf("f"+itoa(u), len(names))]++
	}
	t.Logf("buyers per bucket: %v", perBucket)
	o := newOutcomes()
	var wg sync.WaitGroup
	for u := range buyers {
		user := "f" + itoa(u)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Bounded: a buyer gets at most limit units, then a refusal.
				for range 2 * stock {
					r := g.buy(sale, user, 1, "")
					o.add(t, r, user)
					if r.code != 202 && r.code != 503 {
						return
					}
				}
				t.Errorf("%s: no refusal after %d buys", user, 2*stock)
			}()
		}
	}
	wg.Wait()
	if _, units := o.accepted(); units != stock {
		t.Errorf("accepted %d units of %d (%v)", units, stock, o.byStatus)
	}
	for status, n := range o.byStatus {
		if status != "accepted" && status != "sold_out" && status != "limit_reached" {
			t.Errorf("%d answers %q (%v): a bucketed sale must answer as a one-bucket sale; "+
				"TestBucketReserveContention shows the Store's error", n, status, o.byStatus)
		}
	}
	l := checkBuckets(t, g, sale)
	if l.Sold() != stock {
		t.Errorf("sold %d, want %d (bucket stocks %v, sold %v, pool %d)", l.Sold(), stock, l.BucketStock, l.BucketSold, l.Stock-l.Moved)
	}
	for u, n := range l.Held {
		if n > limit {
			t.Errorf("user %s holds %d, limit %d", u, n, limit)
		}
	}
}

// A lock of a bucketed sale applies to every bucket by the time the call
// returns: no buy sent after it is accepted, each answers locked; after an
// unlock buys go on.
func TestBucketLockDuringBurst(t *testing.T) {
	g := startGateway(t)
	const sale = "block"
	g.mustSale(sale, `{"stock":100000,"per_user_limit":1000,"buckets":3}`)
	var lockedAt, unlocked atomic.Bool
	var late, accepted atomic.Int64
	var mu sync.Mutex
	lateAnswers := map[string]int{}
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
				sentAfterLock := lockedAt.Load() && !unlocked.Load()
				r := g.buy(sale, fmt.Sprintf("w%d-%d", w, i%500), 1, "")
				if r.code == 202 {
					accepted.Add(1)
				}
				// A buy sent after the lock returned and answered before the
				// unlock was sent must be locked.
				if sentAfterLock && !unlocked.Load() {
					mu.Lock()
					lateAnswers[fmt.Sprintf("%d %s", r.code, r.status())]++
					mu.Unlock()
					if r.code == 202 {
						late.Add(1)
					}
				}
			}
		}(w)
	}
	localstack.WaitFor(t, 20*time.Second, "some accepts before the lock", func() bool { return accepted.Load() > 300 })
	if r := g.adminPost(sale, "lock", ""); r.code != 200 || r.body["locked"] != true {
		t.Fatalf("lock: %d %s", r.code, r.raw)
	}
	lockedAt.Store(true)
	for i, lane := range saletest.BucketNames(t, g.rdb, g.keys, sale) {
		if v := g.rdb.HGet(context.Background(), g.keys.Meta(lane), "locked").Val(); v != "1" {
			t.Errorf("bucket %d not locked when the lock returned: %q", i, v)
		}
	}
	soldAtLock := g.view(sale).num("sold")
	localstack.WaitFor(t, 20*time.Second, "buys against the lock", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range lateAnswers {
			n += c
		}
		return n > 500
	})
	if sold := g.view(sale).num("sold"); sold != soldAtLock {
		t.Errorf("sold moved from %d to %d while locked", soldAtLock, sold)
	}
	unlocked.Store(true)
	if r := g.adminPost(sale, "unlock", ""); r.code != 200 || r.body["locked"] != false {
		t.Fatalf("unlock: %d %s", r.code, r.raw)
	}
	before := accepted.Load()
	localstack.WaitFor(t, 20*time.Second, "accepts after unlock", func() bool { return accepted.Load() > before+300 })
	close(stop)
	wg.Wait()
	if n := late.Load(); n > 0 {
		t.Errorf("%d buys sent after the lock returned were accepted", n)
	}
	mu.Lock()
	for answer, n := range lateAnswers {
		if answer != "423 locked" {
			t.Errorf("%d buys sent while locked answered %s (%v)", n, answer, lateAnswers)
		}
	}
	mu.Unlock()
	l := checkBuckets(t, g, sale)
	if l.Sold() != accepted.Load() {
		t.Errorf("sold %d, %d accepted", l.Sold(), accepted.Load())
	}
}

// A sold-out bucketed sale restocked by N sells exactly N more: the units
// join the pool, whence every bucket draws.
func TestBucketRestock(t *testing.T) {
	g := startGateway(t)
	const sale, stock, more = "brestock", 300, 150
	g.mustSale(sale, `{"stock":300,"per_user_limit":1,"buckets":3}`)
	sell := func(round string, want int64) {
		t.Helper()
		o := newOutcomes()
		saletest.Burst(3*stock, 64, func(i int) {
			user := round + itoa(i)
			o.add(t, g.buy(sale, user, 1, ""), user)
		})
		if _, units := o.accepted(); units != want {
			t.Errorf("%s: accepted %d units, want %d (%v)", round, units, want, o.byStatus)
		}
		for status := range o.byStatus {
			if status != "accepted" && status != "sold_out" {
				t.Errorf("%s: answers %v", round, o.byStatus)
			}
		}
	}
	sell("a", stock)
	if v := g.view(sale); v.num("remaining") != 0 || v.str("state") != "sold_out" {
		t.Fatalf("view after the first burst: %s", v.raw)
	}
	r := g.adminPost(sale, "restock", fmt.Sprintf(`{"quantity":%d}`, more))
	if r.code != 200 || r.num("stock") != stock+more || r.num("remaining") != more || r.num("buckets") != 3 {
		t.Fatalf("restock: %d %s", r.code, r.raw)
	}
	sell("b", more)
	l := checkBuckets(t, g, sale)
	if l.Sold() != stock+more || l.Stock != stock+more {
		t.Errorf("sold %d of %d, want all %d", l.Sold(), l.Stock, stock+more)
	}
}

// The script cache lost on every primary (the one Redis) again and again
// during a burst on a bucketed sale, the move script's two halves among
// the calls that meet NOSCRIPT: no oversell, no 5xx but 503, and the
// records add up; the sale then sells out exactly.
func TestBucketScriptFlushDuringBurst(t *testing.T) {
	g := startGateway(t, onOwnRedis(t))
	const sale, stock = "bflush", 300
	g.mustSale(sale, `{"stock":300,"per_user_limit":1,"buckets":3}`)
	before := g.loader.Stats().NoScript
	stopFlushing := flushScriptsMeanwhile(t, g)
	o := newOutcomes()
	saletest.Burst(4*stock, 64, func(i int) {
		user := "s" + itoa(i)
		o.add(t, g.buy(sale, user, 1, ""), user)
	})
	stopFlushing()
	var unavailable int
	for _, a := range o.fivexx {
		if !strings.HasPrefix(a, "503 ") {
			t.Errorf("a 5xx other than 503: %s", a)
		}
		unavailable++
	}
	for status := range o.byStatus {
		if status != "accepted" && status != "sold_out" && status != "unavailable" {
			t.Errorf("answers %v", o.byStatus)
		}
	}
	// A 503 promised nothing, but may have been sold (a reply lost) and may
	// have left units in a move record for the settling pass: sell what is
	// left, as a crowd that keeps coming would.
	// Rounds of 32 buyers at once (one at a time, a slow machine sold a
	// few a second and did not finish in time), until one hears sold out.
	drained := 0
	localstack.WaitFor(t, 60*time.Second, "the rest of the sale to sell", func() bool {
		var soldOut atomic.Bool
		first := drained
		saletest.Burst(32, 32, func(i int) {
			user := "d" + itoa(first+i)
			r := g.buy(sale, user, 1, "")
			o.add(t, r, user)
			if r.code == 410 {
				soldOut.Store(true)
			}
		})
		drained += 32
		return soldOut.Load()
	})
	l := checkBuckets(t, g, sale)
	_, units := o.accepted()
	if l.Sold() != stock || units > stock || unavailable == 0 && units != stock {
		t.Errorf("sold %d, accepted %d (%d answers 503), stock %d", l.Sold(), units, unavailable, stock)
	}
	if g.loader.Stats().NoScript == before {
		t.Errorf("no NOSCRIPT was met: the test did not exercise the reload path")
	}
	t.Logf("%d NOSCRIPT answers, %d 503, %d buys after the burst", g.loader.Stats().NoScript-before, unavailable, drained)
}

// Orders of a bucketed sale with a payment window live in their buckets and
// are found by the ".i" of their ids: the order view, pay and cancel reach
// them, a cancel returns units to the sale, an id naming no bucket is 404,
// and the sweeper expires the orders of every bucket.
func TestBucketPaymentWindow(t *testing.T) {
	g := startGateway(t)
	const sale = "bpay"
	g.mustSale(sale, `{"stock":30,"per_user_limit":1,"payment_window":600,"buckets":3}`)
	names := saletest.BucketNames(t, g.rdb, g.keys, sale)
	ctx := context.Background()
	for _, lane := range names {
		if ok, _ := g.rdb.SIsMember(ctx, g.keys.Paying(), lane).Result(); !ok {
			t.Errorf("bucket %s is not in the paying set: no sweeper expires its orders", lane)
		}
	}
	// One buyer in each bucket, and one more in bucket 0.
	users := []string{saletest.UserOfBucket(t, names, 0, "p"), saletest.UserOfBucket(t, names, 1, "p"), saletest.UserOfBucket(t, names, 2, "p"),
		saletest.UserOfBucket(t, names, 0, "q")}
	ids := make([]string, len(users))
	for i, u := range users {
		r := g.buy(sale, u, 1, "")
		if r.code != 202 || r.str("state") != order.StatePendingPayment || payBy(t, r) == 0 {
			t.Fatalf("buy by %s: %d %s", u, r.code, r.raw)
		}
		ids[i] = r.str("order_id")
		if b := scripts.BucketOf(u, len(names)); !strings.HasSuffix(ids[i], "."+itoa(b)) {
			t.Errorf("order %s of a buyer of bucket %d", ids[i], b)
		}
		v := g.orderView(sale, ids[i])
		if v.code != 200 || v.str("state") != order.StatePendingPayment || v.str("sale_id") != sale ||
			v.str("user_id") != u || v.str("order_id") != ids[i] {
			t.Errorf("order view of %s: %d %s", ids[i], v.code, v.raw)
		}
	}
	if v := g.view(sale); v.num("sold") != 4 || v.num("pending_payment") != 4 {
		t.Fatalf("view after 4 buys: %s", v.raw)
	}
	if r := g.pay(sale, ids[1]); r.code != 200 || r.str("state") != order.StatePaid || r.str("order_id") != ids[1] {
		t.Errorf("pay %s: %d %s", ids[1], r.code, r.raw)
	}
	if v := g.orderView(sale, ids[1]); v.str("state") != order.StatePaid {
		t.Errorf("order view after the pay: %d %s", v.code, v.raw)
	}
	if r := g.cancel(sale, ids[2]); r.code != 200 || r.str("state") != order.StateCancelled {
		t.Errorf("cancel %s: %d %s", ids[2], r.code, r.raw)
	}
	if v := g.view(sale); v.num("sold") != 3 || v.num("remaining") != 27 || v.num("pending_payment") != 2 {
		t.Errorf("view after a pay and a cancel: %s", v.raw)
	}
	// The cancelled buyer's allowance is back, in their own bucket.
	if r := g.buy(sale, users[2], 1, ""); r.code != 202 || !strings.HasSuffix(r.str("order_id"), ".2") {
		t.Errorf("buy again after the cancel: %d %s", r.code, r.raw)
	}
	id7 := strings.TrimSuffix(ids[0], ".0") + ".7"
	for _, id := range []string{id7, strings.TrimSuffix(ids[0], ".0"), ids[0] + "x"} {
		if r := g.orderView(sale, id); r.code != 404 || r.status() != "not_found" {
			t.Errorf("order view of %s: %d %s", id, r.code, r.raw)
		}
		if r := g.pay(sale, id); r.code != 404 {
			t.Errorf("pay of %s: %d %s", id, r.code, r.raw)
		}
		if r := g.cancel(sale, id); r.code != 404 {
			t.Errorf("cancel of %s: %d %s", id, r.code, r.raw)
		}
	}
	// A shorter window, for the orders accepted after it, in every bucket.
	if r := g.put(sale, `{"payment_window":1}`); r.code != 200 || r.num("payment_window") != 1 {
		t.Fatalf("PUT payment_window 1: %d %s", r.code, r.raw)
	}
	for _, lane := range names {
		if w := g.rdb.HGet(ctx, g.keys.Meta(lane), "window").Val(); w != "1" {
			t.Errorf("bucket %s has window %q after the PUT", lane, w)
		}
	}
	var short []string
	for b := range names {
		u := saletest.UserOfBucket(t, names, b, "e")
		r := g.buy(sale, u, 1, "")
		if r.code != 202 || r.str("state") != order.StatePendingPayment {
			t.Fatalf("buy by %s: %d %s", u, r.code, r.raw)
		}
		short = append(short, r.str("order_id"))
	}
	// ids[0], ids[3] (600 s) and the re-buy are pending; the three short
	// ones expire.
	localstack.WaitFor(t, 20*time.Second, "the short orders to expire", func() bool {
		v := g.view(sale)
		return v.num("sold") == 4 && v.num("pending_payment") == 3
	})
	for _, id := range short {
		if v := g.orderView(sale, id); v.code != 200 || v.str("state") != order.StateExpired {
			t.Errorf("order view of %s after the window: %d %s", id, v.code, v.raw)
		}
	}
	if v := g.orderView(sale, ids[0]); v.str("state") != order.StatePendingPayment {
		t.Errorf("order %s of the long window: %d %s", ids[0], v.code, v.raw)
	}
	l := checkBuckets(t, g, sale)
	states := map[string]int{}
	for _, r := range l.Records {
		states[r.State]++
	}
	want := map[string]int{order.StatePendingPayment: 3, order.StatePaid: 1, order.StateCancelled: 1, order.StateExpired: 3}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("orders by state %v, want %v", states, want)
	}
	if v := g.view(sale); v.num("remaining") != 26 {
		t.Errorf("view at the end: %s", v.raw)
	}
}

// The contract's edges of buckets: an Idempotency-Key replays the first
// order (from its bucket); a count outside 1-16 or not a whole number is
// 400 and creates nothing; another count on an update is 409 either way;
// an update without buckets reaches every bucket.
func TestBucketContract(t *testing.T) {
	g := startGateway(t)
	ctx := context.Background()
	const sale = "bidem"
	g.mustSale(sale, `{"stock":50,"per_user_limit":5,"buckets":3}`)
	first := g.buy(sale, "ida", 1, "key-1")
	if first.code != 202 {
		t.Fatalf("buy: %d %s", first.code, first.raw)
	}
	for range 3 {
		if again := g.buy(sale, "ida", 1, "key-1"); again.code != 202 || again.str("order_id") != first.str("order_id") {
			t.Errorf("replay: %d %s, first %s", again.code, again.raw, first.raw)
		}
	}
	if r := g.buy(sale, "ida", 2, "key-1"); r.code != 422 || r.status() != "idempotency_conflict" {
		t.Errorf("the key with another quantity: %d %s", r.code, r.raw)
	}
	if l := checkBuckets(t, g, sale); l.Sold() != 1 || len(l.AcceptedIDs) != 1 {
		t.Errorf("after the replays: sold %d in %d orders, want 1", l.Sold(), len(l.AcceptedIDs))
	}

	for _, c := range []struct{ name, buckets string }{
		{"zero", "0"}, {"seventeen", "17"}, {"negative", "-1"}, {"string", `"2"`}, {"fraction", "1.5"},
		{"exponent", "2e0"}, {"null", "null"}, {"huge", "99999999999999999999"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "bbad" + c.name
			if r := g.put(id, `{"stock":10,"buckets":`+c.buckets+`}`); r.code != 400 || r.status() != "bad_request" {
				t.Errorf("create with buckets %s: %d %s", c.buckets, r.code, r.raw)
			}
			if r := g.view(id); r.code != 404 {
				t.Errorf("the refused create made a sale: %d %s", r.code, r.raw)
			}
			if n := g.rdb.Exists(ctx, g.keys.Meta(id+"#0.0")).Val(); n != 0 {
				t.Errorf("the refused create made a bucket")
			}
		})
	}

	for _, body := range []string{`{"buckets":1}`, `{"buckets":2}`, `{"buckets":4}`, `{"stock":60,"buckets":1}`, `{"per_user_limit":9,"buckets":16}`} {
		if r := g.put(sale, body); r.code != 409 || r.status() != "conflict" {
			t.Errorf("PUT %s on a sale of 3 buckets: %d %s", body, r.code, r.raw)
		}
	}
	const one = "bone-bucket"
	g.mustSale(one, `{"stock":10}`)
	for _, body := range []string{`{"buckets":3}`, `{"stock":10,"buckets":3}`, `{"stock":20,"buckets":2}`} {
		if r := g.put(one, body); r.code != 409 || r.status() != "conflict" {
			t.Errorf("PUT %s on a sale of 1 bucket: %d %s", body, r.code, r.raw)
		}
	}
	if v := g.view(one); v.num("buckets") != 1 || v.num("stock") != 10 {
		t.Errorf("the sale of 1 bucket after the refusals: %s", v.raw)
	}
	if n := g.rdb.HExists(ctx, g.keys.Meta(one), "names").Val(); n {
		t.Errorf("the sale of 1 bucket got bucket names")
	}
	if r := g.put(one, `{"buckets":1,"per_user_limit":2}`); r.code != 200 || r.num("per_user_limit") != 2 {
		t.Errorf("PUT buckets 1 on a sale of 1 bucket: %d %s", r.code, r.raw)
	}

	if r := g.put(sale, `{"per_user_limit":7}`); r.code != 200 || r.num("per_user_limit") != 7 || r.num("buckets") != 3 {
		t.Fatalf("PUT per_user_limit 7: %d %s", r.code, r.raw)
	}
	if r := g.put(sale, `{"buckets":3,"per_user_limit":8}`); r.code != 200 || r.num("per_user_limit") != 8 {
		t.Fatalf("PUT the same bucket count: %d %s", r.code, r.raw)
	}
	for _, key := range append([]string{sale}, saletest.BucketNames(t, g.rdb, g.keys, sale)...) {
		if lim := g.rdb.HGet(ctx, g.keys.Meta(key), "limit").Val(); lim != "8" {
			t.Errorf("%s has limit %q after the PUTs, want 8", key, lim)
		}
	}
	v := g.view(sale)
	if v.code != 200 || v.num("buckets") != 3 || v.num("stock") != 50 || v.num("per_user_limit") != 8 {
		t.Errorf("view: %s", v.raw)
	}
	// The new limit holds for a buyer, in their bucket.
	u := saletest.UserOfBucket(t, saletest.BucketNames(t, g.rdb, g.keys, sale), 2, "lim")
	if r := g.buy(sale, u, 8, ""); r.code != 202 {
		t.Errorf("buy of 8 at limit 8: %d %s", r.code, r.raw)
	}
	if r := g.buy(sale, u, 1, ""); r.code != 409 || r.status() != "limit_reached" {
		t.Errorf("buy past limit 8: %d %s", r.code, r.raw)
	}
	checkBuckets(t, g, sale)
}

// A gateway keeps a sale's buckets once it has met them. Should they vanish
// (the sale's Redis emptied, the sale made again with one bucket), the first
// buy that finds its bucket gone makes the gateway forget them: buys go
// home again and sell there.
func TestBucketForgottenWhenGone(t *testing.T) {
	g := startGateway(t)
	const sale = "bgone"
	g.mustSale(sale, `{"stock":10,"per_user_limit":1,"buckets":3}`)
	if r := g.buy(sale, "a", 1, ""); r.code != 202 {
		t.Fatalf("buy on the bucketed sale: %d %s", r.code, r.raw)
	}
	ctx := context.Background()
	for _, id := range append(saletest.BucketNames(t, g.rdb, g.keys, sale), sale) {
		for _, k := range []string{g.keys.Meta(id), g.keys.Users(id), g.keys.Outbox(id), g.keys.Orders(id), g.keys.Due(id), g.keys.Moves(id)} {
			if err := g.rdb.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	g.mustSale(sale, `{"stock":10,"per_user_limit":1}`)
	// The first buy may meet the vanished bucket (404 is its answer then:
	// the bucket holds no sale); after it the sale sells from its home.
	r := g.buy(sale, "b", 1, "")
	if r.code != 202 {
		if r.code != 404 {
			t.Fatalf("first buy after the buckets vanished: %d %s, want 202 or 404", r.code, r.raw)
		}
		r = g.buy(sale, "b", 1, "")
	}
	if r.code != 202 {
		t.Fatalf("buy after the buckets vanished: %d %s, want 202 from the one-bucket sale", r.code, r.raw)
	}
	if v := g.view(sale); v.num("sold") != 1 || v.num("buckets") != 1 {
		t.Errorf("view %s: want sold 1 of one bucket", v.raw)
	}
}

// The per-sale series of /metrics name the sale, never a bucket: a sale of
// buckets shows its buckets' figures summed under its own id.
func TestBucketMetrics(t *testing.T) {
	g := startGateway(t)
	const sale = "bmet"
	g.mustSale(sale, `{"stock":100,"per_user_limit":1,"payment_window":600,"buckets":3}`)
	var ids []string
	for i := range 9 {
		r := g.buy(sale, "m"+itoa(i), 1, "")
		if r.code != 202 {
			t.Fatalf("buy %d: %d %s", i, r.code, r.raw)
		}
		ids = append(ids, r.str("order_id"))
	}
	if r := g.pay(sale, ids[0]); r.code != 200 {
		t.Fatalf("pay: %d %s", r.code, r.raw)
	}
	if r := g.cancel(sale, ids[1]); r.code != 200 {
		t.Fatalf("cancel: %d %s", r.code, r.raw)
	}
	m := g.scrape()
	for series, want := range map[string]float64{
		`flashgate_sale_sold{sale="bmet"}`:                                   8,
		`flashgate_sale_remaining{sale="bmet"}`:                              92,
		`flashgate_sale_payment_orders{sale="bmet",state="pending_payment"}`: 7,
		`flashgate_sale_payment_orders{sale="bmet",state="paid"}`:            1,
		`flashgate_sale_payment_orders{sale="bmet",state="cancelled"}`:       1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	for series := range m {
		if strings.Contains(series, "#") {
			t.Errorf("series %s names a bucket", series)
		}
	}
}
