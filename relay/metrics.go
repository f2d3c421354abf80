package relay

import (
	"cmp"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/promtext"
	"github.com/flashgate/flashgate/scripts"
)

// maxSaleSeries bounds the per-sale series of one scrape; beyond it the
// ranking of writeOutboxes picks the sales shown.
const maxSaleSeries = 500

// WriteMetrics writes the relay's counters, the outbox totals
// (flashgate_outbox_pending_total, the entries of the outboxes the relay
// knows; flashgate_outbox_oldest_age_max_seconds, the oldest entry of any;
// flashgate_outbox_series_omitted, how many sales that would show had no
// per-sale series for the bound) and each shown sale's outbox series
// (flashgate_outbox_pending and flashgate_outbox_oldest_age_seconds,
// labelled sale). A sale's outbox series show while its outbox holds
// entries, and at 0 while it was active within the last 10s (written to,
// or seen with entries), at most maxSaleSeries of them: see writeOutboxes
// for which.
//
// It makes no Redis call: it writes what the relay last knew, so that a
// scrape costs nothing however many sales exist. An outbox this relay was
// told of is looked at once its entries have waited a second (held
// unconfirmed, or unread), and every second while it has entries: entries
// relayed within a second are never counted, a backlog is within two
// seconds; an outbox with entries that nobody told this relay of (another
// gateway's, a dead one's) is counted once the scan of the registry has
// found it, within Deps.ScanEvery. So the totals are
// those of every outbox within a scan cycle, and a stuck outbox always
// shows in them then. The ages are computed at the scrape, from the
// oldest entry's id (its Redis time); an outbox found by the scan has its
// age from the next look, a second later. Until the relay's first full
// scan has ended, while its last look at Redis or scan step failed, and
// when Run is not running, it writes no outbox series at all, rather than
// totals over part of the outboxes. It is safe for concurrent use.
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
	if v := r.last.Load(); v != nil && v.complete {
		writeOutboxes(w, v.sales, time.Now(), r.activeFor)
	}
}

// row is one sale's per-sale series: its outbox and its buckets'.
type row struct {
	sale    string
	pending int64
	age     time.Duration
	shown   bool
}

// writeOutboxes writes the outbox totals of outboxes at now and the
// per-sale series of the sales it ranks first, in sale order.
//
// The totals count every outbox, whatever its sale id, so that a stuck one
// shows even when no per-sale series names it. The ranking, when more than
// maxSaleSeries sales would show: the outboxes waiting longest first, by
// whole seconds of their oldest entry's age (a stuck outbox is one whose
// oldest entry keeps ageing, however few entries it holds; whole seconds
// keep the busy but healthy outboxes, all under a second, in a stable
// order), then those with most entries, then by sale id. As ties end at the
// id, the same sales show scrape after scrape while nothing changes.
func writeOutboxes(w io.Writer, outboxes []known, now time.Time, activeFor time.Duration) {
	var (
		pending int64
		oldest  time.Duration
	)
	// The outboxes of a sale's buckets (sale/buckets.go) are the sale's:
	// their entries and age go to its series, the home's, which has none
	// of its own.
	bySale := map[string]*row{}
	for _, k := range outboxes {
		age := k.age(now)
		pending += k.pending
		oldest = max(oldest, age)
		sale := scripts.SaleOf(k.sale)
		rw := bySale[sale]
		if rw == nil {
			rw = &row{sale: sale}
			bySale[sale] = rw
		}
		rw.pending += k.pending
		rw.age = max(rw.age, age)
		rw.shown = rw.shown || k.shown(now, activeFor)
	}
	var rows []row
	for _, rw := range bySale {
		// An id outside the id rule (never made by the admin API) could
		// break the exposition format.
		if rw.shown && order.ValidID(rw.sale) {
			rows = append(rows, *rw)
		}
	}
	omitted := 0
	if len(rows) > maxSaleSeries {
		slices.SortFunc(rows, func(a, b row) int {
			return cmp.Or(
				cmp.Compare(b.age/time.Second, a.age/time.Second),
				cmp.Compare(b.pending, a.pending),
				strings.Compare(a.sale, b.sale))
		})
		omitted = len(rows) - maxSaleSeries
		rows = rows[:maxSaleSeries]
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.sale, b.sale) })
	b := promtext.AppendMetadata(nil, "flashgate_outbox_pending_total", "gauge")
	b = append(b, "flashgate_outbox_pending_total "...)
	b = strconv.AppendInt(b, pending, 10)
	b = append(b, '\n')
	b = promtext.AppendMetadata(b, "flashgate_outbox_oldest_age_max_seconds", "gauge")
	b = append(b, "flashgate_outbox_oldest_age_max_seconds "...)
	b = strconv.AppendFloat(b, oldest.Seconds(), 'f', 3, 64)
	b = append(b, '\n')
	b = promtext.AppendMetadata(b, "flashgate_outbox_series_omitted", "gauge")
	b = append(b, "flashgate_outbox_series_omitted "...)
	b = strconv.AppendInt(b, int64(omitted), 10)
	b = append(b, '\n')
	if len(rows) > 0 {
		b = promtext.AppendMetadata(b, "flashgate_outbox_pending", "gauge")
		for _, rw := range rows {
			b = promtext.AppendSale(b, "flashgate_outbox_pending", rw.sale)
			b = strconv.AppendInt(b, rw.pending, 10)
			b = append(b, '\n')
		}
		b = promtext.AppendMetadata(b, "flashgate_outbox_oldest_age_seconds", "gauge")
		for _, rw := range rows {
			b = promtext.AppendSale(b, "flashgate_outbox_oldest_age_seconds", rw.sale)
			b = strconv.AppendFloat(b, rw.age.Seconds(), 'f', 3, 64)
			b = append(b, '\n')
		}
	}
	_, _ = w.Write(b)
}

func gauge(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
