package sale

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
	"github.com/flashgate/flashgate/sale/saletest"
)

// The tests of a sale of several buckets that reach into the store: the
// moves' halves, the settling pass, the placement on a cluster's
// primaries. They run on one Redis and on the cluster of `make
// up-cluster`. Package gateway tests the same sales through HTTP.

// The last units of a sale, spread over two buckets, sell as one sale's:
// with one unit in each bucket, a buy of two by a buyer of either bucket is
// accepted (the other bucket's unit is taken back through the pool); with
// one unit left wherever it is, a buy of two is insufficient_stock and
// changes nothing, and the unit still sells.
func TestBucketLastUnits(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	// setup creates a 2-bucket sale of stock units and hands bucket i
	// hand[i] units, checking the layout.
	setup := func(t *testing.T, sale string, stock int64, hand []int64) (*bucketSet, []string) {
		t.Helper()
		e.mustSale(sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":10,"buckets":2}`, stock))
		bs, err := e.store.bucketsOf(ctx, sale)
		if err != nil || bs == nil {
			t.Fatalf("buckets of %s: %v %v", sale, bs, err)
		}
		for b, n := range hand {
			if n == 0 {
				continue
			}
			if got, err := e.store.poolToBucket(ctx, bs, b, n); err != nil || got != n {
				t.Fatalf("take %d into bucket %d: %d, %v", n, b, got, err)
			}
		}
		l := e.checkBuckets(sale)
		var handed int64
		for b, n := range hand {
			handed += n
			if l.BucketStock[b] != n {
				t.Fatalf("layout: bucket stocks %v, want %v", l.BucketStock, hand)
			}
		}
		if l.Moved != handed || l.Takes != 0 || l.Gives != 0 {
			t.Fatalf("layout: moved %d, records %d+%d, want moved %d", l.Moved, l.Takes, l.Gives, handed)
		}
		return bs, bs.names
	}
	for b := range 2 {
		t.Run(fmt.Sprintf("two of two, buyer of bucket %d", b), func(t *testing.T) {
			sale := "blast" + itoa(b)
			_, names := setup(t, sale, 2, []int64{1, 1})
			user := saletest.UserOfBucket(t, names, b, "w")
			r, err := e.buy(sale, user, 2, "")
			if err != nil || !strings.HasSuffix(r.OrderID, "."+itoa(b)) {
				t.Fatalf("buy of 2 with 1 unit in each bucket: %+v %v", r, err)
			}
			if rec, err := e.store.Order(ctx, sale, r.OrderID); err != nil || rec.Quantity != 2 {
				t.Fatalf("the order of 2: %+v %v", rec, err)
			}
			l := e.checkBuckets(sale)
			if l.Sold() != 2 || l.BucketSold[b] != 2 || l.Held[user] != 2 {
				t.Errorf("sold %v, %s holds %d; want 2 in bucket %d", l.BucketSold, user, l.Held[user], b)
			}
			if r, err := e.buy(sale, saletest.UserOfBucket(t, names, 1-b, "x"), 1, ""); !errors.Is(err, ErrSoldOut) {
				t.Errorf("buy after the last units: %+v %v, want sold out", r, err)
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
			user := saletest.UserOfBucket(t, names, 0, "y")
			if r, err := e.buy(sale, user, 2, ""); !errors.Is(err, ErrInsufficientStock) {
				t.Fatalf("buy of 2 with 1 left: %+v %v, want insufficient stock", r, err)
			}
			l := e.checkBuckets(sale)
			if l.Sold() != 0 || len(l.Records) != 0 || len(l.Held) != 0 || l.Stock != 1 {
				t.Errorf("the refused buy changed the sale: sold %v, %d orders, holders %v, stock %d",
					l.BucketSold, len(l.Records), l.Held, l.Stock)
			}
			if v := e.view(sale); v.Remaining() != 1 || v.State() != "active" {
				t.Errorf("view after the refusal: %+v (%s)", v, v.State())
			}
			if r, err := e.buy(sale, user, 1, ""); err != nil {
				t.Errorf("buy of the last unit: %+v %v", r, err)
			}
			if l := e.checkBuckets(sale); l.Sold() != 1 {
				t.Errorf("sold %v, want 1", l.BucketSold)
			}
		})
	}
}

// The settling pass finishes what a process that died between the two
// halves of a move left: a take whose credit never ran, or ran without the
// record's removal; a give whose accept never ran, or ran without it. Each
// is finished exactly once however many passes run, one after another or at
// once, and the units are conserved throughout; the sale then sells
// exactly its stock.
func TestBucketSettleMoves(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	const sale, stock = "bsettle", 960
	e.mustSale(sale, `{"stock":960,"per_user_limit":1000,"buckets":3}`)
	// Stores of their own, with no age to wait for.
	settlers := make([]*Store, 4)
	for i := range settlers {
		settlers[i] = e.newStore()
		settlers[i].settleAge = 0
	}
	st := settlers[0]
	bs, err := st.bucketsOf(ctx, sale)
	if err != nil || bs == nil {
		t.Fatalf("buckets: %v %v", bs, err)
	}
	home := []string{e.keys.Meta(sale), e.keys.Moves(sale)}
	laneKeys := func(b int) []string { return []string{e.keys.Meta(bs.names[b]), e.keys.Moves(bs.names[b])} }
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
		l := e.checkBuckets(sale)
		if l.Takes != takes || l.Gives != gives || l.Finished != finished || fmt.Sprint(l.BucketStock) != fmt.Sprint(lanes) {
			t.Fatalf("%s: take records %d, give records %d, finished records %d, bucket stocks %v; want %d, %d, %d, %v",
				when, l.Takes, l.Gives, l.Finished, l.BucketStock, takes, gives, finished, lanes)
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
	if _, err := st.move(ctx, []string{e.keys.Meta(bs.names[2]), e.keys.Op(bs.names[2], id)}, "credit", id, n); err != nil {
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
	if _, err := st.move(ctx, []string{e.keys.Meta(sale), e.keys.Op(sale, id)}, "accept", id, n); err != nil {
		t.Fatal(err)
	}
	layout("two gives, one accepted", 0, 40, 1, []int64{0, 0, 0})
	settle(4)
	layout("the gives settled", 0, 0, 0, []int64{0, 0, 0})
	if l := e.checkBuckets(sale); l.Moved != 0 {
		t.Fatalf("moved %d with every unit back in the pool", l.Moved)
	}

	// Half-done moves of both kinds left in place while the sale sells out:
	// the store's refills go round them, the passes finish them, and the
	// sale sells exactly its stock.
	halfTake(0)
	if r, err := e.buy(sale, saletest.UserOfBucket(t, bs.names, 1, "z"), 10, ""); err != nil {
		t.Fatalf("buy: %+v %v", r, err)
	}
	halfGive(1)
	settle(2)
	var sold int64
	for i := 0; ; i++ {
		if i > stock {
			t.Fatalf("no sold_out after %d buys", i)
		}
		_, err := e.buy(sale, "z"+itoa(i), 50, "")
		if err == nil {
			sold += 50
			continue
		}
		if errors.Is(err, ErrInsufficientStock) {
			// Less than 50 left: buy them one by one.
			if _, err := e.buy(sale, "z"+itoa(i), 1, ""); err == nil {
				sold++
				continue
			}
		}
		if !errors.Is(err, ErrSoldOut) {
			t.Fatalf("buy %d: %v", i, err)
		}
		break
	}
	settle(2)
	l := e.checkBuckets(sale)
	if l.Sold() != stock || sold+10 != stock || l.Takes != 0 || l.Gives != 0 || l.Finished != 0 {
		t.Errorf("sold %d (%d answered), records %d+%d+%d; want %d", l.Sold(), sold+10, l.Takes, l.Gives, l.Finished, stock)
	}
}

// On a cluster, a sale's buckets are on distinct primaries where there are
// enough, and evenly over them where there are not; the store's slot of a tag
// is the cluster's.
func TestBucketClusterPlacement(t *testing.T) {
	if !localstack.Cluster() {
		t.Skip("cluster only: set FLASHGATE_REDIS_ADDRS to the nodes of `make up-cluster`")
	}
	e := newEnv(t, Options{})
	ctx := context.Background()
	var count atomic.Int64
	if err := e.rdb.(*redis.ClusterClient).ForEachMaster(ctx, func(context.Context, *redis.Client) error {
		count.Add(1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	primaries := int(count.Load())
	for _, k := range []int{3, 16} {
		for s := range 4 {
			sale := fmt.Sprintf("bplace%d-%d", k, s)
			e.mustSale(sale, fmt.Sprintf(`{"stock":100,"buckets":%d}`, k))
			names := saletest.BucketNames(t, e.rdb, e.keys, sale)
			if len(names) != k {
				t.Fatalf("%s: names %v", sale, names)
			}
			per := map[string]int{}
			for _, bucket := range names {
				per[saletest.PrimaryOf(t, e.rdb, e.keys.Meta(bucket))]++
			}
			lo, hi := k, 0
			for _, n := range per {
				lo, hi = min(lo, n), max(hi, n)
			}
			if len(per) != min(k, primaries) || hi-lo > 1 {
				t.Errorf("%s: %d buckets on %d primaries of %d: %v (%v)", sale, k, len(per), primaries, per, names)
			}
			if r, err := e.buy(sale, "u", 1, ""); err != nil {
				t.Errorf("%s: buy: %+v %v", sale, r, err)
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
		want, err := e.rdb.ClusterKeySlot(ctx, tag).Result()
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
		if want, err := e.rdb.ClusterKeySlot(ctx, e.keys.Meta(tag)).Result(); err != nil || int64(hashSlot(tag)) != want {
			t.Errorf("hashSlot(%q) = %d, CLUSTER KEYSLOT of %s %d (%v)", tag, hashSlot(tag), e.keys.Meta(tag), want, err)
		}
	}
}

// What a lowering that died left behind is no obstacle to the next: its
// fence, which lapses by itself or gives way to the next lowering's, and
// half-done moves (a take without its credit, a give without its accept),
// which the next lowering finishes, so that a stock of exactly the units
// sold is taken. Nothing is lost or counted twice: the units are conserved
// throughout, and once the fence is lifted the buckets take from the pool
// again.
func TestBucketLowerAfterCrash(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	const sale = "bcrash"
	e.mustSale(sale, `{"stock":1000,"per_user_limit":5,"buckets":3}`)
	st := e.store
	bs, err := st.bucketsOf(ctx, sale)
	if err != nil || bs == nil {
		t.Fatalf("buckets: %v %v", bs, err)
	}
	for i := range 5 {
		if r, err := e.buy(sale, "k"+itoa(i), 5, ""); err != nil {
			t.Fatalf("buy: %+v %v", r, err)
		}
	}
	home := []string{e.keys.Meta(sale), e.keys.Moves(sale)}
	take := func(b int) int64 {
		t.Helper()
		id, err := moveID()
		if err != nil {
			t.Fatal(err)
		}
		n, err := st.move(ctx, home, "take", id, int64(1), b)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	fence := func(id string, ms int64) {
		t.Helper()
		if _, err := st.move(ctx, home, "fence", id, ms); err != nil {
			t.Fatal(err)
		}
	}

	// A fence stops takes until its own id lifts it, or it lapses.
	fence("f1", 60_000)
	if n := take(0); n != 0 {
		t.Errorf("a take through a fence moved %d units", n)
	}
	if _, err := st.move(ctx, home, "unfence", "other"); err != nil {
		t.Fatal(err)
	}
	if n := take(0); n != 0 {
		t.Errorf("another id lifted the fence: a take moved %d units", n)
	}
	if _, err := st.move(ctx, home, "unfence", "f1"); err != nil {
		t.Fatal(err)
	}
	if n := take(0); n == 0 {
		t.Errorf("no take after the unfence")
	}
	fence("f2", 50)
	if n := take(0); n != 0 {
		t.Errorf("a take through a fence moved %d units", n)
	}
	localstack.WaitFor(t, 20*time.Second, "the fence to lapse", func() bool { return take(0) > 0 })
	settle := e.newStore()
	settle.settleAge = 0
	if err := settle.settleMoves(ctx); err != nil {
		t.Fatal(err)
	}

	// A lowering died after the first halves of a take and of a give, and
	// with its fence up.
	id, err := moveID()
	if err != nil {
		t.Fatal(err)
	}
	halfTake, err := st.move(ctx, home, "take", id, int64(1), 1)
	if err != nil || halfTake == 0 {
		t.Fatalf("half take: %d %v", halfTake, err)
	}
	gid, err := moveID()
	if err != nil {
		t.Fatal(err)
	}
	bucket := []string{e.keys.Meta(bs.names[0]), e.keys.Moves(bs.names[0])}
	if n, err := st.move(ctx, bucket, "give", gid, int64(0)); err != nil || n == 0 {
		t.Fatalf("half give of bucket 0: %d %v", n, err)
	}
	fence("dead", 60_000)
	l := e.checkBuckets(sale)
	if l.Takes != halfTake || l.Gives == 0 || l.Moved <= 25 || l.Sold() != 25 {
		t.Fatalf("layout: moved %d, take records %d, give records %d, sold %d", l.Moved, l.Takes, l.Gives, l.Sold())
	}

	if v, _, err := e.store.Upsert(ctx, sale, Update{Stock: ptr(25)}); err != nil || v.Stock != 25 || v.Remaining() != 0 {
		t.Fatalf("stock 25 = sold, after a dead lowering: %+v %v", v, err)
	}
	l = e.checkBuckets(sale)
	if l.Stock != 25 || l.Moved != 25 || l.Takes != 0 || l.Gives != 0 || l.Sold() != 25 {
		t.Errorf("after the lowering: stock %d, moved %d, records %d+%d, sold %d; want 25, 25, none, 25",
			l.Stock, l.Moved, l.Takes, l.Gives, l.Sold())
	}
	if f := e.rdb.HGet(ctx, e.keys.Meta(sale), "fence").Val(); f != "" {
		t.Errorf("the lowering left the fence %q", f)
	}
	if v, err := e.store.Restock(ctx, sale, 10); err != nil || v.Remaining() != 10 {
		t.Fatalf("restock: %+v %v", v, err)
	}
	var units int64
	for i := 0; units < 10; i++ {
		if i > 10 {
			t.Fatalf("the restocked units do not sell: %d sold", units)
		}
		if r, err := e.buy(sale, "late"+itoa(i), 5, ""); err == nil {
			units += 5
		} else {
			t.Errorf("buy of 5 after the restock: %+v %v", r, err)
		}
	}
	if r, err := e.buy(sale, "later", 1, ""); !errors.Is(err, ErrSoldOut) {
		t.Errorf("buy past the stock: %+v %v, want sold out", r, err)
	}
	if l := e.checkBuckets(sale); l.Sold() != 35 || l.Stock != 35 {
		t.Errorf("sold %d of %d, want 35 of 35", l.Sold(), l.Stock)
	}
}

// The Store under testBucketOversell's burst, without HTTP, so that a
// refusal that is not the sale's shows its error: every reservation of a
// healthy Redis is accepted, sold out or over the limit, never unavailable
// ("bucket … short while the sale has N units": sale/buckets.go reserveBucket
// giving up after refillRounds while the buckets take each other's unsold
// stock back and forth at the end of the sale).
func TestBucketReserveContention(t *testing.T) {
	e := newEnv(t, Options{})
	const sale, stock, users = "bcont", 1000, 5000
	e.mustSale(sale, `{"stock":1000,"per_user_limit":1,"buckets":3}`)
	st := e.store
	var mu sync.Mutex
	answers := map[string]int{}
	var others []string
	var seq atomic.Int64
	saletest.Burst(2*users, 64, func(i int) {
		user := "u" + itoa(i%users)
		var out [1]Result
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r := Reservation{OrderID: "c" + strconv.FormatInt(seq.Add(1), 10), UserID: user, Quantity: 1}
		err := st.Reserve(ctx, st.idFor(sale, user), []Reservation{r}, out[:])
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
		t.Errorf("bucket bug (sale/buckets.go reserveBucket): %d reservations of a healthy Redis failed (%v), first: %v",
			len(others), answers, others[:min(3, len(others))])
	}
	if answers["accepted"] != stock {
		t.Errorf("accepted %d, stock %d (%v)", answers["accepted"], stock, answers)
	}
	if l := e.checkBuckets(sale); l.Sold() != stock {
		t.Errorf("sold %d, stock %d", l.Sold(), stock)
	}
}
