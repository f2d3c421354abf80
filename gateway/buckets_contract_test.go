package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/sale/saletest"
	"github.com/flashgate/flashgate/scripts"
)

// What the API says of a sale of buckets (buckets_test.go) beside its
// stock: its orders and their ids, payment, Idempotency-Key, the bucket
// count's bounds, and the per-sale series of /metrics.

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
