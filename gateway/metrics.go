package gateway

import (
	"context"
	"io"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
)

// buyStatuses are the statuses a buy can answer, each with its counter.
var buyStatuses = []string{"accepted", "bad_request", "not_found", "not_started", "ended", "locked",
	"limit_reached", "sold_out", "insufficient_stock", "idempotency_conflict", "rate_limited", "unavailable", "too_large"}

// gatewayMetrics are the gateway's own series. Counters on the hot path are
// plain atomics; figures that other parts keep (scripts, batcher, Redis) are
// read when /metrics is scraped.
type gatewayMetrics struct {
	set          *metrics.Set
	buys         map[string]*metrics.Counter
	other        *metrics.Counter
	latency      *metrics.PrometheusHistogram
	batchSize    *metrics.PrometheusHistogram
	shortCircuit *metrics.Counter
}

func newGatewayMetrics(s *Server) *gatewayMetrics {
	set := metrics.NewSet()
	m := &gatewayMetrics{set: set, buys: map[string]*metrics.Counter{}}
	for _, st := range buyStatuses {
		m.buys[st] = set.NewCounter(`flashgate_buys_total{status="` + st + `"}`)
	}
	m.other = set.NewCounter(`flashgate_buys_total{status="other"}`)
	m.latency = set.NewPrometheusHistogramExt("flashgate_buy_duration_seconds",
		[]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5})
	m.batchSize = set.NewPrometheusHistogramExt("flashgate_reserve_batch_size",
		[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024})
	m.shortCircuit = set.NewCounter("flashgate_buys_short_circuit_total")
	set.RegisterMetricsWriter(func(w io.Writer) {
		st := s.loader.Stats()
		metrics.WriteCounterUint64(w, "flashgate_script_calls_total", st.Calls)
		metrics.WriteCounterUint64(w, "flashgate_script_errors_total", st.Errors)
		metrics.WriteCounterUint64(w, "flashgate_script_noscript_total", st.NoScript)
		metrics.WriteCounterUint64(w, "flashgate_script_reloads_total", st.Reloads)
		metrics.WriteCounterUint64(w, "flashgate_reserve_calls_total", s.batch.calls.Load())
		metrics.WriteCounterUint64(w, "flashgate_reserve_reservations_total", s.batch.reservations.Load())
		draining := 0.0
		if s.draining.Load() {
			draining = 1
		}
		metrics.WriteGaugeFloat64(w, "flashgate_draining", draining)
		s.writeSaleMetrics(w)
	})
	return m
}

func (m *gatewayMetrics) observeBuy(status string, start time.Time) {
	if c := m.buys[status]; c != nil {
		c.Inc()
	} else {
		m.other.Inc()
	}
	m.latency.UpdateDuration(start)
}

// maxSaleSeries bounds the per-sale series of one scrape.
const maxSaleSeries = 500

// writeSaleMetrics writes the remaining and sold units of the sales that are
// not over, read from Redis in one pipeline bounded by the Redis timeout. A
// scrape while Redis is down simply has no per-sale series. The outbox
// series of each sale are the relay's (relay.WriteMetrics, through
// Deps.Metrics): it samples every outbox anyway, and one sampler keeps the
// two from disagreeing.
func (s *Server) writeSaleMetrics(w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	sales, err := s.rdb.SRandMemberN(ctx, s.store.keys.Sales(), maxSaleSeries).Result()
	if err != nil || len(sales) == 0 {
		return
	}
	metas := make([]*redis.SliceCmd, len(sales))
	pipe := s.rdb.Pipeline()
	for i, sale := range sales {
		metas[i] = pipe.HMGet(ctx, s.store.keys.Meta(sale), "stock", "sold", "ends")
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return
	}
	now := time.Now()
	var b []byte
	for i, sale := range sales {
		vals := metas[i].Val()
		if len(vals) != 3 || vals[0] == nil {
			continue
		}
		stock, sold, ends := num(vals[0]), num(vals[1]), num(vals[2])
		if ends > 0 && now.UnixMilli() >= ends {
			continue
		}
		label := `{sale="` + sale + `"} `
		b = append(append(append(b, "flashgate_sale_remaining"...), label...), strconv.FormatInt(stock-sold, 10)...)
		b = append(append(append(append(b, '\n'), "flashgate_sale_sold"...), label...), strconv.FormatInt(sold, 10)...)
		b = append(b, '\n')
	}
	if len(b) > 0 {
		io.WriteString(w, "# TYPE flashgate_sale_remaining gauge\n# TYPE flashgate_sale_sold gauge\n")
		w.Write(b)
	}
}

func num(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
