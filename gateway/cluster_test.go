package gateway

import (
	"context"
	"fmt"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale/saletest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// What only a Redis Cluster can break: sales on different primaries, the
// announcements published on one primary and heard through a subscription
// on another, the script cache lost on every primary, the sweeper's reads
// of every primary. On one Redis they run as well (all sales on the one
// node); `make test-cluster` runs them on the cluster of `make up-cluster`.

// spreadSales returns n sale ids per primary of g's Redis: on a cluster the
// sales' slots are on every primary (found with the slot map, not hoped
// for), on one Redis they are n ids. name starts each id.
func spreadSales(t *testing.T, g *testGateway, name string, n int) []string {
	t.Helper()
	cc, ok := g.rdb.(*redis.ClusterClient)
	if !ok {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", name, i)
		}
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var count atomic.Int64 // ForEachMaster calls concurrently
	if err := cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { count.Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	primaries := int(count.Load())
	byNode := map[string][]string{}
	var out []string
	for i := 0; len(out) < n*primaries; i++ {
		if i > 1000*n*primaries {
			t.Fatalf("no sale ids on every primary after %d tries: %v", i, byNode)
		}
		sale := fmt.Sprintf("%s%d", name, i)
		node, err := cc.MasterForKey(ctx, g.keys.Meta(sale))
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		if len(byNode[addr]) < n {
			byNode[addr] = append(byNode[addr], sale)
			out = append(out, sale)
		}
	}
	return out
}

// Announcements are published by a script on the sale's primary and heard
// by the gateway's one subscription, on the primary of the channel's slot:
// classic PUBLISH reaches every node's subscribers. A sale remembered as
// sold out (for a minute) is reopened by a restock on whichever primary it
// lives, through the announcement, not the TTL.
func TestAnnouncementsFromEveryPrimary(t *testing.T) {
	g := startGateway(t, func(c *config.Config) { c.Cache.ClosedTTL = time.Minute })
	sales := spreadSales(t, g, "an", 2)
	t.Logf("the announcements' channel is on %q", saletest.PrimaryOf(t, g.rdb, g.keys.Events()))
	for _, sale := range sales {
		g.mustSale(sale, `{"stock":1,"per_user_limit":1}`)
		if r := g.buy(sale, "first", 1, ""); r.code != 202 {
			t.Fatalf("%s: buy: %d %s", sale, r.code, r.raw)
		}
		// An answer whose call overlapped the creation's announcement is
		// rightly not remembered; once it has arrived, the next one is.
		localstack.WaitFor(t, 20*time.Second, "the sold-out "+sale+" to be remembered", func() bool {
			if r := g.buy(sale, "late", 1, ""); r.code != 410 {
				t.Fatalf("%s: sold out: %d %s", sale, r.code, r.raw)
			}
			return g.srv.closed.get([]byte(sale), time.Now()) != nil
		})
	}
	for _, sale := range sales {
		if r := g.adminPost(sale, "restock", `{"quantity":1}`); r.code != 200 {
			t.Fatalf("%s: restock: %d %s", sale, r.code, r.raw)
		}
		localstack.WaitFor(t, 20*time.Second, "the restock of "+sale+" on "+saletest.PrimaryOf(t, g.rdb, g.keys.Meta(sale))+" to be announced", func() bool {
			return g.srv.closed.get([]byte(sale), time.Now()) == nil
		})
		if r := g.buy(sale, "second", 1, ""); r.code != 202 {
			t.Errorf("%s: buy after the restock: %d %s", sale, r.code, r.raw)
		}
		g.checkLedger(sale)
	}
}

// The script cache emptied on every primary, again and again, during a
// burst over sales on every primary (as after a failover, when the new
// primary has never loaded the scripts): each EVALSHA that meets NOSCRIPT
// is run again with EVAL on that sale's primary. Every buy is 202 or an
// outcome of the sale, none is 5xx, exactly the stock is sold on every
// sale, and Redis's records add up (invariant 1).
func TestScriptFlushEveryPrimary(t *testing.T) {
	g := startGateway(t, onOwnRedis(t))
	sales := spreadSales(t, g, "fl", 3)
	const stock = 40
	for _, sale := range sales {
		g.mustSale(sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":1}`, stock))
	}
	before := g.loader.Stats().NoScript
	stopFlushing := flushScriptsMeanwhile(t, g)
	results := make([]*outcomes, len(sales))
	for i := range results {
		results[i] = newOutcomes()
	}
	buys := len(sales) * stock * 2
	saletest.Burst(buys, 64, func(i int) {
		s := i % len(sales)
		user := fmt.Sprintf("u%d", i/len(sales))
		results[s].add(t, g.buy(sales[s], user, 1, ""), user)
	})
	flushes := stopFlushing()
	for i, sale := range sales {
		o := results[i]
		if len(o.fivexx) > 0 {
			t.Errorf("%s: %d answers were 5xx, first: %s", sale, len(o.fivexx), o.fivexx[0])
		}
		if _, units := o.accepted(); units != stock {
			t.Errorf("%s: accepted %d units of %d (%v)", sale, units, stock, o.byStatus)
		}
		for status := range o.byStatus {
			if status != "accepted" && status != "sold_out" {
				t.Errorf("%s: answer %q (%v)", sale, status, o.byStatus)
			}
		}
		if sold := g.checkLedger(sale); sold != stock {
			t.Errorf("%s: sold %d, want %d", sale, sold, stock)
		}
	}
	if g.loader.Stats().NoScript == before {
		t.Errorf("no NOSCRIPT was met in %d flushes: the test did not exercise the reload path", flushes)
	}
	t.Logf("%d flushes of every primary, %d NOSCRIPT answers", flushes, g.loader.Stats().NoScript-before)
}

// The sweeper reads the earliest pay_by of every paying sale in pipelines
// that a cluster client splits by primary, and sweeps each sale on its own
// primary: orders of sales on every primary all expire, their units back.
func TestSweepEveryPrimary(t *testing.T) {
	g := startGateway(t)
	sales := spreadSales(t, g, "sw", 2)
	for _, sale := range sales {
		g.mustSale(sale, `{"stock":5,"per_user_limit":1,"payment_window":1}`)
		for i := range 3 {
			if r := g.buy(sale, fmt.Sprintf("u%d", i), 1, ""); r.code != 202 || r.str("state") != order.StatePendingPayment {
				t.Fatalf("%s: buy: %d %s", sale, r.code, r.raw)
			}
		}
	}
	for _, sale := range sales {
		localstack.WaitFor(t, 20*time.Second, "the orders of "+sale+" to expire", func() bool {
			v := g.view(sale)
			return v.num("pending_payment") == 0 && v.num("sold") == 0 && v.num("remaining") == 5
		})
		l := saletest.CheckPayments(t, g.rdb, g.keys, sale)
		if l.ByState[order.StateExpired] != 3 {
			t.Errorf("%s: %v, want 3 expired", sale, l.ByState)
		}
	}
}

// An Idempotency-Key may hold braces, which on a cluster would name the
// hash slot if they came first: the sale's own {tag} comes before it, so
// the key stays in the sale's slot, the reserve script's keys in one slot
// (no CROSSSLOT), and the replay works as on one Redis.
func TestIdempotencyKeyWithBraces(t *testing.T) {
	g := startGateway(t)
	for _, sale := range spreadSales(t, g, "br", 1) {
		g.mustSale(sale, `{"stock":5,"per_user_limit":5}`)
		for _, key := range []string{"{x}", "}{", "{" + sale + "}", "a{b}c{d}"} {
			first := g.buy(sale, "u", 1, key)
			if first.code != 202 {
				t.Fatalf("%s, key %q: %d %s", sale, key, first.code, first.raw)
			}
			if again := g.buy(sale, "u", 1, key); string(again.raw) != string(first.raw) {
				t.Errorf("%s, key %q: replay %s, first %s", sale, key, again.raw, first.raw)
			}
			if a, b := saletest.PrimaryOf(t, g.rdb, g.keys.Idem(sale, key)), saletest.PrimaryOf(t, g.rdb, g.keys.Meta(sale)); a != b {
				t.Errorf("%s, key %q: the idempotency key is on %s, the sale on %s", sale, key, a, b)
			}
		}
		if sold := g.checkLedger(sale); sold != 4 {
			t.Errorf("%s: sold %d, want 4", sale, sold)
		}
	}
}

// The scripts are on every primary once loaded, and again after a reload
// that follows the loss of every primary's cache: SCRIPT LOAD is sent to
// every node, not to one.
func TestScriptsOnEveryPrimary(t *testing.T) {
	g := startGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(when string) {
		t.Helper()
		var shas []string
		for _, s := range g.loader.Scripts() {
			shas = append(shas, s.SHA)
		}
		err := scripts.ForEachPrimary(ctx, g.rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
			have, err := node.ScriptExists(ctx, shas...).Result()
			if err != nil {
				return err
			}
			for i, ok := range have {
				if !ok {
					return fmt.Errorf("%s: script %s missing %s", addr, shas[i], when)
				}
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	check("after the first load")
	if err := scripts.ForEachPrimary(ctx, g.rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
		return node.ScriptFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	if r := g.do("POST", g.admin+"/admin/v1/scripts/reload", "", auth); r.code != 200 {
		t.Fatalf("reload: %d %s", r.code, r.raw)
	}
	check("after a reload")
}

// flushScriptsMeanwhile flushes the script cache of every primary (the one
// Redis) again and again, 2 ms apart, until the function it returns is
// called; that one returns how many rounds of flushes ran.
func flushScriptsMeanwhile(t *testing.T, g *testGateway) (stop func() int64) {
	var done atomic.Bool
	var rounds atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := scripts.ForEachPrimary(ctx, g.rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
				return node.ScriptFlush(ctx).Err()
			})
			cancel()
			if err != nil {
				t.Errorf("SCRIPT FLUSH: %v", err)
				return
			}
			rounds.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() int64 {
		done.Store(true)
		wg.Wait()
		return rounds.Load()
	}
}
