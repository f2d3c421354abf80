package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/sale/saletest"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// Once sold out, the crowd is answered from memory; a restock or an unlock
// reopens the sale at once, through the announcement, long before the TTL.
// Invariant 1 holds with the memory in front of Redis; invariant 4: a
// request with an Idempotency-Key still gets Redis's replay.
func TestClosedSaleShortCircuit(t *testing.T) {
	g := startGateway(t, func(c *config.Config) { c.Cache.ClosedTTL = time.Minute })
	g.mustSale("so", `{"stock":2,"per_user_limit":1}`)
	for i := 0; i < 2; i++ {
		if r := g.buy("so", fmt.Sprintf("a%d", i), 1, ""); r.code != 202 {
			t.Fatalf("buy %d: %d %s", i, r.code, r.raw)
		}
	}
	// The sale's creation is announced too; once that has arrived, the
	// sold-out answer is remembered.
	localstack.WaitFor(t, 20*time.Second, "the sold-out sale to be remembered", func() bool {
		if r := g.buy("so", "late0", 1, ""); r.code != 410 {
			t.Fatalf("sold out: %d %s", r.code, r.raw)
		}
		return errors.Is(g.srv.closed.get([]byte("so"), time.Now()), sale.ErrSoldOut)
	})
	// 100 buys make no script call. An announcement heard meanwhile (the
	// creation's, late under load: CI saw one call) forgets the sale
	// rightly, so such a round is not counted and is sent again.
	localstack.WaitFor(t, 20*time.Second, "100 buys without an announcement among them", func() bool {
		epoch, calls := g.srv.closed.epoch.Load(), g.loader.Stats().Calls
		for i := 0; i < 100; i++ {
			if r := g.buy("so", fmt.Sprintf("late%d", i), 1, ""); r.code != 410 || r.status() != "sold_out" {
				t.Fatalf("sold out from memory: %d %s", r.code, r.raw)
			}
		}
		n := g.loader.Stats().Calls - calls
		if g.srv.closed.epoch.Load() != epoch {
			return false
		}
		if n != 0 {
			t.Fatalf("%d script calls for 100 buys of a sold-out sale; want 0", n)
		}
		return true
	})
	// A malformed request is still a 400: shape comes first.
	if r := g.do("POST", g.base+"/v1/sales/so/orders", `{"user_id":"x","quantity":0}`, nil); r.code != 400 {
		t.Errorf("bad quantity on a sold-out sale: %d %s", r.code, r.raw)
	}
	// An Idempotency-Key request goes to Redis, which replays its first answer.
	g.srv.closed.forget("so")
	first := g.buy("so", "a0", 1, "k-1")
	if first.code != 409 && first.code != 410 {
		t.Fatalf("first answer with a key: %d %s", first.code, first.raw)
	}
	if r := g.buy("so", "a0", 1, "k-1"); string(r.raw) != string(first.raw) {
		t.Errorf("replay %s, first %s", r.raw, first.raw)
	}

	if r := g.adminPost("so", "restock", `{"quantity":1}`); r.code != 200 {
		t.Fatalf("restock: %d %s", r.code, r.raw)
	}
	localstack.WaitFor(t, 20*time.Second, "the restock to reach the gateway", func() bool { return g.srv.closed.get([]byte("so"), time.Now()) == nil })
	if r := g.buy("so", "b1", 1, ""); r.code != 202 {
		t.Errorf("buy after restock: %d %s", r.code, r.raw)
	}

	// Locked: remembered, and unlock reopens at once.
	g.adminPost("so", "restock", `{"quantity":5}`)
	g.adminPost("so", "lock", "")
	// The restock's and the lock's own announcements reach this gateway
	// after their calls returned; an answer whose call overlapped one is
	// rightly not remembered (it may predate the change), so the next one is.
	localstack.WaitFor(t, 20*time.Second, "the locked sale to be remembered", func() bool {
		if r := g.buy("so", "c1", 1, ""); r.code != 423 {
			t.Fatalf("locked: %d %s", r.code, r.raw)
		}
		return errors.Is(g.srv.closed.get([]byte("so"), time.Now()), sale.ErrLocked)
	})
	g.adminPost("so", "unlock", "")
	localstack.WaitFor(t, 20*time.Second, "the unlock to reach the gateway", func() bool { return g.srv.closed.get([]byte("so"), time.Now()) == nil })
	if r := g.buy("so", "c2", 1, ""); r.code != 202 {
		t.Errorf("buy after unlock: %d %s", r.code, r.raw)
	}
	g.checkLedger("so")
}

