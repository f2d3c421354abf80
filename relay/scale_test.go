package relay

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// The tests of issue 18's part 2: with 10,000 sales the relay's work
// follows the orders written, not the sales that exist.

// manySales is the shop of issue 18: the sales a test creates.
const manySales = 10_000

// saleID is the id of the i-th sale a test creates.
func saleID(i int) string { return fmt.Sprintf("m%05d", i) }

// createSales creates the sales from..from+n-1 as the admin API does, as
// far as the relay sees them (their meta and the registry), in pipelines
// of 1,000 sales, and no orders.
func createSales(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys, from, n int) error {
	for lo := from; lo < from+n; lo += 1000 {
		pipe := rdb.Pipeline()
		for i := lo; i < min(from+n, lo+1000); i++ {
			pipe.HSet(ctx, keys.Meta(saleID(i)), "stock", 100, "sold", 0, "limit", 1, "ends", 0)
			pipe.SAdd(ctx, keys.Sales(), saleID(i))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// ownRedis starts a redis-server of the test's own (no persistence), so
// that INFO commandstats counts the calls of the test's relays alone, and
// returns a client of it. Both are closed when the test ends.
func ownRedis(t *testing.T) *redis.Client {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("no redis-server on PATH (make up installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := localstack.StartRedisServer(ctx, localstack.RedisOptions{Dir: t.TempDir(),
		Args: []string{"--appendonly", "no", "--save", ""}})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() {
		_ = rdb.Close()
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	return rdb
}

// commandCalls reads INFO commandstats: calls by command ("xlen",
// "xgroup|create", …) since the last CONFIG RESETSTAT.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q", line)
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// TestIdleCostFollowsTheScan is issue 18's idle load: 10,000 live sales
// without orders and two relays (two gateways). Once their start-up scans
// have ended, their Redis calls over an idle window are those of the
// rolling scan alone, about 10,000 ÷ ScanEvery XLEN a second each, and
// none of them reads, looks at, claims from or creates the group of a sale
// without orders. (Before: SMEMBERS and 10,000 XLEN a second each, an
// XGROUP CREATE per sale at start, and the same again on every scrape.)
func TestIdleCostFollowsTheScan(t *testing.T) {
	e := newEnv(t)
	rdb := ownRedis(t)
	ctx := context.Background()
	if err := createSales(ctx, rdb, e.keys, 0, manySales); err != nil {
		t.Fatal(err)
	}
	const relays = 2
	var rs []*Relay
	for i := range relays {
		r, _ := e.startRelayWith(ctx, Deps{Redis: rdb, Name: "r" + strconv.Itoa(i)}, nil)
		rs = append(rs, r)
	}
	localstack.WaitFor(t, time.Minute, "the start-up scans ended", func() bool {
		for _, r := range rs {
			if r.Stats().Scans == 0 || !r.Stats().Connected {
				return false
			}
		}
		return true
	})
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// The window ends once the scans have looked at 3,000 outboxes, about
	// nine of their steps.
	localstack.WaitFor(t, time.Minute, "the rolling scans stepping", func() bool { return commandCalls(t, rdb)["xlen"] >= 3000 })
	calls := commandCalls(t, rdb)
	window := time.Since(start)
	delete(calls, "info") // the test's own
	var total int64
	var lines []string
	for cmd, n := range calls {
		total += n
		lines = append(lines, fmt.Sprintf("%s %d (%.1f/s)", cmd, n, float64(n)/window.Seconds()))
	}
	slices.Sort(lines)
	t.Logf("%d relays, %d sales, idle for %v: %d calls, %.1f/s: %s",
		relays, manySales, window.Round(time.Millisecond), total, float64(total)/window.Seconds(), strings.Join(lines, ", "))
	bound := window.Seconds() * relays * (manySales/scanEvery.Seconds() + 50)
	if float64(total) > bound {
		t.Errorf("%d Redis calls in %v, more than %.0f (%d relays × (%d sales ÷ %v + 50) a second)", total, window, bound, relays, manySales, scanEvery)
	}
	for _, cmd := range []string{"xgroup|create", "xreadgroup", "xrange", "xautoclaim", "smembers", "hmget"} {
		if calls[cmd] > 0 {
			t.Errorf("%d calls of %s for sales without orders", calls[cmd], cmd)
		}
	}
	for _, r := range rs {
		if s := r.Stats(); len(s.Sales) > 0 || s.Errors > 0 {
			t.Errorf("relay %s: %d outboxes known, %d errors; want none", r.Name(), len(s.Sales), s.Errors)
		}
	}
}

// TestNoticedOrderAmongManySales is issue 18's lag: among 10,000 sales,
// while 10,000 more are being created, an order the relay is told of
// (Wrote, as the gateway calls it) reaches the queue. The rolling scan is
// too slow to find it within the test (one walk a day, and no floor), so
// only the notice can bring it. (Before: the relay was 47s behind, creating the groups of
// the new sales one by one.)
func TestNoticedOrderAmongManySales(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := createSales(ctx, e.rdb, e.keys, 0, manySales); err != nil {
		t.Fatal(err)
	}
	r, _ := e.startRelayWith(ctx, Deps{Redis: e.rdb, Name: "r1", ScanEvery: 24 * time.Hour}, func(r *Relay) { r.sc.floor = 0 })
	localstack.WaitFor(t, time.Minute, "the start-up scan ended", func() bool { return r.Stats().Scans > 0 })
	created := make(chan error, 1)
	go func() { created <- createSales(ctx, e.rdb, e.keys, manySales, manySales) }()
	sale := saleID(4242)
	written := time.Now()
	ids := e.addOrders(sale, 1)
	r.Wrote(sale)
	e.received(ids, 30*time.Second)
	t.Logf("the order reached the queue %v after its write", time.Since(written).Round(time.Millisecond))
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty(sale) })
}

// TestScanFindsUnnoticedOrder: an order nobody told the relay of (its
// gateway died before its relay read it), written among 10,000 sales
// after the start-up scan, is found by the rolling scan and reaches the
// queue.
func TestScanFindsUnnoticedOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := createSales(ctx, e.rdb, e.keys, 0, manySales); err != nil {
		t.Fatal(err)
	}
	r, _ := e.startRelayWith(ctx, Deps{Redis: e.rdb, Name: "r1", ScanEvery: 2 * time.Second}, nil)
	localstack.WaitFor(t, time.Minute, "the start-up scan ended", func() bool { return r.Stats().Scans > 0 })
	sale := saleID(7777)
	ids := e.addOrders(sale, 3) // and no notice
	e.received(ids, 30*time.Second)
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty(sale) })
}

