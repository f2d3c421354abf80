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
	return "# TYPE flashgate_outbox_pending_total gauge\nflashgate_outbox_pending_total " + strconv.Itoa(pending) + "\n" +
		"# TYPE flashgate_outbox_oldest_age_max_seconds gauge\nflashgate_outbox_oldest_age_max_seconds " + oldest + "\n" +
		"# TYPE flashgate_outbox_series_omitted gauge\nflashgate_outbox_series_omitted " + strconv.Itoa(omitted) + "\n"
}

func TestWriteOutboxes(t *testing.T) {
	now := time.Now()
	on := saleSample{SaleStats: SaleStats{Sale: "on"}, live: true}
	over := saleSample{SaleStats: SaleStats{Sale: "over"}}
	backlog := saleSample{SaleStats: SaleStats{Sale: "backlog", Pending: 3, OldestAge: 1500 * time.Millisecond}}
	bad := saleSample{SaleStats: SaleStats{Sale: `x"} 1`, Pending: 1, OldestAge: 9 * time.Second}, live: true}
	tests := []struct {
		name string
		smp  *sample
		want string
	}{
		{"nothing to show: the totals alone", &sample{at: now, sales: []saleSample{over}}, totals(0, "0.000", 0)},
		{"a sale on at zero, an ended one while it has entries, in sale order", &sample{at: now, sales: []saleSample{on, over, backlog}},
			totals(3, "1.500", 0) +
				"# TYPE flashgate_outbox_pending gauge\n" +
				`flashgate_outbox_pending{sale="backlog"} 3` + "\n" +
				`flashgate_outbox_pending{sale="on"} 0` + "\n" +
				"# TYPE flashgate_outbox_oldest_age_seconds gauge\n" +
				`flashgate_outbox_oldest_age_seconds{sale="backlog"} 1.500` + "\n" +
				`flashgate_outbox_oldest_age_seconds{sale="on"} 0.000` + "\n"},
		// Its series would break the page; its entries still count.
		{"an id outside the id rule has no series, but is in the totals", &sample{at: now, sales: []saleSample{bad}}, totals(1, "9.000", 0)},
		// A sale of buckets: its home's series carries its buckets'
		// entries and their oldest age; the buckets have none of their own.
		{"the buckets' outboxes in their sale's series", &sample{at: now, sales: []saleSample{
			{SaleStats: SaleStats{Sale: "hot"}, live: true},
			{SaleStats: SaleStats{Sale: "hot#0.0", Pending: 2, OldestAge: 300 * time.Millisecond}, live: true},
			{SaleStats: SaleStats{Sale: "hot#1.4", Pending: 5, OldestAge: 700 * time.Millisecond}, live: true},
		}},
			totals(7, "0.700", 0) +
				"# TYPE flashgate_outbox_pending gauge\n" +
				`flashgate_outbox_pending{sale="hot"} 7` + "\n" +
				"# TYPE flashgate_outbox_oldest_age_seconds gauge\n" +
				`flashgate_outbox_oldest_age_seconds{sale="hot"} 0.700` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			writeOutboxes(&b, tc.smp)
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
	smp := &sample{at: time.Now()}
	// Listed in reverse, so that the id order is the ranking's own work.
	for i := maxSaleSeries + 9; i >= 0; i-- {
		smp.sales = append(smp.sales, saleSample{SaleStats: SaleStats{Sale: fmt.Sprintf("s%04d", i), Pending: 2, OldestAge: 300 * time.Millisecond}, live: true})
	}
	quiet := saleSample{SaleStats: SaleStats{Sale: "quiet"}, live: true}
	stuck := saleSample{SaleStats: SaleStats{Sale: "stuck", Pending: 1, OldestAge: time.Hour}, live: true}
	busy := saleSample{SaleStats: SaleStats{Sale: "zbusy", Pending: 900, OldestAge: 200 * time.Millisecond}, live: true}
	smp.sales = append(smp.sales, quiet, stuck, busy)
	var b bytes.Buffer
	writeOutboxes(&b, smp)
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

// TestOutboxMetricsManySales is issue 12's finding 7: with 2,000 sales, a
// stuck outbox of one entry cannot hide behind busier ones. The scrape
// samples every outbox in chunked pipelines, and the totals count them all;
// the stuck outbox is in the top-N; and two scrapes of an unchanged Redis
// name the same sales. (Before: no totals, and the top-N by entries left
// the stuck sale out.)
func TestOutboxMetricsManySales(t *testing.T) {
	e := newEnv(t)
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
		ends := int64(0)
		if i%10 == 9 {
			ends = at - 1000 // over: shown only while it has entries
		}
		pipe.HSet(ctx, e.keys.Meta(sale), "stock", 5, "sold", 0, "ends", ends)
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
	r, err := New(e.cfg, Deps{Redis: e.rdb})
	if err != nil {
		t.Fatal(err)
	}

	p := page(r)
	got := shown(p)
	if len(got) != maxSaleSeries {
		t.Fatalf("%d sales shown, want %d", len(got), maxSaleSeries)
	}
	if !slices.Contains(got, "stuck") {
		t.Errorf("the stuck outbox (1 entry, an hour old) is not among the %d sales shown", maxSaleSeries)
	}
	// Shown: over ones with entries and live ones; an over one with none
	// is not counted at all.
	eligible := 1
	for i := range sales {
		if i%10 != 9 || i%4 > 0 {
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
}

// A scrape while Redis cannot answer has the relay's counters only: no
// totals computed over part of the sales, no per-sale series.
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
// backlog as it grows, with the series names and labels the dashboards use.
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
	meta("over", time.Now().Add(-time.Hour).UnixMilli())
	e.addOrders("backlog", 10) // no meta: shown for its entries alone
	r, _ := e.startRelay("r1")

	var p string
	waitFor(t, 10*time.Second, "no failed connection, or the outbox series do not show the backlog", func() bool {
		p = page(r)
		n, _ := value(p, `flashgate_outbox_pending{sale="backlog"}`)
		age, _ := value(p, `flashgate_outbox_oldest_age_seconds{sale="backlog"}`)
		errs, _ := value(p, "flashgate_relay_errors_total")
		return n == 10 && age > 0 && errs > 0
	})
	if v, ok := value(p, `flashgate_outbox_pending{sale="on"}`); !ok || v != 0 {
		t.Errorf("sale on: pending %v (shown %v), want 0 shown", v, ok)
	}
	if _, ok := value(p, `flashgate_outbox_oldest_age_seconds{sale="on"}`); !ok {
		t.Error("sale on: no oldest age series")
	}
	if strings.Contains(p, `"over"`) {
		t.Errorf("an ended sale with an empty outbox shows:\n%s", p)
	}
	if c, _ := value(p, "flashgate_relay_connected"); c != 0 {
		t.Errorf("connected %v without a broker", c)
	}

	// A scrape samples: it shows the outbox as it is now.
	e.addOrders("backlog", 5)
	if n, _ := value(page(r), `flashgate_outbox_pending{sale="backlog"}`); n != 15 {
		t.Errorf("pending %v right after 5 more entries, want 15", n)
	}
}
