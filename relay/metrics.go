package relay

import (
	"io"

	"github.com/VictoriaMetrics/metrics"
)

// WriteMetrics writes the relay's counters as Prometheus series. It is safe
// for concurrent use and does no I/O but the writes to w.
func (r *Relay) WriteMetrics(w io.Writer) {
	s := r.Stats()
	metrics.WriteCounterUint64(w, "flashgate_relay_published_total", s.Published)
	metrics.WriteCounterUint64(w, "flashgate_relay_confirmed_total", s.Confirmed)
	metrics.WriteCounterUint64(w, "flashgate_relay_removed_total", s.Removed)
	metrics.WriteCounterUint64(w, "flashgate_relay_nacked_total", s.Nacked)
	metrics.WriteCounterUint64(w, "flashgate_relay_returned_total", s.Returned)
	metrics.WriteCounterUint64(w, "flashgate_relay_lost_total", s.Lost)
	metrics.WriteCounterUint64(w, "flashgate_relay_claimed_total", s.Claimed)
	metrics.WriteCounterUint64(w, "flashgate_relay_malformed_total", s.Malformed)
	metrics.WriteCounterUint64(w, "flashgate_relay_reconnects_total", s.Reconnects)
	metrics.WriteCounterUint64(w, "flashgate_relay_errors_total", s.Errors)
	metrics.WriteGaugeUint64(w, "flashgate_relay_in_flight", uint64(max(s.InFlight, 0)))
	metrics.WriteGaugeUint64(w, "flashgate_relay_connected", gauge(s.Connected))
}

func gauge(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
