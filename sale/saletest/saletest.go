// Package saletest checks what a sale's Redis records say, against each
// other, for the tests of the packages that change them (sale, gateway,
// expiry, reconcile): the ledgers of the invariants, read from the keys
// alone, so that a test's verdict does not depend on the code under test.
package saletest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// BucketNames reads a sale's bucket ids from its home, as the store does.
func BucketNames(t testing.TB, rdb redis.UniversalClient, keys scripts.Keys, sale string) []string {
	t.Helper()
	names, err := rdb.HGet(context.Background(), keys.Meta(sale), "names").Result()
	if err != nil {
		t.Fatalf("names of %s: %v", sale, err)
	}
	return strings.Split(names, ",")
}

// UserOfBucket returns a user id starting with prefix that buys in bucket b.
func UserOfBucket(t testing.TB, names []string, b int, prefix string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		if u := prefix + strconv.Itoa(i); scripts.BucketOf(u, len(names)) == b {
			return u
		}
	}
	t.Fatalf("no user %s… buys in bucket %d", prefix, b)
	return ""
}

// Buckets is what a bucketed sale's Redis records say.
type Buckets struct {
	Names        []string
	Stock, Moved int64   // the home's: the pool is stock − moved
	Takes, Gives int64   // units in take records (home) and give records (buckets) whose second half has not run
	Finished     int     // records whose second half ran, left for their removal
	BucketStock  []int64 // what each bucket was handed
	BucketSold   []int64
	Held         map[string]int64 // user → units held, over every bucket
	AcceptedIDs  map[string]int   // order id → its bucket, of every accepted outbox entry
	OutUnits     int64            // units of the accepted outbox entries
	Records      map[string]scripts.Record
}

// Sold is what the buckets sold.
func (l Buckets) Sold() (n int64) {
	for _, s := range l.BucketSold {
		n += s
	}
	return n
}

// InBuckets is the units the buckets were handed and hold, sold or not.
func (l Buckets) InBuckets() (n int64) {
	for _, s := range l.BucketStock {
		n += s
	}
	return n
}

