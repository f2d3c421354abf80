package relay

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// maxSaleSeries bounds the per-sale series of one scrape; beyond it the
// ranking of writeOutboxes picks the sales shown.
const maxSaleSeries = 500

// WriteMetrics writes the relay's counters, the outbox totals over every
// sale in the registry (flashgate_outbox_pending_total, the entries of all
// outboxes; flashgate_outbox_oldest_age_max_seconds, the oldest entry of
// any; flashgate_outbox_series_omitted, how many sales that would show had
// no per-sale series for the bound) and each shown sale's outbox series
// (flashgate_outbox_pending and flashgate_outbox_oldest_age_seconds,
// labelled sale). A sale's outbox series show while the sale is on or its
// outbox holds entries, at most maxSaleSeries of them: see writeOutboxes
// for which. It samples the outboxes for them (three rounds of pipelined
// Redis calls, bounded by 2s together): a scrape while Redis cannot answer
// in time has neither totals nor per-sale series, never totals over part
// of the sales. It is safe for concurrent use, with or without Run.
func (r *Relay) WriteMetrics(w io.Writer) {
	s := r.Stats()
	metrics.WriteCounterUint64(w, "flashgate_relay_messages_total", s.Messages)
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
	if smp, err := r.smp.take(ctx, true); err == nil && !smp.agesLost {
		writeOutboxes(w, smp)
	}
}

// writeOutboxes writes the outbox totals of smp and the per-sale series of
// the sales it ranks first, in sale order.
//
// The totals count every outbox, whatever its sale id, so that a stuck one
// shows even when no per-sale series names it. The ranking, when more than
// maxSaleSeries sales would show: the outboxes waiting longest first, by
// whole seconds of their oldest entry's age (a stuck outbox is one whose
// oldest entry keeps ageing, however few entries it holds; whole seconds
// keep the busy but healthy outboxes, all under a second, in a stable
// order), then those with most entries, then by sale id. As ties end at the
// id, the same sales show scrape after scrape while nothing changes.
func writeOutboxes(w io.Writer, smp *sample) {
	var (
		rows    []saleSample
		pending int64
		oldest  time.Duration
	)
	// The outboxes of a sale's buckets (gateway/buckets.go) are the sale's:
	// their entries and age go to its series, the home's, which has none
	// of its own.
	lanes := map[string]saleSample{}
	for _, s := range smp.sales {
		if sale, _, ok := scripts.SplitBucket(s.Sale); ok {
			l := lanes[sale]
			l.Pending += s.Pending
			l.OldestAge = max(l.OldestAge, s.OldestAge)
			lanes[sale] = l
		}
	}
	for _, s := range smp.sales {
		pending += s.Pending
		oldest = max(oldest, s.OldestAge)
		if l, ok := lanes[s.Sale]; ok {
			s.Pending += l.Pending
			s.OldestAge = max(s.OldestAge, l.OldestAge)
		}
		// An id outside the id rule (never made by the admin API; a
		// bucket's, counted in its sale's above) could break the
		// exposition format.
		if (s.live || s.Pending > 0) && order.ValidID(s.Sale) {
			rows = append(rows, s)
		}
	}
	omitted := 0
	if len(rows) > maxSaleSeries {
		slices.SortFunc(rows, func(a, b saleSample) int {
			return cmp.Or(
				cmp.Compare(b.OldestAge/time.Second, a.OldestAge/time.Second),
				cmp.Compare(b.Pending, a.Pending),
				strings.Compare(a.Sale, b.Sale))
		})
		omitted = len(rows) - maxSaleSeries
		rows = rows[:maxSaleSeries]
	}
	slices.SortFunc(rows, func(a, b saleSample) int { return strings.Compare(a.Sale, b.Sale) })
	b := []byte("# TYPE flashgate_outbox_pending_total gauge\nflashgate_outbox_pending_total ")
	b = strconv.AppendInt(b, pending, 10)
	b = append(b, "\n# TYPE flashgate_outbox_oldest_age_max_seconds gauge\nflashgate_outbox_oldest_age_max_seconds "...)
	b = strconv.AppendFloat(b, oldest.Seconds(), 'f', 3, 64)
	b = append(b, "\n# TYPE flashgate_outbox_series_omitted gauge\nflashgate_outbox_series_omitted "...)
	b = strconv.AppendInt(b, int64(omitted), 10)
	b = append(b, '\n')
	if len(rows) > 0 {
		b = append(b, "# TYPE flashgate_outbox_pending gauge\n"...)
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
