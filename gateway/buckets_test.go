package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// The tests of sales of several buckets (API.md "buckets", buckets.go):
// whatever the buckets do inside, buyers and admins see one sale, and every
// unit is at each instant in exactly one of the pool, a bucket's stock or a
// move record. They run on one Redis and on the cluster of `make up-cluster`
// (FLASHGATE_REDIS_ADDRS), where the buckets sit on distinct primaries.

// laneNames reads a sale's bucket ids from its home, as the gateway does.
func laneNames(t testing.TB, g *testGateway, sale string) []string {
	t.Helper()
	names, err := g.rdb.HGet(context.Background(), g.keys.Meta(sale), "names").Result()
	if err != nil {
		t.Fatalf("names of %s: %v", sale, err)
	}
	return strings.Split(names, ",")
}

// bucketOfUser is the bucket the gateway sends user to, of a sale whose
// buckets are names.
func bucketOfUser(names []string, user string) int {
	return (&bucketSet{names: names}).bucketOf(user)
}

// userOfBucket returns a user id starting with prefix that buys in bucket b.
func userOfBucket(t testing.TB, names []string, b int, prefix string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		if u := prefix + strconv.Itoa(i); bucketOfUser(names, u) == b {
			return u
		}
	}
	t.Fatalf("no user %s… buys in bucket %d", prefix, b)
	return ""
}

// bucketLedger is what a bucketed sale's Redis records say.
type bucketLedger struct {
	names        []string
	stock, moved int64   // the home's: the pool is stock − moved
	takes, gives int64   // units in take records (home) and give records (buckets) whose second half has not run
	finished     int     // records whose second half ran, left for their removal
	laneStock    []int64 // what each bucket was handed
	laneSold     []int64
	held         map[string]int64 // user → units held, over every bucket
	acceptedIDs  map[string]int   // order id → its bucket, of every accepted outbox entry
	outUnits     int64            // units of the accepted outbox entries
	records      map[string]scripts.Record
}

func (l bucketLedger) sold() (n int64) {
	for _, s := range l.laneSold {
		n += s
	}
	return n
}

func (l bucketLedger) inLanes() (n int64) {
	for _, s := range l.laneStock {
		n += s
	}
	return n
}

