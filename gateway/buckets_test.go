package gateway

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/flashgate/flashgate/sale/saletest"
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