// TestQuietSalesLeave: an outbox the relay worked on leaves what it knows
// once it has been inactive for activeFor with no entry (bounded memory,
// and no more looks), and a new write it is told of brings it back (the
// scan, one walk a day and no floor, would not), without making its
// consumer group again: one XGROUP CREATE in the sale's life, however
// often the relay forgets it between its orders. (Before: one each time
// the relay met the sale again, an order each, for a sale selling slower
// than activeFor.)
func TestQuietSalesLeave(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rdb := localstack.NewRedis(nil)
	t.Cleanup(func() { _ = rdb.Close() })
	groups := &localstack.Calls{Match: func(_ context.Context, c redis.Cmder) bool { return c.Name() == "xgroup" }}
	rdb.AddHook(groups)
	r, _ := e.startRelayWith(ctx, Deps{Redis: rdb, Name: "r1", ScanEvery: 24 * time.Hour},
		func(r *Relay) { r.activeFor, r.sc.floor = 300*time.Millisecond, 0 })
	knows := func() []string {
		var out []string
		if v := r.last.Load(); v != nil {
			for _, k := range v.sales {
				out = append(out, k.sale)
			}
		}
		return out
	}
	for round := range 2 {
		ids := e.addOrders("q", 5)
		r.Wrote("q")
		e.received(ids, 30*time.Second)
		localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty("q") })
		localstack.WaitFor(t, 10*time.Second, fmt.Sprintf("round %d: the quiet sale forgotten", round), func() bool { return len(knows()) == 0 })
	}
	if n := groups.N(); n != 1 {
		t.Errorf("%d XGROUP calls over two rounds of one sale, want 1", n)
	}
}