// checkBuckets checks a quiet bucketed sale's records against each other
// and against the admin view: the home sells nothing; units are conserved
// (moved = take records + bucket stocks + give records, the pool ≥ 0); in
// each bucket sold ≤ stock, sold = the units of live orders, the users hash
// holds exactly each buyer's live units and only buyers hashed to that
// bucket, no buyer is in two buckets; every outbox entry names the sale
// (not the bucket) and an order id ending in ".<bucket>", one accepted
// entry per order; the view's stock, sold, remaining, buyers and buckets are
// the sums.
func checkBuckets(t testing.TB, g *testGateway, sale string) bucketLedger {
	t.Helper()
	ctx := context.Background()
	l := bucketLedger{names: laneNames(t, g, sale), held: map[string]int64{}, acceptedIDs: map[string]int{},
		records: map[string]scripts.Record{}}
	home, err := g.rdb.HGetAll(ctx, g.keys.Meta(sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	l.stock, l.moved = int64(atoi(home["stock"])), int64(atoi(home["moved"]))
	if home["buckets"] != strconv.Itoa(len(l.names)) || len(l.names) < 2 {
		t.Errorf("%s: home says buckets %q, names %v", sale, home["buckets"], l.names)
	}
	for _, k := range []string{g.keys.Users(sale), g.keys.Orders(sale)} {
		if n := g.rdb.HLen(ctx, k).Val(); n != 0 {
			t.Errorf("%s: the home's %s has %d entries: the home sold", sale, k, n)
		}
	}
	if n := g.rdb.XLen(ctx, g.keys.Outbox(sale)).Val(); n != 0 {
		t.Errorf("%s: the home's outbox has %d entries", sale, n)
	}
	takes, err := g.rdb.HGetAll(ctx, g.keys.Moves(sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for id, rec := range takes {
		f := strings.Split(rec, ":")
		if len(f) != 4 || f[0] != "take" || atoi(f[1]) >= len(l.names) {
			t.Errorf("%s: take record %s = %q", sale, id, rec)
			continue
		}
		// A record whose credit ran names units already in the bucket.
		if g.rdb.Exists(ctx, g.keys.Op(l.names[atoi(f[1])], id)).Val() == 1 {
			l.finished++
			continue
		}
		l.takes += int64(atoi(f[2]))
	}
	if ok, _ := g.rdb.SIsMember(ctx, g.keys.Bucketed(), sale).Result(); !ok {
		t.Errorf("%s is not in the bucketed set: no settling pass finds its moves", sale)
	}
	l.laneStock = make([]int64, len(l.names))
	l.laneSold = make([]int64, len(l.names))
	for i, lane := range l.names {
		if s, b, ok := laneSale(lane); !ok || s != sale || b != i {
			t.Errorf("%s: bucket %d is named %q", sale, i, lane)
		}
		if ok, _ := g.rdb.SIsMember(ctx, g.keys.Sales(), lane).Result(); !ok {
			t.Errorf("%s: bucket %s is not in the sale registry: no relay reads its outbox", sale, lane)
		}
		meta, err := g.rdb.HGetAll(ctx, g.keys.Meta(lane)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(meta) == 0 {
			t.Errorf("%s: bucket %s has no meta", sale, lane)
			continue
		}
		l.laneStock[i], l.laneSold[i] = int64(atoi(meta["stock"])), int64(atoi(meta["sold"]))
		if l.laneSold[i] > l.laneStock[i] {
			t.Errorf("%s: bucket %d sold %d of a stock of %d", sale, i, l.laneSold[i], l.laneStock[i])
		}
		orders, err := g.rdb.HGetAll(ctx, g.keys.Orders(lane)).Result()
		if err != nil {
			t.Fatal(err)
		}
		live := map[string]int64{}
		var liveUnits int64
		for id, v := range orders {
			r, err := scripts.ParseRecord(v)
			if err != nil {
				t.Errorf("%s: order %s: %v", lane, id, err)
				continue
			}
			l.records[id] = r
			if order.Live(r.State) {
				live[r.UserID] += r.Quantity
				liveUnits += r.Quantity
			}
		}
		if liveUnits != l.laneSold[i] {
			t.Errorf("%s: live orders hold %d units, sold is %d", lane, liveUnits, l.laneSold[i])
		}
		users, err := g.rdb.HGetAll(ctx, g.keys.Users(lane)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for u, h := range users {
			n := int64(atoi(h))
			if n != live[u] || n == 0 {
				t.Errorf("%s: user %s holds %s units, has %d in live orders", lane, u, h, live[u])
			}
			if b := bucketOfUser(l.names, u); b != i {
				t.Errorf("%s: user %s holds units in bucket %d, buys in %d", sale, u, i, b)
			}
			if _, dup := l.held[u]; dup {
				t.Errorf("%s: user %s holds units in two buckets", sale, u)
			}
			l.held[u] = n
		}
		suffix := "." + strconv.Itoa(i)
		var accepted int
		for _, o := range outboxOrders(t, g.rdb, g.keys.Outbox(lane)) {
			id := o.OrderID
			if o.SaleID != sale {
				t.Errorf("%s: outbox entry %s names sale %q, want %q", lane, o.Entry, o.SaleID, sale)
			}
			if !strings.HasSuffix(id, suffix) {
				t.Errorf("%s: order id %q does not end in %q", lane, id, suffix)
			}
			if order.Final(o.State) {
				continue
			}
			accepted++
			if _, dup := l.acceptedIDs[id]; dup {
				t.Errorf("%s: order %s accepted twice in the outboxes", sale, id)
			}
			l.acceptedIDs[id] = i
			l.outUnits += int64(o.Quantity)
			if r, ok := orders[id]; !ok {
				t.Errorf("%s: outbox order %s has no record", lane, id)
			} else if rec, _ := scripts.ParseRecord(r); rec.Quantity != int64(o.Quantity) || rec.UserID != o.UserID {
				t.Errorf("%s: outbox order %+v, record %+v", lane, o, rec)
			}
		}
		if accepted != len(orders) {
			t.Errorf("%s: %d orders, %d accepted outbox entries", lane, len(orders), accepted)
		}
		gives, err := g.rdb.HGetAll(ctx, g.keys.Moves(lane)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for id, rec := range gives {
			f := strings.Split(rec, ":")
			if len(f) != 3 || f[0] != "give" {
				t.Errorf("%s: give record %s = %q", lane, id, rec)
				continue
			}
			if g.rdb.Exists(ctx, g.keys.Op(sale, id)).Val() == 1 {
				l.finished++
				continue
			}
			l.gives += int64(atoi(f[1]))
		}
	}
	if l.moved != l.takes+l.inLanes()+l.gives {
		t.Errorf("%s: units not conserved: moved %d, but take records %d + bucket stocks %d (%v) + give records %d",
			sale, l.moved, l.takes, l.inLanes(), l.laneStock, l.gives)
	}
	if l.stock < l.moved {
		t.Errorf("%s: moved %d past the stock %d", sale, l.moved, l.stock)
	}
	v := g.view(sale)
	if v.num("stock") != l.stock || v.num("sold") != l.sold() || v.num("remaining") != l.stock-l.sold() ||
		v.num("buyers") != int64(len(l.held)) || v.num("buckets") != int64(len(l.names)) {
		t.Errorf("%s: view %s; Redis: stock %d, sold %d, %d buyers, %d buckets", sale, v.raw, l.stock, l.sold(),
			len(l.held), len(l.names))
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
	names := laneNames(t, g, sale)
	if len(names) != 3 {
		t.Fatalf("names %v, want 3 buckets", names)
	}
	o := newOutcomes()
	burst(2*users, 64, func(i int) {
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
	for u, n := range l.held {
		held += n
		if n > 1 {
			t.Errorf("user %s holds %d units, limit 1", u, n)
		}
	}
	if held != stock || l.outUnits != stock || len(l.acceptedIDs) != stock {
		t.Errorf("users hold %d units, outboxes %d units in %d orders; want %d", held, l.outUnits, len(l.acceptedIDs), stock)
	}
	for id, user := range o.orders {
		b, ok := l.acceptedIDs[id]
		if !ok {
			t.Errorf("order %s answered 202 to %s is in no outbox", id, user)
		} else if want := bucketOfUser(names, user); b != want {
			t.Errorf("order %s of %s is in bucket %d, the user's is %d", id, user, b, want)
		}
	}
	for i, n := range l.laneSold {
		t.Logf("bucket %s: sold %d of %d handed", names[i], n, l.laneStock[i])
	}
}

// The Store under testBucketOversell's burst, without HTTP, so that a
// refusal that is not the sale's shows its error: every reservation of a
// healthy Redis is accepted, sold out or over the limit, never unavailable
// ("bucket … short while the sale has N units": buckets.go reserveBucket
// giving up after refillRounds while the buckets take each other's unsold
// stock back and forth at the end of the sale).
func TestBucketReserveContention(t *testing.T) {
	g := startGateway(t)
	const sale, stock, users = "bcont", 1000, 5000
	g.mustSale(sale, `{"stock":1000,"per_user_limit":1,"buckets":3}`)
	st := g.srv.store
	var mu sync.Mutex
	answers := map[string]int{}
	var others []string
	var seq atomic.Int64
	burst(2*users, 64, func(i int) {
		user := "u" + itoa(i%users)
		var out [1]Result
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r := Reservation{OrderID: "c" + strconv.FormatInt(seq.Add(1), 10), UserID: user, Quantity: 1}
		err := st.Reserve(ctx, st.lane(sale, user), []Reservation{r}, out[:])
		if err == nil {
			err = out[0].Err
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			answers["accepted"]++
		case errors.Is(err, ErrSoldOut):
			answers["sold_out"]++
		case errors.Is(err, ErrLimitReached):
			answers["limit_reached"]++
		default:
			answers["other"]++
			others = append(others, err.Error())
		}
	})
	if len(others) > 0 {
		t.Errorf("bucket bug (buckets.go reserveBucket): %d reservations of a healthy Redis failed (%v), first: %v",
			len(others), answers, others[:min(3, len(others))])
	}
	if answers["accepted"] != stock {
		t.Errorf("accepted %d, stock %d (%v)", answers["accepted"], stock, answers)
	}
	if l := checkBuckets(t, g, sale); l.sold() != stock {
		t.Errorf("sold %d, stock %d", l.sold(), stock)
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
	names := laneNames(t, g, sale)
	perBucket := make([]int, len(names))
	for u := range buyers {
		perBucket[bucketOfUser(names, "f"+itoa(u))]++
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
	if l.sold() != stock {
		t.Errorf("sold %d, want %d (bucket stocks %v, sold %v, pool %d)", l.sold(), stock, l.laneStock, l.laneSold, l.stock-l.moved)
	}
	for u, n := range l.held {
		if n > limit {
			t.Errorf("user %s holds %d, limit %d", u, n, limit)
		}
	}
}

// The last units of a sale, spread over two buckets, sell as one sale's:
// with one unit in each bucket, a buy of two by a buyer of either bucket is
// accepted (the other bucket's unit is taken back through the pool); with
// one unit left wherever it is, a buy of two is insufficient_stock and
// changes nothing, and the unit still sells.
func TestBucketLastUnits(t *testing.T) {
	g := startGateway(t)
	ctx := context.Background()
	// setup creates a 2-bucket sale of stock units and hands bucket i
	// hand[i] units, checking the layout.
	setup := func(t *testing.T, sale string, stock int64, hand []int64) (*bucketSet, []string) {
		t.Helper()
		g.mustSale(sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":10,"buckets":2}`, stock))
		bs, err := g.srv.store.bucketsOf(ctx, sale)
		if err != nil || bs == nil {
			t.Fatalf("buckets of %s: %v %v", sale, bs, err)
		}
		for b, n := range hand {
			if n == 0 {
				continue
			}
			if got, err := g.srv.store.take(ctx, bs, b, n); err != nil || got != n {
				t.Fatalf("take %d into bucket %d: %d, %v", n, b, got, err)
			}
		}
		l := checkBuckets(t, g, sale)
		var handed int64
		for b, n := range hand {
			handed += n
			if l.laneStock[b] != n {
				t.Fatalf("layout: bucket stocks %v, want %v", l.laneStock, hand)
			}
		}
		if l.moved != handed || l.takes != 0 || l.gives != 0 {
			t.Fatalf("layout: moved %d, records %d+%d, want moved %d", l.moved, l.takes, l.gives, handed)
		}
		return bs, bs.names
	}
	for b := range 2 {
		t.Run(fmt.Sprintf("two of two, buyer of bucket %d", b), func(t *testing.T) {
			sale := "blast" + itoa(b)
			_, names := setup(t, sale, 2, []int64{1, 1})
			user := userOfBucket(t, names, b, "w")
			r := g.buy(sale, user, 2, "")
			if r.code != 202 || r.num("quantity") != 2 || !strings.HasSuffix(r.str("order_id"), "."+itoa(b)) {
				t.Fatalf("buy of 2 with 1 unit in each bucket: %d %s", r.code, r.raw)
			}
			l := checkBuckets(t, g, sale)
			if l.sold() != 2 || l.laneSold[b] != 2 || l.held[user] != 2 {
				t.Errorf("sold %v, %s holds %d; want 2 in bucket %d", l.laneSold, user, l.held[user], b)
			}
			if r := g.buy(sale, userOfBucket(t, names, 1-b, "x"), 1, ""); r.code != 410 || r.status() != "sold_out" {
				t.Errorf("buy after the last units: %d %s", r.code, r.raw)
			}
		})
	}
	cases := []struct {
		name string
		hand []int64 // units handed to buckets 0 and 1; the rest of the one unit is in the pool
	}{
		{"in the pool", []int64{0, 0}},
		{"in the buyer's bucket", []int64{1, 0}},
		{"in the other bucket", []int64{0, 1}},
	}
	for i, c := range cases {
		t.Run("one left "+c.name, func(t *testing.T) {
			sale := "bone" + itoa(i)
			_, names := setup(t, sale, 1, c.hand)
			user := userOfBucket(t, names, 0, "y")
			r := g.buy(sale, user, 2, "")
			if r.code != 409 || r.status() != "insufficient_stock" {
				t.Fatalf("buy of 2 with 1 left: %d %s", r.code, r.raw)
			}
			l := checkBuckets(t, g, sale)
			if l.sold() != 0 || len(l.records) != 0 || len(l.held) != 0 || l.stock != 1 {
				t.Errorf("the refused buy changed the sale: sold %v, %d orders, holders %v, stock %d",
					l.laneSold, len(l.records), l.held, l.stock)
			}
			if v := g.view(sale); v.num("remaining") != 1 || v.str("state") != "active" {
				t.Errorf("view after the refusal: %s", v.raw)
			}
			if r := g.buy(sale, user, 1, ""); r.code != 202 {
				t.Errorf("buy of the last unit: %d %s", r.code, r.raw)
			}
			if l := checkBuckets(t, g, sale); l.sold() != 1 {
				t.Errorf("sold %v, want 1", l.laneSold)
			}
		})
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
	waitFor(t, "some accepts before the lock", func() bool { return accepted.Load() > 300 })
	if r := g.adminPost(sale, "lock", ""); r.code != 200 || r.body["locked"] != true {
		t.Fatalf("lock: %d %s", r.code, r.raw)
	}
	lockedAt.Store(true)
	for i, lane := range laneNames(t, g, sale) {
		if v := g.rdb.HGet(context.Background(), g.keys.Meta(lane), "locked").Val(); v != "1" {
			t.Errorf("bucket %d not locked when the lock returned: %q", i, v)
		}
	}
	soldAtLock := g.view(sale).num("sold")
	waitFor(t, "buys against the lock", func() bool {
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
	waitFor(t, "accepts after unlock", func() bool { return accepted.Load() > before+300 })
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
	if l.sold() != accepted.Load() {
		t.Errorf("sold %d, %d accepted", l.sold(), accepted.Load())
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
		burst(3*stock, 64, func(i int) {
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
	if l.sold() != stock+more || l.stock != stock+more {
		t.Errorf("sold %d of %d, want all %d", l.sold(), l.stock, stock+more)
	}
}

// The script cache lost on every primary (the one Redis) again and again
// during a burst on a bucketed sale, the move script's two halves among
// the calls that meet NOSCRIPT: no oversell, no 5xx but 503, and the
// records add up; the sale then sells out exactly.
func TestBucketScriptFlushDuringBurst(t *testing.T) {
	g := startGateway(t)
	const sale, stock = "bflush", 300
	g.mustSale(sale, `{"stock":300,"per_user_limit":1,"buckets":3}`)
	before := g.loader.Stats().NoScript
	stopFlushing := flushScriptsMeanwhile(t, g)
	o := newOutcomes()
	burst(4*stock, 64, func(i int) {
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
	drained := 0
	waitFor(t, "the rest of the sale to sell", func() bool {
		r := g.buy(sale, "d"+itoa(drained), 1, "")
		drained++
		o.add(t, r, "d"+itoa(drained-1))
		return r.code == 410
	})
	l := checkBuckets(t, g, sale)
	_, units := o.accepted()
	if l.sold() != stock || units > stock || unavailable == 0 && units != stock {
		t.Errorf("sold %d, accepted %d (%d answers 503), stock %d", l.sold(), units, unavailable, stock)
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
	names := laneNames(t, g, sale)
	ctx := context.Background()
	for _, lane := range names {
		if ok, _ := g.rdb.SIsMember(ctx, g.keys.Paying(), lane).Result(); !ok {
			t.Errorf("bucket %s is not in the paying set: no sweeper expires its orders", lane)
		}
	}
	// One buyer in each bucket, and one more in bucket 0.
	users := []string{userOfBucket(t, names, 0, "p"), userOfBucket(t, names, 1, "p"), userOfBucket(t, names, 2, "p"),
		userOfBucket(t, names, 0, "q")}
	ids := make([]string, len(users))
	for i, u := range users {
		r := g.buy(sale, u, 1, "")
		if r.code != 202 || r.str("state") != order.StatePendingPayment || payBy(t, r) == 0 {
			t.Fatalf("buy by %s: %d %s", u, r.code, r.raw)
		}
		ids[i] = r.str("order_id")
		if b := bucketOfUser(names, u); !strings.HasSuffix(ids[i], "."+itoa(b)) {
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
		u := userOfBucket(t, names, b, "e")
		r := g.buy(sale, u, 1, "")
		if r.code != 202 || r.str("state") != order.StatePendingPayment {
			t.Fatalf("buy by %s: %d %s", u, r.code, r.raw)
		}
		short = append(short, r.str("order_id"))
	}
	// ids[0], ids[3] (600 s) and the re-buy are pending; the three short
	// ones expire.
	waitFor(t, "the short orders to expire", func() bool {
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
	for _, r := range l.records {
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
	if l := checkBuckets(t, g, sale); l.sold() != 1 || len(l.acceptedIDs) != 1 {
		t.Errorf("after the replays: sold %d in %d orders, want 1", l.sold(), len(l.acceptedIDs))
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
	for _, key := range append([]string{sale}, laneNames(t, g, sale)...) {
		if lim := g.rdb.HGet(ctx, g.keys.Meta(key), "limit").Val(); lim != "8" {
			t.Errorf("%s has limit %q after the PUTs, want 8", key, lim)
		}
	}
	v := g.view(sale)
	if v.code != 200 || v.num("buckets") != 3 || v.num("stock") != 50 || v.num("per_user_limit") != 8 {
		t.Errorf("view: %s", v.raw)
	}
	// The new limit holds for a buyer, in their bucket.
	u := userOfBucket(t, laneNames(t, g, sale), 2, "lim")
	if r := g.buy(sale, u, 8, ""); r.code != 202 {
		t.Errorf("buy of 8 at limit 8: %d %s", r.code, r.raw)
	}
	if r := g.buy(sale, u, 1, ""); r.code != 409 || r.status() != "limit_reached" {
		t.Errorf("buy past limit 8: %d %s", r.code, r.raw)
	}
	checkBuckets(t, g, sale)
}

// The settling pass finishes what a process that died between the two
// halves of a move left: a take whose credit never ran, or ran without the
// record's removal; a give whose accept never ran, or ran without it. Each
// is finished exactly once however many passes run, one after another or at
// once, and the units are conserved throughout; the sale then sells
// exactly its stock.
func TestBucketSettleMoves(t *testing.T) {
	g := startGateway(t)
	ctx := context.Background()
	const sale, stock = "bsettle", 960
	g.mustSale(sale, `{"stock":960,"per_user_limit":1000,"buckets":3}`)
	// Stores of their own, with no age to wait for: the gateway's sweeper
	// reads its Store's settleAge as it runs.
	settlers := make([]*Store, 4)
	for i := range settlers {
		settlers[i] = NewStore(g.rdb, g.loader, g.keys)
		settlers[i].settleAge = 0
	}
	st := settlers[0]
	bs, err := st.bucketsOf(ctx, sale)
	if err != nil || bs == nil {
		t.Fatalf("buckets: %v %v", bs, err)
	}
	home := []string{g.keys.Meta(sale), g.keys.Moves(sale)}
	laneKeys := func(b int) []string { return []string{g.keys.Meta(bs.names[b]), g.keys.Moves(bs.names[b])} }
	// halfTake runs the take half only; chunk is 960/(8·3) = 40 at least.
	halfTake := func(b int) (string, int64) {
		t.Helper()
		id, err := moveID()
		if err != nil {
			t.Fatal(err)
		}
		n, err := st.move(ctx, home, "take", id, int64(1), b)
		if err != nil || n != 40 {
			t.Fatalf("take into bucket %d: %d, %v", b, n, err)
		}
		return id, n
	}
	halfGive := func(b int) (string, int64) {
		t.Helper()
		id, err := moveID()
		if err != nil {
			t.Fatal(err)
		}
		n, err := st.move(ctx, laneKeys(b), "give", id, int64(0))
		if err != nil || n == 0 {
			t.Fatalf("give from bucket %d: %d, %v", b, n, err)
		}
		return id, n
	}
	settle := func(passes int) {
		t.Helper()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range passes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := settlers[i%len(settlers)].settleMoves(ctx); err != nil {
					t.Errorf("settleMoves: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	// layout checks the units in open take and give records, the records
	// whose second half ran, and the bucket stocks.
	layout := func(when string, takes, gives int64, finished int, lanes []int64) {
		t.Helper()
		l := checkBuckets(t, g, sale)
		if l.takes != takes || l.gives != gives || l.finished != finished || fmt.Sprint(l.laneStock) != fmt.Sprint(lanes) {
			t.Fatalf("%s: take records %d, give records %d, finished records %d, bucket stocks %v; want %d, %d, %d, %v",
				when, l.takes, l.gives, l.finished, l.laneStock, takes, gives, finished, lanes)
		}
	}

	halfTake(1)
	layout("a take without its credit", 40, 0, 0, []int64{0, 0, 0})
	settle(1)
	layout("settled once", 0, 0, 0, []int64{0, 40, 0})
	settle(1)
	layout("settled twice", 0, 0, 0, []int64{0, 40, 0})

	// A take into every bucket, then four passes at once.
	for b := range 3 {
		halfTake(b)
	}
	layout("three takes without credit", 120, 0, 0, []int64{0, 40, 0})
	settle(4)
	layout("settled by four passes at once", 0, 0, 0, []int64{40, 80, 40})

	// A take whose credit ran, whose record was not removed.
	id, n := halfTake(2)
	if _, err := st.move(ctx, []string{g.keys.Meta(bs.names[2]), g.keys.Op(bs.names[2], id)}, "credit", id, n); err != nil {
		t.Fatal(err)
	}
	layout("a credited take with its record", 0, 0, 1, []int64{40, 80, 80})
	settle(3)
	layout("its record settled", 0, 0, 0, []int64{40, 80, 80})

	// A give without its accept: bucket 1 gives back its 80.
	if _, n := halfGive(1); n != 80 {
		t.Fatalf("give of bucket 1: %d, want 80", n)
	}
	layout("a give without its accept", 0, 80, 0, []int64{40, 0, 80})
	settle(1)
	layout("the give settled", 0, 0, 0, []int64{40, 0, 80})
	settle(2)
	layout("the give settled again", 0, 0, 0, []int64{40, 0, 80})

	// Gives from two buckets, settled by four passes at once; and one whose
	// accept ran, whose record was not removed.
	halfGive(0)
	id, n = halfGive(2)
	if _, err := st.move(ctx, []string{g.keys.Meta(sale), g.keys.Op(sale, id)}, "accept", id, n); err != nil {
		t.Fatal(err)
	}
	layout("two gives, one accepted", 0, 40, 1, []int64{0, 0, 0})
	settle(4)
	layout("the gives settled", 0, 0, 0, []int64{0, 0, 0})
	if l := checkBuckets(t, g, sale); l.moved != 0 {
		t.Fatalf("moved %d with every unit back in the pool", l.moved)
	}

	// Half-done moves of both kinds left in place while the sale sells out:
	// the gateway's refills go round them, the passes finish them, and the
	// sale sells exactly its stock.
	halfTake(0)
	if r := g.buy(sale, userOfBucket(t, bs.names, 1, "z"), 10, ""); r.code != 202 {
		t.Fatalf("buy: %d %s", r.code, r.raw)
	}
	halfGive(1)
	settle(2)
	var sold int64
	for i := 0; ; i++ {
		if i > stock {
			t.Fatalf("no sold_out after %d buys", i)
		}
		r := g.buy(sale, "z"+itoa(i), 50, "")
		if r.code == 202 {
			sold += 50
			continue
		}
		if r.code == 409 && r.status() == "insufficient_stock" {
			// Less than 50 left: buy them one by one.
			if r := g.buy(sale, "z"+itoa(i), 1, ""); r.code == 202 {
				sold++
				continue
			}
		}
		if r.code != 410 {
			t.Fatalf("buy %d: %d %s", i, r.code, r.raw)
		}
		break
	}
	settle(2)
	l := checkBuckets(t, g, sale)
	if l.sold() != stock || sold+10 != stock || l.takes != 0 || l.gives != 0 || l.finished != 0 {
		t.Errorf("sold %d (%d answered), records %d+%d+%d; want %d", l.sold(), sold+10, l.takes, l.gives, l.finished, stock)
	}
}

// On a cluster, a sale's buckets are on distinct primaries where there are
// enough, and evenly over them where there are not; the gateway's slot of a
// tag is the cluster's.
func TestBucketClusterPlacement(t *testing.T) {
	if !localstack.Cluster() {
		t.Skip("cluster only: set FLASHGATE_REDIS_ADDRS to the nodes of `make up-cluster`")
	}
	g := startGateway(t)
	ctx := context.Background()
	var count atomic.Int64
	if err := g.rdb.(*redis.ClusterClient).ForEachMaster(ctx, func(context.Context, *redis.Client) error {
		count.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	primaries := int(count.Load())
	for _, k := range []int{3, 16} {
		for s := range 4 {
			sale := fmt.Sprintf("bplace%d-%d", k, s)
			g.mustSale(sale, fmt.Sprintf(`{"stock":100,"buckets":%d}`, k))
			names := laneNames(t, g, sale)
			if len(names) != k {
				t.Fatalf("%s: names %v", sale, names)
			}
			per := map[string]int{}
			for _, lane := range names {
				per[primaryOf(t, g, g.keys.Meta(lane))]++
			}
			lo, hi := k, 0
			for _, n := range per {
				lo, hi = min(lo, n), max(hi, n)
			}
			if len(per) != min(k, primaries) || hi-lo > 1 {
				t.Errorf("%s: %d buckets on %d primaries of %d: %v (%v)", sale, k, len(per), primaries, per, names)
			}
			if r := g.buy(sale, "u", 1, ""); r.code != 202 {
				t.Errorf("%s: buy: %d %s", sale, r.code, r.raw)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcxyz0123456789#.-_:ABC"
	var tags []string
	for i := range 100 {
		tags = append(tags, fmt.Sprintf("sale%d#%d.%d", i, i%16, i*7%1000))
	}
	for range 300 {
		b := make([]byte, 1+rng.IntN(24))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		tags = append(tags, string(b))
	}
	tags = append(tags, "", "#", ".", "0", "#0.0", "123456789")
	for _, tag := range tags {
		want, err := g.rdb.ClusterKeySlot(ctx, tag).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := hashSlot(tag); int64(got) != want {
			t.Errorf("hashSlot(%q) = %d, CLUSTER KEYSLOT %d", tag, got, want)
		}
		if tag == "" {
			continue
		}
		// And as the tag of a key: the slot every key of the sale is in.
		if want, err := g.rdb.ClusterKeySlot(ctx, g.keys.Meta(tag)).Result(); err != nil || int64(hashSlot(tag)) != want {
			t.Errorf("hashSlot(%q) = %d, CLUSTER KEYSLOT of %s %d (%v)", tag, hashSlot(tag), g.keys.Meta(tag), want, err)
		}
	}
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
	for _, id := range append(laneNames(t, g, sale), sale) {
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
