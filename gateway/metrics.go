package gateway

import (
	"io"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// buyStatuses are the statuses a buy can answer, each with its counter.
var buyStatuses = []string{"accepted", "bad_request", "not_found", "not_started", "ended", "locked",
	"limit_reached", "sold_out", "insufficient_stock", "idempotency_conflict", "rate_limited", "unavailable", "unconfirmed", "too_large",
	"unauthorized", "forbidden", "not_admitted"}

// gatewayMetrics are the gateway's own series. Counters on the hot path are
// plain atomics; figures that the loader keeps are read when /metrics is
// scraped. The sales' own series are package sale's (Deps.Metrics).
type gatewayMetrics struct {
	set          *metrics.Set
	buys         map[string]*metrics.Counter
	other        *metrics.Counter
	latency      *metrics.PrometheusHistogram
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
	m.shortCircuit = set.NewCounter("flashgate_buys_short_circuit_total")
	set.RegisterMetricsWriter(func(w io.Writer) {
		st := s.loader.Stats()
		metrics.WriteCounterUint64(w, "flashgate_script_calls_total", st.Calls)
		metrics.WriteCounterUint64(w, "flashgate_script_errors_total", st.Errors)
		metrics.WriteCounterUint64(w, "flashgate_script_noscript_total", st.NoScript)
		metrics.WriteCounterUint64(w, "flashgate_script_reloads_total", st.Reloads)
		metrics.WriteCounterUint64(w, "flashgate_script_held_sales_total", st.Held)
		if s.loader.Replicas() > 0 {
			ws := s.loader.WaitStats()
			metrics.WriteCounterUint64(w, "flashgate_replica_waits_total", ws.Calls)
			metrics.WriteCounterUint64(w, "flashgate_replica_unconfirmed_total", ws.Unconfirmed)
			metrics.WriteCounterFloat64(w, "flashgate_replica_wait_seconds_total", ws.Waited.Seconds())
		}
		draining := 0.0
		if s.draining.Load() {
			draining = 1
		}
		metrics.WriteGaugeFloat64(w, "flashgate_draining", draining)
		s.rooms.writeMetrics(w)
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
