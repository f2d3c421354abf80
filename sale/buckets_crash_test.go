package sale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale/saletest"
)

// What a process that died in the middle of a bucket's move or of a
// lowering left behind (buckets_test.go's sales): the settling pass and
// the next lowering finish it exactly once, and no unit is lost or counted
// twice.

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
