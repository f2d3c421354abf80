package expiry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/sale/saletest"
	"github.com/flashgate/flashgate/scripts"
)

// TestMain fails the package when a goroutine outlives its tests.
func TestMain(m *testing.M) { localstack.Main(m) }

// newTestStore is a sale.Store and a Sweeper on a Redis client of their
// own, of the Redis of `make up` (or the cluster of FLASHGATE_REDIS_ADDRS),
// under prefix; the Sweeper does not run: the test decides when a sweep
// runs. The keys are deleted when the test ends.
func newTestStore(t *testing.T, prefix string) (*sale.Store, *Sweeper, redis.UniversalClient) {
	t.Helper()
	rdb := localstack.NewRedis(&redis.UniversalOptions{Addrs: localstack.RedisAddrs, PoolSize: 16})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	loader := scripts.New(rdb, "", scripts.Keys{Prefix: prefix})
	if _, err := loader.Load(ctx); err != nil {
		rdb.Close()
		t.Fatalf("load scripts (run `make up`): %v", err)
	}
	t.Cleanup(func() {
		localstack.DropKeys(t, rdb, prefix)
		rdb.Close()
	})
	keys := scripts.Keys{Prefix: prefix}
	st, err := sale.New(rdb, loader, keys, sale.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st, New(rdb, loader, keys, Deps{}), rdb
}

// redisNow is Redis's clock in Unix ms.
func redisNow(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

// waitRedisPast waits until Redis's clock is at or past ms.
func waitRedisPast(t *testing.T, rdb redis.UniversalClient, ms int64) {
	t.Helper()
	for now := redisNow(t, rdb); now < ms; now = redisNow(t, rdb) {
		time.Sleep(time.Duration(ms-now+1) * time.Millisecond)
	}
}

func reserveN(t *testing.T, st *sale.Store, id string, n int, user func(i int) string) []sale.Result {
	t.Helper()
	out := make([]sale.Result, n)
	for lo := 0; lo < n; lo += 50 {
		hi := min(n, lo+50)
		rs := make([]sale.Reservation, 0, hi-lo)
		for i := lo; i < hi; i++ {
			rs = append(rs, sale.Reservation{OrderID: fmt.Sprintf("o%d", i), UserID: user(i), Quantity: 1})
		}
		if err := st.Reserve(context.Background(), id, rs, out[lo:hi]); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range out {
		if r.Err != nil {
			t.Fatalf("reservation %d: %v", i, r.Err)
		}
	}
	return out
}

// Invariant 8, the decision in one place: a pay or a cancel at or after
// pay_by expires the order right there, before any sweep ran, and says
// order_expired; the units come back once, however often it is asked
// again; the order view reads a due order as expired. A retried
// reservation answers its pay_by again.
func TestPayAtDeadlineWithoutSweep(t *testing.T) {
	prefix := "t" + localstack.RandomHex(6)
	st, w0, rdb := newTestStore(t, prefix)
	keys := scripts.Keys{Prefix: prefix}
	ctx := context.Background()
	win := int64(1)
	if _, _, err := st.Upsert(ctx, "d", sale.Update{Stock: ptr(10), PaymentWindow: &win}); err != nil {
		t.Fatal(err)
	}
	res := reserveN(t, st, "d", 3, func(i int) string { return fmt.Sprintf("b%d", i) })
	// A retried call (its reply lost) answers the same order and pay_by.
	again := make([]sale.Result, 1)
	if err := st.Reserve(ctx, "d", []sale.Reservation{{OrderID: "o0", UserID: "b0", Quantity: 1}}, again); err != nil ||
		again[0].Err != nil || again[0].PayBy != res[0].PayBy || again[0].OrderID != "o0" {
		t.Errorf("retried reservation: %+v %v, first %+v", again[0], err, res[0])
	}
	if rec, err := st.Order(ctx, "d", "o0"); err != nil || rec.State != order.StatePendingPayment || rec.PayBy != res[0].PayBy {
		t.Errorf("order before pay_by: %+v %v", rec, err)
	}
	waitRedisPast(t, rdb, res[2].PayBy)
	if rec, err := st.Order(ctx, "d", "o0"); err != nil || rec.State != order.StateExpired {
		t.Errorf("order view at pay_by: %+v %v, want expired", rec, err)
	}
	if v, err := st.Sale(ctx, "d"); err != nil || v.Sold != 3 || v.Pending != 3 {
		t.Fatalf("a read changed the sale: %+v %v", v, err)
	}
	rec, changed, err := st.Pay(ctx, "d", "o0")
	if !errors.Is(err, sale.ErrOrderExpired) || !changed || rec.State != order.StateExpired {
		t.Errorf("pay at pay_by: %+v %v %v", rec, changed, err)
	}
	rec, changed, err = st.Cancel(ctx, "d", "o1")
	if !errors.Is(err, sale.ErrOrderExpired) || !changed || rec.State != order.StateExpired {
		t.Errorf("cancel at pay_by: %+v %v %v", rec, changed, err)
	}
	for _, id := range []string{"o0", "o1"} {
		if _, changed, err := st.Pay(ctx, "d", id); !errors.Is(err, sale.ErrOrderExpired) || changed {
			t.Errorf("pay of expired %s: %v %v", id, changed, err)
		}
		if _, changed, err := st.Cancel(ctx, "d", id); !errors.Is(err, sale.ErrOrderExpired) || changed {
			t.Errorf("cancel of expired %s: %v %v", id, changed, err)
		}
	}
	if v, err := st.Sale(ctx, "d"); err != nil || v.Sold != 1 || v.Pending != 1 || v.Expired != 2 || v.Buyers != 1 {
		t.Fatalf("after two expiries by call: %+v %v", v, err)
	}
	sw, err := w0.sweepCall(ctx, "d", 10)
	if err != nil || len(sw.Expired) != 1 || sw.Expired[0].OrderID != "o2" || sw.Next != 0 {
		t.Errorf("sweep: %+v %v", sw, err)
	}
	if sw, err := w0.sweepCall(ctx, "d", 10); err != nil || len(sw.Expired) != 0 {
		t.Errorf("sweep again: %+v %v", sw, err)
	}
	l := saletest.CheckPayments(t, rdb, keys, "d")
	if l.Sold != 0 || l.ByState[order.StateExpired] != 3 {
		t.Errorf("sold %d, states %v", l.Sold, l.ByState)
	}
}

func ptr(n int64) *int64 { return &n }

// Invariant 8 with many sweepers: the sweep run at once by several
// "gateways" (Sweepers on clients of their own) on the same due orders
// expires each order exactly once and returns each order's units exactly
// once; orders not yet due are left alone.
func TestConcurrentSweeps(t *testing.T) {
	prefix := "t" + localstack.RandomHex(6)
	st, w0, rdb := newTestStore(t, prefix)
	keys := scripts.Keys{Prefix: prefix}
	ctx := context.Background()
	win := int64(1)
	if _, _, err := st.Upsert(ctx, "cs", sale.Update{Stock: ptr(1000), Limit: ptr(10), PaymentWindow: &win}); err != nil {
		t.Fatal(err)
	}
	const n = 600
	res := reserveN(t, st, "cs", n, func(i int) string { return fmt.Sprintf("c%d", i%100) })
	// Orders of a longer window, accepted now, are not due for a minute.
	win = 60
	if _, _, err := st.Upsert(ctx, "cs", sale.Update{PaymentWindow: &win}); err != nil {
		t.Fatal(err)
	}
	later := make([]sale.Result, 5)
	var rs []sale.Reservation
	for i := range later {
		rs = append(rs, sale.Reservation{OrderID: fmt.Sprintf("later%d", i), UserID: "l", Quantity: 1})
	}
	if err := st.Reserve(ctx, "cs", rs, later); err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, r := range res {
		last = max(last, r.PayBy)
	}
	waitRedisPast(t, rdb, last)

	const gateways = 6
	sweepers := []*Sweeper{w0}
	for i := 1; i < gateways; i++ {
		_, s, _ := newTestStore(t, prefix)
		sweepers = append(sweepers, s)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i, s := range sweepers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				sw, err := s.sweepCall(ctx, "cs", 7+i*5)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range sw.Expired {
					seen[e.OrderID]++
				}
				mu.Unlock()
				if len(sw.Expired) == 0 && (sw.Next == 0 || sw.Next > sw.Now) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("%d orders expired, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 || !strings.HasPrefix(id, "o") {
			t.Errorf("order %s expired %d times", id, k)
		}
	}
	l := saletest.CheckPayments(t, rdb, keys, "cs")
	if l.Sold != 5 || l.ByState[order.StateExpired] != n || l.ByState[order.StatePendingPayment] != 5 {
		t.Errorf("sold %d, states %v", l.Sold, l.ByState)
	}
	if held := rdb.HGetAll(ctx, keys.Users("cs")).Val(); len(held) != 1 || held["l"] != "5" {
		t.Errorf("users hash %v, want only l with 5", held)
	}
}