// A change that was never announced (here: written straight into Redis) is
// noticed when the TTL runs out.
func TestClosedSaleTTLSafetyNet(t *testing.T) {
	g := startGateway(t, func(c *config.Config) { c.Cache.ClosedTTL = 200 * time.Millisecond })
	g.mustSale("ttl", `{"stock":1}`)
	g.buy("ttl", "a", 1, "")
	if r := g.buy("ttl", "b", 1, ""); r.code != 410 {
		t.Fatalf("sold out: %d %s", r.code, r.raw)
	}
	if err := g.rdb.HSet(context.Background(), g.keys.Meta("ttl"), "stock", 2).Err(); err != nil {
		t.Fatal(err)
	}
	localstack.WaitFor(t, 20*time.Second, "the TTL to reopen the sale", func() bool { return g.buy("ttl", "b", 1, "").code == 202 })
}

// Concurrent buyers of one sale share script calls; invariant 1 holds.
func TestBatchingCoalesces(t *testing.T) {
	g := startGateway(t, func(c *config.Config) { c.Batch.MaxSize = 64 })
	g.mustSale("co", `{"stock":100000,"per_user_limit":10}`)
	before := g.scrape()["flashgate_reserve_calls_total"]
	saletest.Burst(3000, 128, func(i int) { g.buy("co", fmt.Sprintf("u%d", i%1000), 1, "") })
	calls := g.scrape()["flashgate_reserve_calls_total"] - before
	if calls == 0 || calls >= 3000 {
		t.Errorf("%.0f script calls for 3000 concurrent buys: no batching", calls)
	}
	if sold := g.checkLedger("co"); sold != 3000 {
		t.Errorf("sold %d, want 3000", sold)
	}
	t.Logf("3000 buys in %.0f script calls", calls)
}

// Admission control sheds buys with 429; invariant 1: what it let through
// is exactly what was sold.
func TestAdmissionControl(t *testing.T) {
	g := startGateway(t, func(c *config.Config) { c.Admission.Rate = 5; c.Admission.Burst = 5 })
	g.mustSale("adm", `{"stock":1000,"per_user_limit":1000}`)
	var ok, limited int
	for i := 0; i < 30; i++ {
		r := g.buy("adm", "u", 1, "")
		switch r.code {
		case 202:
			ok++
		case 429:
			limited++
			if r.status() != "rate_limited" || r.hdr.Get("Retry-After") == "" {
				t.Errorf("429 without its status or Retry-After: %s %v", r.raw, r.hdr)
			}
		default:
			t.Errorf("unexpected %d %s", r.code, r.raw)
		}
	}
	if limited == 0 || ok == 0 {
		t.Errorf("%d accepted, %d rate limited: the bucket of 5 did nothing", ok, limited)
	}
	if sold := g.checkLedger("adm"); sold != int64(ok) {
		t.Errorf("sold %d, accepted %d", sold, ok)
	}
}

// A gateway learns a sale is sold out from the call that left it no unit,
// whatever that call answered: the buy that took the last unit (202), and
// a buyer back at the limit, whom Redis tells limit_reached before
// sold_out. The crowd after them is then answered from memory.
func TestSoldOutRememberedFromTheLastCall(t *testing.T) {
	g := startGateway(t, func(c *config.Config) { c.Cache.ClosedTTL = time.Minute })
	e0 := g.srv.closed.epoch.Load()
	g.mustSale("last", `{"stock":1,"per_user_limit":1}`)
	// The creation is announced; an announcement heard during a call
	// keeps that call's answer from being remembered.
	localstack.WaitFor(t, 20*time.Second, "the sale's creation announced", func() bool { return g.srv.closed.epoch.Load() != e0 })
	if r := g.buy("last", "u1", 1, ""); r.code != 202 {
		t.Fatalf("buy of the last unit: %d %s", r.code, r.raw)
	}
	if err := g.srv.closed.get([]byte("last"), time.Now()); !errors.Is(err, sale.ErrSoldOut) {
		t.Fatalf("after the buy of the last unit the gateway remembers %v, want sold out", err)
	}
	calls := g.loader.Stats().Calls
	if r := g.buy("last", "u2", 1, ""); r.code != 410 || r.status() != "sold_out" {
		t.Errorf("the next buyer: %d %s, want 410 sold_out from memory", r.code, r.raw)
	}
	if n := g.loader.Stats().Calls - calls; n != 0 {
		t.Errorf("%d script calls for a buy after the last unit, want 0", n)
	}

	g.srv.closed.forget("last") // as when the memory's TTL has passed
	if r := g.buy("last", "u1", 1, ""); r.code != 409 || r.status() != "limit_reached" {
		t.Fatalf("the buyer back at the limit: %d %s, want Redis's 409 limit_reached", r.code, r.raw)
	}
	if err := g.srv.closed.get([]byte("last"), time.Now()); !errors.Is(err, sale.ErrSoldOut) {
		t.Errorf("after a buyer at the limit the gateway remembers %v, want sold out", err)
	}
}
