package relay

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
)

// page returns what the relay's WriteMetrics writes.
func page(r *Relay) string {
	var b bytes.Buffer
	r.WriteMetrics(&b)
	return b.String()
}

// value finds the line `series VALUE` in a Prometheus text page.
func value(page, series string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// totals is the head writeOutboxes always writes.
func totals(pending int, oldest string, omitted int) string {
	return "# HELP flashgate_outbox_pending_total\n# TYPE flashgate_outbox_pending_total gauge\nflashgate_outbox_pending_total " + strconv.Itoa(pending) + "\n" +
		"# HELP flashgate_outbox_oldest_age_max_seconds\n# TYPE flashgate_outbox_oldest_age_max_seconds gauge\nflashgate_outbox_oldest_age_max_seconds " + oldest + "\n" +
		"# HELP flashgate_outbox_series_omitted\n# TYPE flashgate_outbox_series_omitted gauge\nflashgate_outbox_series_omitted " + strconv.Itoa(omitted) + "\n"
}

func TestWriteOutboxes(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli()) // whole ms: the ages below are exact
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	quiet := known{sale: "quiet", active: now.Add(-time.Minute)}
	lately := known{sale: "lately", active: now.Add(-time.Second)}
	backlog := known{sale: "backlog", pending: 3, oldest: ago(1500 * time.Millisecond), active: now.Add(-time.Minute)}
	scanned := known{sale: "scanned", pending: 4, active: now} // found by the scan, not looked at yet
	bad := known{sale: `x"} 1`, pending: 1, oldest: ago(9 * time.Second), active: now}
	tests := []struct {
		name     string
		outboxes []known
		want     string
	}{
		{"nothing to show: the totals alone", []known{quiet}, totals(0, "0.000", 0)},
		{"a sale active lately at zero, an inactive one while it has entries, in sale order", []known{lately, quiet, backlog},
			totals(3, "1.500", 0) +
				"# HELP flashgate_outbox_pending\n# TYPE flashgate_outbox_pending gauge\n" +
				`flashgate_outbox_pending{sale="backlog"} 3` + "\n" +
				`flashgate_outbox_pending{sale="lately"} 0` + "\n" +
				"# HELP flashgate_outbox_oldest_age_seconds\n# TYPE flashgate_outbox_oldest_age_seconds gauge\n" +
				`flashgate_outbox_oldest_age_seconds{sale="backlog"} 1.500` + "\n" +
				`flashgate_outbox_oldest_age_seconds{sale="lately"} 0.000` + "\n"},
		{"entries whose age is not known yet", []known{scanned},
			totals(4, "0.000", 0) +
				"# HELP flashgate_outbox_pending\n# TYPE flashgate_outbox_pending gauge\n" +
				`flashgate_outbox_pending{sale="scanned"} 4` + "\n" +
				"# HELP flashgate_outbox_oldest_age_seconds\n# TYPE flashgate_outbox_oldest_age_seconds gauge\n" +
				`flashgate_outbox_oldest_age_seconds{sale="scanned"} 0.000` + "\n"},
		// Its series would break the page; its entries still count.
		{"an id outside the id rule has no series, but is in the totals", []known{bad}, totals(1, "9.000", 0)},
		// A sale of buckets: its home's series carries its buckets'
		// entries and their oldest age; the buckets have none of their
		// own, and the home shows though the relay never worked on its
		// own outbox.
		{"the buckets' outboxes in their sale's series", []known{
			{sale: "hot#0.0", pending: 2, oldest: ago(300 * time.Millisecond), active: now},
			{sale: "hot#1.4", pending: 5, oldest: ago(700 * time.Millisecond), active: now},
		},
			totals(7, "0.700", 0) +
				"# HELP flashgate_outbox_pending\n# TYPE flashgate_outbox_pending gauge\n" +
				`flashgate_outbox_pending{sale="hot"} 7` + "\n" +
				"# HELP flashgate_outbox_oldest_age_seconds\n# TYPE flashgate_outbox_oldest_age_seconds gauge\n" +
				`flashgate_outbox_oldest_age_seconds{sale="hot"} 0.700` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			writeOutboxes(&b, tc.outboxes, now, activeFor)
			if b.String() != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

// shown returns the sales that have a flashgate_outbox_pending series.
func shown(page string) []string {
	var out []string
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, `flashgate_outbox_pending{sale="`); ok {
			out = append(out, rest[:strings.IndexByte(rest, '"')])
		}
	}
	return out
}

// Past maxSaleSeries sales, the ones waiting longest show, then the ones
// with most entries, then by id; the others are counted as omitted.
func TestWriteOutboxesBound(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	var outboxes []known
	// Listed in reverse, so that the id order is the ranking's own work.
	for i := maxSaleSeries + 9; i >= 0; i-- {
		outboxes = append(outboxes, known{sale: fmt.Sprintf("s%04d", i), pending: 2, oldest: ago(300 * time.Millisecond), active: now})
	}
	outboxes = append(outboxes,
		known{sale: "quiet", active: now},
		known{sale: "stuck", pending: 1, oldest: ago(time.Hour), active: now},
		known{sale: "zbusy", pending: 900, oldest: ago(200 * time.Millisecond), active: now})
	var b bytes.Buffer
	writeOutboxes(&b, outboxes, now, activeFor)
	p := b.String()
	got := shown(p)
	if len(got) != maxSaleSeries {
		t.Fatalf("%d pending series, want %d", len(got), maxSaleSeries)
	}
	for _, want := range []string{"stuck", "zbusy", "s0000", fmt.Sprintf("s%04d", maxSaleSeries-3)} {
		if !slices.Contains(got, want) {
			t.Errorf("sale %s has no series", want)
		}
	}
	for _, hidden := range []string{"quiet", fmt.Sprintf("s%04d", maxSaleSeries-2)} {
		if slices.Contains(got, hidden) {
			t.Errorf("sale %s shows, though %d others rank before it", hidden, maxSaleSeries)
		}
	}
	for series, want := range map[string]float64{
		"flashgate_outbox_pending_total":          float64(2*(maxSaleSeries+10) + 1 + 900),
		"flashgate_outbox_oldest_age_max_seconds": 3600,
		"flashgate_outbox_series_omitted":         13,
	} {
		if v, ok := value(p, series); !ok || v != want {
			t.Errorf("%s = %v (shown %v), want %v", series, v, ok, want)
		}
	}
}

// runCtx marks the context of a relay's Run, so that a hook can tell the
// Redis calls of Run from any other.
type runCtx struct{}

// TestOutboxMetricsManySales is issue 12's finding 7, on what the relay
// knows (issue 18): with 2,000 sales, a stuck outbox of one entry cannot
// hide behind busier ones. Once the relay's scan has walked the registry
// and it has looked at what it found, the totals count every outbox with
// entries; the stuck outbox is in the top-N; two scrapes name the same
// sales; and a scrape makes no Redis call. The relay cannot reach
// RabbitMQ, so the entries stay. (Before: no totals, and the top-N by
// entries left the stuck sale out; then, each scrape read every sale's
// outbox and meta.)
func TestOutboxMetricsManySales(t *testing.T) {
	e := newEnv(t)
	away := *e.cfg                                    // a copy: the test's cleanup drops its topology on the real broker
	away.AMQP.URL = "amqp://guest:guest@127.0.0.1:1/" // nothing listens there
	e.cfg = &away
	ctx := context.Background()
	const sales = 2000
	// Entry ids at one fixed instant, so that every fresh outbox has the
	// same age and the ranking below the stuck one is by entries, then id.
	at := time.Now().UnixMilli()
	pipe := e.rdb.Pipeline()
	wantPending := 0
	entry := func(sale string, ms int64, seq int) {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: e.keys.Outbox(sale), ID: fmt.Sprintf("%d-%d", ms, seq), Values: []any{
			"order_id", sale + "-" + strconv.Itoa(seq), "sale_id", sale, "user_id", "u", "quantity", "1",
			"reserved_at", strconv.FormatInt(ms, 10)}})
		wantPending++
	}
	for i := range sales {
		sale := fmt.Sprintf("m%04d", i)
		pipe.HSet(ctx, e.keys.Meta(sale), "stock", 5, "sold", 0, "ends", 0)
		pipe.SAdd(ctx, e.keys.Sales(), sale)
		for j := range i % 4 { // 0 to 3 entries
			entry(sale, at, j)
		}
	}
	pipe.HSet(ctx, e.keys.Meta("stuck"), "stock", 5, "sold", 1, "ends", 0)
	pipe.SAdd(ctx, e.keys.Sales(), "stuck")
	entry("stuck", at-time.Hour.Milliseconds(), 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := localstack.NewRedis(nil)
	t.Cleanup(func() { _ = rdb.Close() })
	// The calls made on a context that is not Run's: a scrape's, if any.
	calls := &localstack.Calls{Match: func(ctx context.Context, _ redis.Cmder) bool { return ctx.Value(runCtx{}) == nil }}
	rdb.AddHook(calls)
	r, _ := e.startRelayWith(context.WithValue(ctx, runCtx{}, true), Deps{Redis: rdb}, nil)

	var p string
	localstack.WaitFor(t, 30*time.Second, "a full scan, and the stuck outbox looked at since", func() bool {
		p = page(r)
		age, _ := value(p, `flashgate_outbox_oldest_age_seconds{sale="stuck"}`)
		return r.Stats().Scans > 0 && age >= 3600
	})
	got := shown(p)
	if len(got) != maxSaleSeries {
		t.Fatalf("%d sales shown, want %d", len(got), maxSaleSeries)
	}
	if !slices.Contains(got, "stuck") {
		t.Errorf("the stuck outbox (1 entry, an hour old) is not among the %d sales shown", maxSaleSeries)
	}
	// Shown: the outboxes with entries (none was written to meanwhile).
	eligible := 1
	for i := range sales {
		if i%4 > 0 {
			eligible++
		}
	}
	if v, _ := value(p, "flashgate_outbox_pending_total"); v != float64(wantPending) {
		t.Errorf("pending total %v, want %d (every outbox)", v, wantPending)
	}
	if v, _ := value(p, "flashgate_outbox_oldest_age_max_seconds"); v < 3600 {
		t.Errorf("oldest age over all outboxes %vs, want at least an hour", v)
	}
	if v, _ := value(p, "flashgate_outbox_series_omitted"); v != float64(eligible-maxSaleSeries) {
		t.Errorf("omitted %v, want %d", v, eligible-maxSaleSeries)
	}
	// Below the stuck one: the 3-entry outboxes, by id.
	if !slices.Contains(got, "m0003") || slices.Contains(got, "m0002") {
		t.Errorf("the top-N is not by entries, then id: %v…", got[:5])
	}
	if again := shown(page(r)); !slices.Equal(again, got) {
		t.Errorf("a second scrape of the same Redis shows other sales")
	}
	if n := calls.N(); n != 0 {
		t.Errorf("%d Redis calls outside the relay's Run: the scrapes made them", n)
	}
}

