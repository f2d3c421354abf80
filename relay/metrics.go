package relay

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/VictoriaMetrics/metrics"

	"github.com/flashgate/flashgate/order"
)

// maxSaleSeries bounds the per-sale series of one scrape; beyond it the
// sales with the most pending entries are shown.
const maxSaleSeries = 500

// WriteMetrics writes the relay's counters and each sale's outbox series
// (flashgate_outbox_pending and flashgate_outbox_oldest_age_seconds,
// labelled sale) as Prometheus series. A sale's outbox series show while the
// sale is on or its outbox holds entries. It samples the outboxes for them
// (three Redis round trips, bounded by 2s): a scrape while Redis cannot
// answer has no per-sale series. It is safe for concurrent use, with or
// without Run.
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
	ctx, cancel := context.WithTimeout(context.Background(), redisCall)
	defer cancel()
	if smp, err := r.smp.take(ctx, true); err == nil {
		writeOutboxes(w, smp)
	}
}

// writeOutboxes writes the per-sale outbox series of smp, in sale order.
func writeOutboxes(w io.Writer, smp *sample) {
	var rows []saleSample
	for _, s := range smp.sales {
		// An id outside the id rule (never made by the admin API) could
		// break the exposition format.
		if (s.live || s.Pending > 0) && order.ValidID(s.Sale) {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	if len(rows) > maxSaleSeries {
		slices.SortFunc(rows, func(a, b saleSample) int {
			return cmp.Or(cmp.Compare(b.Pending, a.Pending), strings.Compare(a.Sale, b.Sale))
		})
		rows = rows[:maxSaleSeries]
	}
	slices.SortFunc(rows, func(a, b saleSample) int { return strings.Compare(a.Sale, b.Sale) })
	b := []byte("# TYPE flashgate_outbox_pending gauge\n")
	for _, s := range rows {
		b = appendSeries(b, "flashgate_outbox_pending", s.Sale)
		b = strconv.AppendInt(b, s.Pending, 10)
		b = append(b, '\n')
	}
	b = append(b, "# TYPE flashgate_outbox_oldest_age_seconds gauge\n"...)
	for _, s := range rows {
		b = appendSeries(b, "flashgate_outbox_oldest_age_seconds", s.Sale)
		b = strconv.AppendFloat(b, s.OldestAge.Seconds(), 'f', 3, 64)
		b = append(b, '\n')
	}
	_, _ = w.Write(b)
}

// appendSeries appends `name{sale="SALE"} `. A valid sale id needs no
// escaping: the id rule allows no quote or backslash.
func appendSeries(b []byte, name, sale string) []byte {
	b = append(b, name...)
	b = append(b, `{sale="`...)
	b = append(b, sale...)
	return append(b, `"} `...)
}

func gauge(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
