package gateway

import (
	"context"
	"fmt"
	"github.com/flashgate/flashgate/internal/localstack"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Admin updates of a hot sale of several buckets answer as on a sale of one
// bucket (API.md "buckets"): a new stock at or above the units sold when it
// takes effect is taken at once, whatever the buckets hold unsold at that
// instant; a 409 says what refused it. They run on one Redis and on the
// cluster of `make up-cluster`.

// hotBuyers is a crowd buying one unit at a time on one sale, each buy
// under a user of its own, so that nothing but the stock refuses it. Until
// free is called, the crowd makes at most the buys it was given tickets
// for, so that a test knows a bound of what it can have sold at any
// instant; after it, the crowd buys until it hears sold_out.
type hotBuyers struct {
	g       *testGateway
	sale    string
	tickets chan struct{}
	freed   chan struct{}
	free    func()
	stop    chan struct{}
	wg      sync.WaitGroup
	o       *outcomes
	// accepted counts the 202s so far, for waitFor.
	accepted atomic.Int64
}

// startHotBuyers starts workers buyers on sale with tickets buys allowed
// (tickets < 0: no bound). The test's cleanup stops them.
func startHotBuyers(t *testing.T, g *testGateway, sale string, workers, tickets int) *hotBuyers {
	h := &hotBuyers{g: g, sale: sale, freed: make(chan struct{}), stop: make(chan struct{}), o: newOutcomes()}
	var once sync.Once
	h.free = func() { once.Do(func() { close(h.freed) }) }
	if tickets < 0 {
		h.free()
	} else {
		h.tickets = make(chan struct{}, tickets)
		for range tickets {
			h.tickets <- struct{}{}
		}
	}
	for w := range workers {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-h.stop:
					return
				case <-h.tickets:
				case <-h.freed:
				}
				user := fmt.Sprintf("h%d-%d", w, i)
				r := g.buy(sale, user, 1, "")
				h.o.add(t, r, user)
				if r.code == 202 {
					h.accepted.Add(1)
				}
				if r.code == 410 {
					return
				}
			}
		}()
	}
	var stopOnce sync.Once
	t.Cleanup(func() { stopOnce.Do(func() { close(h.stop) }); h.wg.Wait() })
	return h
}

// wait waits for every buyer to have heard sold_out, and checks that no
// buy was answered anything but 202 or sold_out; it returns the units
// accepted.
func (h *hotBuyers) wait(t *testing.T) int64 {
	t.Helper()
	h.wg.Wait()
	h.o.mu.Lock()
	defer h.o.mu.Unlock()
	for status, n := range h.o.byStatus {
		if status != "accepted" && status != "sold_out" {
			t.Errorf("%d buys answered %q (%v): a bucketed sale answers as a sale of one bucket", n, status, h.o.byStatus)
		}
	}
	_, units := h.o.accepted()
	return units
}

// belowSoldText is the text of a 409 of a stock below the units sold.
var belowSoldText = regexp.MustCompile(`^stock ([0-9]+) below the ([0-9]+) units sold$`)

// checkBelowSold checks that r is the 409 of a PUT of stock below what the
// sale has sold, and returns the units sold it names.
func checkBelowSold(t *testing.T, r response, stock int64) int64 {
	t.Helper()
	m := belowSoldText.FindStringSubmatch(r.str("error"))
	if r.code != 409 || r.status() != "conflict" || m == nil || m[1] != strconv.FormatInt(stock, 10) {
		t.Errorf("PUT stock %d below sold: %d %s, want 409 conflict %q", stock, r.code, r.raw, belowSoldText)
		return 0
	}
	sold, _ := strconv.ParseInt(m[2], 10, 64)
	if sold <= stock {
		t.Errorf("PUT stock %d refused naming %d units sold: %s", stock, sold, r.raw)
	}
	return sold
}

// Lowering the stock of a hot bucketed sale to what it has sold and a few
// more, while a crowd buys, is taken by the first call, though the buckets
// hold far more unsold units than the new stock leaves; the crowd then
// buys exactly the new stock. A lowering below what was sold, in the same
// crowd, is 409 with the numbers and changes nothing. Three sales at once,
// each with its crowd: a lowering decided on what the buckets hold, taken
// back or not, is refused in most runs of one sale, and in nearly all of
// three.
func TestBucketLowerStockUnderLoad(t *testing.T) {
	g := startGateway(t)
	for i := range 3 {
		sale := "blower" + itoa(i)
		t.Run(sale, func(t *testing.T) {
			t.Parallel()
			testBucketLowerStockUnderLoad(t, g, sale)
		})
	}
}