// CheckBuckets checks a quiet bucketed sale's records against each other: the home sells nothing; units are conserved
// (moved = take records + bucket stocks + give records, the pool ≥ 0); in
// each bucket sold ≤ stock, sold = the units of live orders, the users hash
// holds exactly each buyer's live units and only buyers hashed to that
// bucket, no buyer is in two buckets; every outbox entry names the sale
// (not the bucket) and an order id ending in ".<bucket>", one accepted
// entry per order. The caller holds the sale's view against the sums
// (Buckets.Sold, len(Buckets.Held) buyers, …).
func CheckBuckets(t testing.TB, rdb redis.UniversalClient, keys scripts.Keys, sale string) Buckets {
	t.Helper()
	ctx := context.Background()
	l := Buckets{Names: BucketNames(t, rdb, keys, sale), Held: map[string]int64{}, AcceptedIDs: map[string]int{},
		Records: map[string]scripts.Record{}}
	home, err := rdb.HGetAll(ctx, keys.Meta(sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	l.Stock, l.Moved = int64(atoi(home["stock"])), int64(atoi(home["moved"]))
	if home["buckets"] != strconv.Itoa(len(l.Names)) || len(l.Names) < 2 {
		t.Errorf("%s: home says buckets %q, names %v", sale, home["buckets"], l.Names)
	}
	for _, k := range []string{keys.Users(sale), keys.Orders(sale)} {
		if n := rdb.HLen(ctx, k).Val(); n != 0 {
			t.Errorf("%s: the home's %s has %d entries: the home sold", sale, k, n)
		}
	}
	if n := rdb.XLen(ctx, keys.Outbox(sale)).Val(); n != 0 {
		t.Errorf("%s: the home's outbox has %d entries", sale, n)
	}
	takes, err := rdb.HGetAll(ctx, keys.Moves(sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for id, rec := range takes {
		f := strings.Split(rec, ":")
		if len(f) != 4 || f[0] != "take" || atoi(f[1]) >= len(l.Names) {
			t.Errorf("%s: take record %s = %q", sale, id, rec)
			continue
		}
		// A record whose credit ran names units already in the bucket.
		if rdb.Exists(ctx, keys.Op(l.Names[atoi(f[1])], id)).Val() == 1 {
			l.Finished++
			continue
		}
		l.Takes += int64(atoi(f[2]))
	}
	if ok, _ := rdb.SIsMember(ctx, keys.Bucketed(), sale).Result(); !ok {
		t.Errorf("%s is not in the bucketed set: no settling pass finds its moves", sale)
	}
	l.BucketStock = make([]int64, len(l.Names))
	l.BucketSold = make([]int64, len(l.Names))
	for i, lane := range l.Names {
		if s, b, ok := scripts.SplitBucket(lane); !ok || s != sale || b != i {
			t.Errorf("%s: bucket %d is named %q", sale, i, lane)
		}
		if ok, _ := rdb.SIsMember(ctx, keys.Sales(), lane).Result(); !ok {
			t.Errorf("%s: bucket %s is not in the sale registry: no relay reads its outbox", sale, lane)
		}
		meta, err := rdb.HGetAll(ctx, keys.Meta(lane)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(meta) == 0 {
			t.Errorf("%s: bucket %s has no meta", sale, lane)
			continue
		}
		l.BucketStock[i], l.BucketSold[i] = int64(atoi(meta["stock"])), int64(atoi(meta["sold"]))
		if l.BucketSold[i] > l.BucketStock[i] {
			t.Errorf("%s: bucket %d sold %d of a stock of %d", sale, i, l.BucketSold[i], l.BucketStock[i])
		}
		orders, err := rdb.HGetAll(ctx, keys.Orders(lane)).Result()
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
			l.Records[id] = r
			if order.Live(r.State) {
				live[r.UserID] += r.Quantity
				liveUnits += r.Quantity
			}
		}
		if liveUnits != l.BucketSold[i] {
			t.Errorf("%s: live orders hold %d units, sold is %d", lane, liveUnits, l.BucketSold[i])
		}
		users, err := rdb.HGetAll(ctx, keys.Users(lane)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for u, h := range users {
			n := int64(atoi(h))
			if n != live[u] || n == 0 {
				t.Errorf("%s: user %s holds %s units, has %d in live orders", lane, u, h, live[u])
			}
			if b := scripts.BucketOf(u, len(l.Names)); b != i {
				t.Errorf("%s: user %s holds units in bucket %d, buys in %d", sale, u, i, b)
			}
			if _, dup := l.Held[u]; dup {
				t.Errorf("%s: user %s holds units in two buckets", sale, u)
			}
			l.Held[u] = n
		}
		suffix := "." + strconv.Itoa(i)
		var accepted int
		for _, o := range OutboxOrders(t, rdb, keys.Outbox(lane)) {
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
			if _, dup := l.AcceptedIDs[id]; dup {
				t.Errorf("%s: order %s accepted twice in the outboxes", sale, id)
			}
			l.AcceptedIDs[id] = i
			l.OutUnits += int64(o.Quantity)
			if r, ok := orders[id]; !ok {
				t.Errorf("%s: outbox order %s has no record", lane, id)
			} else if rec, _ := scripts.ParseRecord(r); rec.Quantity != int64(o.Quantity) || rec.UserID != o.UserID {
				t.Errorf("%s: outbox order %+v, record %+v", lane, o, rec)
			}
		}
		if accepted != len(orders) {
			t.Errorf("%s: %d orders, %d accepted outbox entries", lane, len(orders), accepted)
		}
		gives, err := rdb.HGetAll(ctx, keys.Moves(lane)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for id, rec := range gives {
			f := strings.Split(rec, ":")
			if len(f) != 3 || f[0] != "give" {
				t.Errorf("%s: give record %s = %q", lane, id, rec)
				continue
			}
			if rdb.Exists(ctx, keys.Op(sale, id)).Val() == 1 {
				l.Finished++
				continue
			}
			l.Gives += int64(atoi(f[1]))
		}
	}
	if l.Moved != l.Takes+l.InBuckets()+l.Gives {
		t.Errorf("%s: units not conserved: moved %d, but take records %d + bucket stocks %d (%v) + give records %d",
			sale, l.Moved, l.Takes, l.InBuckets(), l.BucketStock, l.Gives)
	}
	if l.Stock < l.Moved {
		t.Errorf("%s: moved %d past the stock %d", sale, l.Moved, l.Stock)
	}
	return l
}

// Payments is what a sale's Redis records say, checked against each other.
type Payments struct {
	Records   map[string]scripts.Record // order id → record
	ByState   map[string]int            // orders per state
	Finals    map[string]string         // order id → state of its final outbox entry
	Sold      int64
	Pending   int64
	Stock     int64
	Remaining int64
	MaxLag    int64 // ms from pay_by to the expiry, the latest of the expired
}

// CheckPayments checks Invariants 1, 2 and 8 on a sale from its Redis keys:
// sold + remaining = stock, sold = the units of live orders (pending,
// paid, confirmed); the users hash holds exactly each buyer's live units
// (none at 0); the due set is exactly the pending orders, at their pay_by;
// the counters are the numbers of orders per state; the outbox has one
// entry per order as accepted and at most one more, the order's final
// state, for an order in a final state and only then. It returns the
// records.
func CheckPayments(t testing.TB, rdb redis.UniversalClient, keys scripts.Keys, sale string) Payments {
	t.Helper()
	ctx := context.Background()
	l := Payments{Records: map[string]scripts.Record{}, ByState: map[string]int{}, Finals: map[string]string{}}
	meta, err := rdb.HGetAll(ctx, keys.Meta(sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := func(f string) int64 { return int64(atoi(meta[f])) }
	l.Stock, l.Sold, l.Pending = n("stock"), n("sold"), n("pending")
	l.Remaining = l.Stock - l.Sold
	if l.Remaining < 0 {
		t.Errorf("remaining %d < 0", l.Remaining)
	}
	raw, err := rdb.HGetAll(ctx, keys.Orders(sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]int64{}
	var liveUnits int64
	for id, v := range raw {
		r, err := scripts.ParseRecord(v)
		if err != nil {
			t.Errorf("order %s: %v", id, err)
			continue
		}
		l.Records[id] = r
		l.ByState[r.State]++
		if order.Live(r.State) {
			live[r.UserID] += r.Quantity
			liveUnits += r.Quantity
		}
		// A deadline is kept through the order's life: what was pending
		// has one, a confirmed order never had one.
		switch r.State {
		case order.StatePendingPayment, order.StatePaid, order.StateExpired:
			if r.PayBy == 0 {
				t.Errorf("order %s: %s without pay_by", id, r.State)
			}
		case order.StateConfirmed:
			if r.PayBy != 0 {
				t.Errorf("order %s: confirmed with pay_by %d", id, r.PayBy)
			}
		}
	}
	if liveUnits != l.Sold {
		t.Errorf("live orders hold %d units, sold is %d (Invariant 1)", liveUnits, l.Sold)
	}
	held, err := rdb.HGetAll(ctx, keys.Users(sale)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for u, h := range held {
		if int64(atoi(h)) != live[u] || live[u] == 0 {
			t.Errorf("user %s holds %s units, has %d in live orders", u, h, live[u])
		}
	}
	for u, units := range live {
		if _, ok := held[u]; !ok {
			t.Errorf("user %s has %d units in live orders, none in the users hash", u, units)
		}
	}
	for state, field := range map[string]string{order.StatePendingPayment: "pending", order.StatePaid: "paid",
		order.StateCancelled: "cancelled", order.StateExpired: "expired"} {
		if int64(l.ByState[state]) != n(field) {
			t.Errorf("%d orders %s, counter %s is %d", l.ByState[state], state, field, n(field))
		}
	}
	due, err := rdb.ZRangeWithScores(ctx, keys.Due(sale), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != l.ByState[order.StatePendingPayment] {
		t.Errorf("due set has %d orders, %d are pending", len(due), l.ByState[order.StatePendingPayment])
	}
	for _, z := range due {
		id := z.Member.(string)
		if r := l.Records[id]; r.State != order.StatePendingPayment || r.PayBy != int64(z.Score) {
			t.Errorf("due order %s at %v: record %+v", id, z.Score, r)
		}
	}
	accepted := map[string]int{}
	for _, o := range OutboxOrders(t, rdb, keys.Outbox(sale)) {
		r, ok := l.Records[o.OrderID]
		if !ok || o.UserID != r.UserID || int64(o.Quantity) != r.Quantity || o.SaleID != sale {
			t.Errorf("outbox order %+v, record %+v", o, r)
		}
		var pb int64
		if !o.PayBy.IsZero() {
			pb = o.PayBy.UnixMilli()
		}
		if o.ReservedAt.UnixMilli() != r.ReservedAt || pb != r.PayBy {
			t.Errorf("outbox entry %s times %v %v, record %+v", o.Entry, o.ReservedAt, o.PayBy, r)
		}
		if order.Final(o.State) {
			if prev, dup := l.Finals[o.OrderID]; dup {
				t.Errorf("order %s in the outbox as %s and as %s (Invariant 8)", o.OrderID, prev, o.State)
			}
			l.Finals[o.OrderID] = o.State
			// Stream ids are Redis milliseconds, taken when the XADD runs,
			// after the script read its clock (TIME) and decided: so no
			// expiry is stamped before pay_by. A pay decided a moment
			// before pay_by may be stamped at or just after it (the script
			// ran across the millisecond); one stamped a second after it
			// can only have been decided after it.
			ms := int64(atoi(o.Entry[:strings.IndexByte(o.Entry, '-')]))
			if o.State == order.StateExpired && ms < r.PayBy || o.State == order.StatePaid && ms >= r.PayBy+1000 {
				t.Errorf("order %s %s at %d, pay_by %d", o.OrderID, o.State, ms, r.PayBy)
			}
			if o.State == order.StateExpired {
				l.MaxLag = max(l.MaxLag, ms-r.PayBy)
			}
		} else {
			accepted[o.OrderID]++
		}
	}
	for id, r := range l.Records {
		if accepted[id] != 1 {
			t.Errorf("order %s accepted %d times in the outbox", id, accepted[id])
		}
		if f, ok := l.Finals[id]; order.Final(r.State) != ok || ok && f != r.State {
			t.Errorf("order %s is %s, its final outbox entry %q", id, r.State, f)
		}
	}
	return l
}

// OutboxOrders returns the orders (and changes of state) an outbox holds,
// in their order, whatever the form of its entries (order.FromStreamEntry),
// each with the id of its entry.
func OutboxOrders(t testing.TB, rdb redis.UniversalClient, key string) []EntryOrder {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []EntryOrder
	for _, e := range entries {
		os, err := order.FromStreamEntry(e.Values)
		if err != nil {
			t.Fatalf("outbox %s entry %s: %v", key, e.ID, err)
		}
		for _, o := range os {
			out = append(out, EntryOrder{o, e.ID})
		}
	}
	return out
}

// EntryOrder is an order of an outbox entry, and the entry's id.
type EntryOrder struct {
	order.Order
	Entry string
}

// Burst runs n calls of f on up to `workers` goroutines released together.
func Burst(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	start := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range next {
				f(i)
			}
		}()
	}
	close(start)
	wg.Wait()
}

// PrimaryOf is the address of the primary that holds key, on a cluster;
// "" on one Redis.
func PrimaryOf(t testing.TB, rdb redis.UniversalClient, key string) string {
	t.Helper()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	node, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return node.Options().Addr
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
