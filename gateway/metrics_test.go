package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
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
		if strings.Contains(k, "user") {
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