func testBucketLowerStockUnderLoad(t *testing.T, g *testGateway, sale string) {
	ctx := context.Background()
	// A chunk of a refill is 200000/(8·3) = 8334 units: each bucket a buyer
	// reached holds thousands unsold.
	const stock, more = 200000, 1000
	g.mustSale(sale, `{"stock":200000,"per_user_limit":1,"buckets":3}`)
	// The crowd buys at most `more` units before it is freed: whatever it
	// has sold when the lowering takes effect is at most that.
	h := startHotBuyers(t, g, sale, 24, more)
	localstack.WaitFor(t, 20*time.Second, "some accepts before the lowering", func() bool { return h.accepted.Load() >= 200 })

	low := checkBelowSold(t, g.put(sale, `{"stock":1}`), 1)
	if v := g.view(sale); v.num("stock") != stock {
		t.Errorf("a refused lowering changed the stock: %s", v.raw)
	}

	sold := g.view(sale).num("sold")
	if sold < low {
		t.Errorf("sold %d after a 409 that named %d sold", sold, low)
	}
	target := sold + more
	moved := int64(atoi(g.rdb.HGet(ctx, g.keys.Meta(sale), "moved").Val()))
	if moved <= target {
		t.Fatalf("the buckets hold %d units, the new stock is %d: the test does not lower below what they hold", moved, target)
	}
	r := g.put(sale, fmt.Sprintf(`{"stock":%d}`, target))
	if r.code != 200 || r.num("stock") != target || r.num("sold")+r.num("remaining") != target {
		t.Fatalf("lower the stock to %d (sold %d, %d in the buckets): %d %s", target, sold, moved, r.code, r.raw)
	}
	t.Logf("lowered to %d with %d sold and %d handed to the buckets; the answer says %d sold", target, sold, moved, r.num("sold"))
	h.free()
	units := h.wait(t)
	if units != target {
		t.Errorf("the crowd was accepted %d units, the new stock is %d", units, target)
	}
	l := checkBuckets(t, g, sale)
	if l.Sold() != target || l.Stock != target {
		t.Errorf("sold %d of a stock of %d, want all %d", l.Sold(), l.Stock, target)
	}
	if v := g.view(sale); v.num("remaining") != 0 || v.str("state") != "sold_out" {
		t.Errorf("view after the crowd: %s", v.raw)
	}
}

// Raising the stock of a hot bucketed sale while a crowd buys is taken by
// the first call; the crowd then buys exactly the new stock.
func TestBucketRaiseStockUnderLoad(t *testing.T) {
	g := startGateway(t)
	const sale, raised = "braise", 2600
	g.mustSale(sale, `{"stock":2000,"per_user_limit":1,"buckets":3}`)
	h := startHotBuyers(t, g, sale, 48, -1)
	localstack.WaitFor(t, 20*time.Second, "some accepts before the raise", func() bool { return h.accepted.Load() >= 300 })
	r := g.put(sale, fmt.Sprintf(`{"stock":%d}`, raised))
	if r.code != 200 || r.num("stock") != raised || r.num("sold")+r.num("remaining") != raised {
		t.Fatalf("raise the stock to %d: %d %s", raised, r.code, r.raw)
	}
	units := h.wait(t)
	if units != raised {
		t.Errorf("the crowd was accepted %d units, the new stock is %d", units, raised)
	}
	l := checkBuckets(t, g, sale)
	if l.Sold() != raised || l.Stock != raised {
		t.Errorf("sold %d of a stock of %d, want all %d", l.Sold(), l.Stock, raised)
	}
}

// The 409s of an update say what refused it, alike on a sale of one bucket
// and of several: a stock below the units sold names both numbers, and
// changes nothing; a stock of exactly the units sold is taken, even while
// the buckets hold unsold units; another bucket count says so, whatever
// else the body asks.
func TestBucketAdminConflicts(t *testing.T) {
	g := startGateway(t)
	for _, c := range []struct {
		sale    string
		buckets int64
	}{{"bconf1", 1}, {"bconf3", 3}} {
		t.Run(fmt.Sprintf("%d buckets", c.buckets), func(t *testing.T) {
			g.mustSale(c.sale, fmt.Sprintf(`{"stock":1000,"per_user_limit":5,"buckets":%d}`, c.buckets))
			// 25 units over buyers of every bucket.
			for i := range 5 {
				if r := g.buy(c.sale, "c"+itoa(i), 5, ""); r.code != 202 {
					t.Fatalf("buy: %d %s", r.code, r.raw)
				}
			}
			r := g.put(c.sale, `{"stock":20}`)
			if sold := checkBelowSold(t, r, 20); sold != 25 {
				t.Errorf("the 409 names %d units sold, want 25: %s", sold, r.raw)
			}
			if v := g.view(c.sale); v.num("stock") != 1000 || v.num("sold") != 25 {
				t.Errorf("the refused PUT changed the sale: %s", v.raw)
			}
			for _, body := range []string{
				fmt.Sprintf(`{"buckets":%d}`, c.buckets+1),
				fmt.Sprintf(`{"stock":20,"buckets":%d}`, c.buckets+1),
				fmt.Sprintf(`{"stock":500,"per_user_limit":2,"buckets":%d}`, c.buckets+2),
			} {
				r := g.put(c.sale, body)
				want := fmt.Sprintf("buckets cannot change: the sale has %d", c.buckets)
				if r.code != 409 || r.status() != "conflict" || r.str("error") != want {
					t.Errorf("PUT %s: %d %s, want 409 conflict %q", body, r.code, r.raw, want)
				}
			}
			if v := g.view(c.sale); v.num("stock") != 1000 || v.num("per_user_limit") != 5 || v.num("buckets") != c.buckets {
				t.Errorf("the refused PUTs changed the sale: %s", v.raw)
			}
			if c.buckets > 1 {
				if l := checkBuckets(t, g, c.sale); l.Moved <= 25 {
					t.Fatalf("the buckets hold %d units, no more than sold: the test does not lower below what they hold", l.Moved)
				}
			}
			if r := g.put(c.sale, `{"stock":25}`); r.code != 200 || r.num("stock") != 25 || r.num("remaining") != 0 {
				t.Errorf("PUT stock 25 = sold: %d %s", r.code, r.raw)
			}
			if r := g.buy(c.sale, "c-late", 1, ""); r.code != 410 {
				t.Errorf("buy after the stock was lowered to sold: %d %s", r.code, r.raw)
			}
			if c.buckets > 1 {
				if l := checkBuckets(t, g, c.sale); l.Sold() != 25 || l.Stock != 25 {
					t.Errorf("sold %d of %d, want 25 of 25", l.Sold(), l.Stock)
				}
			}
		})
	}
}