// TestIdleAfterOrdersCostsNothing is issue 30's idle load: every sale of a
// shop takes one order, which the relay is told of, relays and removes;
// then nothing happens. While the relay waits for the next notice it makes
// no call about any of those outboxes (no look, no read, no claim), with one
// sale as with many: its calls meanwhile are the scan's alone (one walk a
// day and no floor here: one SCARD a step). (Before: each outbox that had
// taken an order was looked at every second and read every relay.poll for
// 10 s, so the idle relay's calls grew with the sales that sold lately.)
func TestIdleAfterOrdersCostsNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sales int
	}{
		{"one sale", 1},
		{"2000 sales", 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			if err := createSales(ctx, e.rdb, e.keys, 0, tc.sales); err != nil {
				t.Fatal(err)
			}
			rdb := localstack.NewRedis(nil)
			t.Cleanup(func() { _ = rdb.Close() })
			scans := &localstack.Calls{Match: func(_ context.Context, c redis.Cmder) bool { return c.Name() == "scard" }}
			others := &localstack.Calls{Match: func(_ context.Context, c redis.Cmder) bool { return c.Name() != "scard" }}
			rdb.AddHook(scans)
			rdb.AddHook(others)
			// Active for an hour: within the test, every outbox that
			// took an order is as if it had just been written to.
			r, _ := e.startRelayWith(ctx, Deps{Redis: rdb, Name: "r1", ScanEvery: 24 * time.Hour},
				func(r *Relay) { r.sc.floor, r.activeFor = 0, time.Hour })
			localstack.WaitFor(t, time.Minute, "the start-up scan ended", func() bool { return r.Stats().Scans > 0 })

			var ids []string
			for lo := 0; lo < tc.sales; lo += 1000 {
				pipe := e.rdb.Pipeline()
				for i := lo; i < min(tc.sales, lo+1000); i++ {
					id := saleID(i) + "-o-" + localstack.RandomHex(3)
					ids = append(ids, id)
					pipe.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox(saleID(i)), Values: []any{
						"order_id", id, "sale_id", saleID(i), "user_id", "u", "quantity", "1",
						"reserved_at", strconv.FormatInt(time.Now().UnixMilli(), 10)}})
				}
				if _, err := pipe.Exec(ctx); err != nil {
					t.Fatal(err)
				}
				for i := lo; i < min(tc.sales, lo+1000); i++ {
					r.Wrote(saleID(i))
				}
			}
			e.received(ids, time.Minute)
			localstack.WaitFor(t, time.Minute, "every entry removed, none pending as the relay knows", func() bool {
				s := r.Stats()
				if s.Removed < uint64(tc.sales) || s.Tracked > 0 {
					return false
				}
				for _, k := range s.Sales {
					if k.Pending > 0 {
						return false
					}
				}
				return true
			})
			// The window: three steps of the scan, after one more
			// (whatever the loop still had in hand is done by then).
			settled := scans.N()
			localstack.WaitFor(t, time.Minute, "a step of the scan", func() bool { return scans.N() > settled })
			others0, scans0 := others.N(), scans.N()
			localstack.WaitFor(t, time.Minute, "three steps of the scan", func() bool { return scans.N()-scans0 >= 3 })
			calls := others.N() - others0
			t.Logf("%d sales, idle after one order each: %d calls besides %d SCARD; %d outboxes active",
				tc.sales, calls, scans.N()-scans0, len(r.Stats().Sales))
			if calls > 0 {
				t.Errorf("%d calls about the outboxes of %d sales while nothing was written", calls, tc.sales)
			}
			if n := len(r.Stats().Sales); n != tc.sales {
				t.Errorf("%d outboxes active, want %d", n, tc.sales)
			}
		})
	}
}

// TestMissedNoticeStillRelayed: an outbox the relay was told of and
// emptied gets entries again with no notice (a notice lost with a restart
// of its gateway, or another process's write). No poll reads it; the scan
// of the registry finds it, and its orders reach the queue and leave the
// outbox.
func TestMissedNoticeStillRelayed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r, _ := e.startRelayWith(ctx, Deps{Redis: e.rdb, Name: "r1", ScanEvery: 2 * time.Second}, nil)
	ids := e.addOrders("s", 3)
	r.Wrote("s")
	e.received(ids, 30*time.Second)
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied", func() bool { return e.outboxEmpty("s") })
	scans := r.Stats().Scans
	missed := e.addOrders("s", 4) // and no notice
	e.received(missed, 30*time.Second)
	localstack.WaitFor(t, 10*time.Second, "the outbox emptied again", func() bool { return e.outboxEmpty("s") })
	t.Logf("found after %d more walks of the registry", r.Stats().Scans-scans)
}
