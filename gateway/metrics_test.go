package gateway

import (
	"fmt"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/sale/saletest"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape reads /metrics into series name{labels} → value.
func (g *testGateway) scrape() map[string]float64 {
	g.t.Helper()
	res, err := g.client.Get(g.admin + "/metrics")
	if err != nil {
		g.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		g.t.Fatalf("/metrics: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			g.t.Fatalf("bad metrics line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetricsMove(t *testing.T) {
	g := startGateway(t)
	g.mustSale("mx", `{"stock":10,"per_user_limit":1}`)
	before := g.scrape()
	for i := 0; i < 25; i++ {
		g.buy("mx", fmt.Sprintf("u%d", i), 1, "")
	}
	g.buy("mx", "u0", 0, "") // bad request
	after := g.scrape()
	delta := func(k string) float64 { return after[k] - before[k] }
	checks := []struct {
		series string
		want   float64
	}{
		{`flashgate_buys_total{status="accepted"}`, 10},
		{`flashgate_buys_total{status="sold_out"}`, 15},
		{`flashgate_buys_total{status="bad_request"}`, 1},
		{`flashgate_buy_duration_seconds_count`, 26},
		{`flashgate_sale_remaining{sale="mx"}`, -10}, // 10 → 0
		{`flashgate_sale_sold{sale="mx"}`, 10},
	}
	for _, c := range checks {
		if d := delta(c.series); d != c.want {
			t.Errorf("%s moved by %v, want %v", c.series, d, c.want)
		}
	}
	if after["flashgate_reserve_reservations_total"] < 10 || after["flashgate_script_calls_total"] <= before["flashgate_script_calls_total"] {
		t.Errorf("script/reserve counters did not move: %v → %v", before["flashgate_script_calls_total"], after["flashgate_script_calls_total"])
	}
	if after["flashgate_reserve_batch_size_count"] == 0 {
		t.Errorf("no batch sizes observed")
	}
	if delta("flashgate_buys_short_circuit_total") == 0 {
		t.Errorf("sold-out buys were not answered from memory")
	}
	for k := range after {
		// A label naming users (the process's own
		// process_cpu_seconds_user_total is not one).
		if i := strings.IndexByte(k, '{'); i >= 0 && strings.Contains(k[i:], "user") {
			t.Errorf("a series names users: %s", k)
		}
		// One sampler of the outboxes: the relay's (relay.WriteMetrics,
		// which a gateway process adds through Deps.Metrics; its series
		// are tested in relay/metrics_test.go and, on a running gateway,
		// in cmd/flashgate's TestPipelineMetrics).
		if strings.HasPrefix(k, "flashgate_outbox_") {
			t.Errorf("the gateway samples the outbox itself: %s", k)
		}
	}
}

// saleSeries returns the sales with a flashgate_sale_sold series.
func saleSeries(m map[string]float64) []string {
	var out []string
	for k := range m {
		if rest, ok := strings.CutPrefix(k, `flashgate_sale_sold{sale="`); ok {
			out = append(out, strings.TrimSuffix(rest, `"}`))
		}
	}
	slices.Sort(out)
	return out
}

// TestSaleMetricsManySales is issue 12's finding 7 at the gateway: with
// 2,000 sales, /metrics has totals over all of them, and its per-sale
// series are a fixed top-N (most sold, then by id), the same on every
// scrape, rather than 500 random sales. (Before: no totals, and two
// scrapes named different sales.)
func TestSaleMetricsManySales(t *testing.T) {
	g := startGateway(t)
	const sales, over = 2000, 200
	past := time.Now().Add(-time.Hour).UTC()
	saletest.Burst(sales, 32, func(i int) {
		body := `{"stock":10,"per_user_limit":10}`
		if i < over {
			body = `{"stock":10,"per_user_limit":10,"starts_at":"` + past.Add(-time.Hour).Format(time.RFC3339) +
				`","ends_at":"` + past.Format(time.RFC3339) + `"}`
		}
		if r := g.put(fmt.Sprintf("s%04d", i), body); r.code != 201 {
			t.Errorf("create sale %d: %d %s", i, r.code, r.raw)
		}
	})
	// The busiest sales sort last by id: only a ranking by sales shows them.
	hot := []string{"s1997", "s1998", "s1999"}
	for n, sale := range hot {
		for u := range n + 1 {
			if r := g.buy(sale, "u"+itoa(u), 1, ""); r.code != 202 {
				t.Fatalf("buy in %s: %d %s", sale, r.code, r.raw)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	m := g.scrape()
	for series, want := range map[string]float64{
		"flashgate_sales":               sales,
		"flashgate_sales_live":          sales - over,
		"flashgate_sale_series_omitted": sales - over - sale.MaxSaleSeries,
	} {
		if v, ok := m[series]; !ok || v != want {
			t.Errorf("%s = %v (shown %v), want %v", series, v, ok, want)
		}
	}
	shown := saleSeries(m)
	if len(shown) != sale.MaxSaleSeries {
		t.Fatalf("%d sales shown, want %d", len(shown), sale.MaxSaleSeries)
	}
	for _, sale := range hot {
		if !slices.Contains(shown, sale) {
			t.Errorf("sale %s, among the most sold, has no series", sale)
		}
	}
	// Then by id, over sales excluded: s0200 on.
	if shown[0] != fmt.Sprintf("s%04d", over) || shown[sale.MaxSaleSeries-4] != fmt.Sprintf("s%04d", over+sale.MaxSaleSeries-4) {
		t.Errorf("below the hot sales, not the first live ids: %v … %v", shown[:3], shown[sale.MaxSaleSeries-4:])
	}
	if v := m[`flashgate_sale_sold{sale="s1999"}`]; v != 3 {
		t.Errorf("sold of s1999 %v, want 3", v)
	}
	if again := saleSeries(g.scrape()); !slices.Equal(again, shown) {
		t.Errorf("a second scrape of the same sales shows other sales")
	}
}
