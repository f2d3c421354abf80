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

// The tests of a sale of several buckets that reach into the store: its
// last units, the placement on a cluster's primaries, the reservations of a
// burst; buckets_crash_test.go: the moves' halves and the settling pass.
// They run on one Redis and on the cluster of `make up-cluster`. Package
// gateway tests the same sales through HTTP.

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