// A relay that never ran (or cannot reach Redis) writes its counters only:
// no totals over part of the outboxes, no per-sale series.
func TestOutboxMetricsWithoutRedis(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // nothing listens there
	t.Cleanup(func() { _ = rdb.Close() })
	r, err := New(config.Default(), Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	p := page(r)
	if _, ok := value(p, "flashgate_relay_errors_total"); !ok {
		t.Errorf("no relay counters without Redis:\n%s", p)
	}
	if strings.Contains(p, "flashgate_outbox_") {
		t.Errorf("outbox series without Redis:\n%s", p)
	}
}

// TestOutboxMetricsWithoutRabbitMQ runs a relay that cannot reach RabbitMQ:
// its outbox series (the only ones: the gateway samples no outbox) show the
// backlog as it grows, with the series names and labels the dashboards use:
// an outbox with entries at start (found by the scan), a sale written to
// (at 0: its outbox is empty), and none for a sale nobody wrote to.
func TestOutboxMetricsWithoutRabbitMQ(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// A copy: the test's cleanup drops its topology on the real broker.
	away := *e.cfg
	away.AMQP.URL = "amqp://guest:guest@127.0.0.1:1/" // nothing listens there
	e.cfg = &away
	meta := func(sale string, ends int64) {
		if err := e.rdb.HSet(ctx, e.keys.Meta(sale), "stock", 5, "sold", 0, "ends", ends).Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.SAdd(ctx, e.keys.Sales(), sale).Err(); err != nil {
			t.Fatal(err)
		}
	}
	meta("on", 0)
	meta("idle", 0)
	e.addOrders("backlog", 10) // no meta: shown for its entries alone
	r, _ := e.startRelay("r1")
	r.Wrote("on") // as the gateway does after a write; its outbox is empty again

	var p string
	localstack.WaitFor(t, 10*time.Second, "a failed connection, and the outbox series showing the backlog", func() bool {
		p = page(r)
		n, _ := value(p, `flashgate_outbox_pending{sale="backlog"}`)
		age, _ := value(p, `flashgate_outbox_oldest_age_seconds{sale="backlog"}`)
		_, on := value(p, `flashgate_outbox_pending{sale="on"}`)
		errs, _ := value(p, "flashgate_relay_errors_total")
		return n == 10 && age > 0 && on && errs > 0
	})
	if v, ok := value(p, `flashgate_outbox_pending{sale="on"}`); !ok || v != 0 {
		t.Errorf("sale on: pending %v (shown %v), want 0 shown", v, ok)
	}
	if _, ok := value(p, `flashgate_outbox_oldest_age_seconds{sale="on"}`); !ok {
		t.Error("sale on: no oldest age series")
	}
	if strings.Contains(p, `"idle"`) {
		t.Errorf("a sale nobody wrote to, with an empty outbox, shows:\n%s", p)
	}
	if c, _ := value(p, "flashgate_relay_connected"); c != 0 {
		t.Errorf("connected %v without a broker", c)
	}

	// A write the relay is told of shows within a look.
	e.addOrders("backlog", 5)
	r.Wrote("backlog")
	localstack.WaitFor(t, 10*time.Second, "the 5 more entries showing", func() bool {
		n, _ := value(page(r), `flashgate_outbox_pending{sale="backlog"}`)
		return n == 15
	})
}
