package main

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/retry"
)

// scrapeURL reads a Prometheus text page into series → value.
func scrapeURL(t *testing.T, url string) map[string]float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, res.StatusCode, raw)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s: bad line %q", url, line)
		}
		out[line[:i]] = v
	}
	return out
}

// The relay's and the consumer's series move with the orders that went
// through them, and both processes expose Go runtime and process metrics.
func TestPipelineMetrics(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	metricsAddr := freeAddr(t)
	s.start("consumer-metrics", []string{"FLASHGATE_CONSUMER_METRICS_ADDR=" + metricsAddr}, "consumer")
	s.createSale(g, "mx", 200, 1)
	b := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + g.public}, Sales: []string{"mx"}, Workers: 16, Users: 300})
	b.Wait()
	if accepted := b.Check()["mx"]; len(accepted) != 200 {
		t.Fatalf("%d accepted, want 200", len(accepted))
	}
	// The relay shows a sale's outbox while it holds entries and for 10 s
	// after the sale was written to, as of its last look (once a second):
	// right after the buys it is shown, entries or not.
	shown := false
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = retry.Until(sctx, poll, func(context.Context) error {
		if _, shown = scrapeURL(t, "http://"+g.admin+"/metrics")[`flashgate_outbox_pending{sale="mx"}`]; !shown {
			return errNotYet
		}
		return nil
	}, nil)
	s.waitDrained("mx", 2*time.Minute)

	// The consumer commits before it is counted, and the outbox series are
	// the relay's last sample of Redis: wait for the figures rather than
	// sleep (up to 30s; the checks below say what is missing).
	var cm, gm map[string]float64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = retry.Until(ctx, poll, func(context.Context) error {
		cm = scrapeURL(t, "http://"+metricsAddr+"/metrics")
		gm = scrapeURL(t, "http://"+g.admin+"/metrics")
		if cm["flashgate_consumer_inserted_total"] < 200 || gm[`flashgate_outbox_pending{sale="mx"}`] != 0 || gm["flashgate_outbox_pending_total"] != 0 {
			return errNotYet
		}
		return nil
	}, nil)
	checks := []struct {
		name string
		ok   bool
	}{
		{"gateway: 200 buys accepted", gm[`flashgate_buys_total{status="accepted"}`] == 200},
		{"relay: at least 200 confirms", gm["flashgate_relay_confirmed_total"] >= 200},
		// An outbox entry holds the orders of one reserve call; a message
		// those of several entries.
		{"relay: an entry removed per reserve call that accepted orders", gm["flashgate_relay_removed_total"] >= 1 && gm["flashgate_relay_removed_total"] <= gm["flashgate_reserve_calls_total"]},
		{"relay: messages carry the orders", gm["flashgate_relay_messages_total"] >= 1 && gm["flashgate_relay_messages_total"] <= gm["flashgate_relay_published_total"]},
		{"relay: connected", gm["flashgate_relay_connected"] == 1},
		{"relay: outbox of the sale shown right after its buys", shown},
		{"relay: every outbox empty", has(gm, "flashgate_outbox_pending_total", 0)},
		{"gateway: sale sold", gm[`flashgate_sale_sold{sale="mx"}`] == 200},
		{"gateway: runtime metrics", gm["go_goroutines"] > 0},
		{"consumer: 200 rows inserted", cm["flashgate_consumer_inserted_total"] == 200},
		{"consumer: at least the relay's messages delivered", cm["flashgate_consumer_deliveries_total"] >= gm["flashgate_relay_messages_total"]},
		{"consumer: at least 200 orders delivered", cm["flashgate_consumer_orders_total"] >= 200},
		{"consumer: batches observed", cm["flashgate_consumer_batches_total"] >= 1 && cm["flashgate_consumer_batch_size_count"] == cm["flashgate_consumer_batches_total"]},
		{"consumer: batch sizes add up", cm["flashgate_consumer_batch_size_sum"] >= 200},
		{"consumer: insert latency observed", cm["flashgate_consumer_insert_duration_seconds_count"] >= 1},
		{"consumer: nothing dead-lettered", cm["flashgate_consumer_dead_lettered_total"] == 0},
		{"consumer: runtime metrics", cm["go_goroutines"] > 0},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s", c.name)
		}
	}
	if t.Failed() {
		t.Logf("gateway: %v", gm)
		t.Logf("consumer: %v", cm)
	}
	// The consumer's profiles are on the same listener, as the gateway's
	// are on its admin listener.
	c := &http.Client{Timeout: 10 * time.Second}
	if code, body, err := httpDo(c, "GET", "http://"+metricsAddr+"/debug/pprof/profile?seconds=1", ""); err != nil || code != 200 || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("consumer CPU profile: %d %.40q %v", code, body, err)
	}
}

// has reports whether the series is present with value v (a missing series
// must not pass as zero).
func has(m map[string]float64, series string, v float64) bool {
	got, ok := m[series]
	return ok && got == v
}
