package expiry

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/promtext"
	"github.com/flashgate/flashgate/scripts"
)

// maxSaleSeries bounds the per-sale series of one scrape.
const maxSaleSeries = 500

// saleChunk is how many sales one pipeline asks about, so that a Redis
// holding many thousands of sales answers in pieces it can interleave with
// buyers.
const saleChunk = 500

// paymentRow is one sale's payment figures, as a scrape reads them.
type paymentRow struct {
	id                                string
	pending, paid, cancelled, expired int64
	overdue                           int64 // ms since the earliest due pay_by; 0 when none is due
}

// WriteMetrics writes the sweeper's own series (calls, errors,
// orders expired, and the lag of each expiry behind its pay_by:
// flashgate_sweep_lag_seconds) and, for at most maxSaleSeries sales ever
// given a payment window (those with most orders awaiting payment, then by
// id), the numbers of their orders awaiting payment, paid, cancelled and
// expired (flashgate_sale_payment_orders{sale,state}) and how far the
// earliest order still awaiting payment is past its pay_by
// (flashgate_sale_payment_overdue_seconds: what every gateway's sweepers
// together have not yet caught up with; it stays under 2 s while they
// work). The sale series read Redis, in pipelines of saleChunk sales all
// bounded by the Redis timeout; a scrape that cannot read them all has
// none.
func (s *Sweeper) WriteMetrics(w io.Writer) {
	s.set.WritePrometheus(w)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	p, err := s.readPaying(ctx, "stock", "pending", "paid", "cancelled", "expired")
	if err != nil || len(p.sales) == 0 {
		return
	}
	sales := p.sales
	read := func(i int) (paymentRow, bool) {
		v := p.meta[i].Val()
		if len(v) != 5 || v[0] == nil {
			return paymentRow{}, false // an id without a sale (see sale.Store.Upsert)
		}
		r := paymentRow{id: sales[i], pending: num(v[1]), paid: num(v[2]), cancelled: num(v[3]), expired: num(v[4])}
		if p.first[i] > 0 {
			r.overdue = max(0, p.clock-p.first[i])
		}
		return r, true
	}
	// A bucket's orders are its sale's (sale/buckets.go): they go to the
	// sale's row, its home's, which holds none of its own.
	lanes := map[string]paymentRow{}
	for i, id := range sales {
		if sale, _, ok := scripts.SplitBucket(id); ok {
			if r, ok := read(i); ok {
				l := lanes[sale]
				l.pending, l.paid, l.cancelled, l.expired = l.pending+r.pending, l.paid+r.paid, l.cancelled+r.cancelled, l.expired+r.expired
				l.overdue = max(l.overdue, r.overdue)
				lanes[sale] = l
			}
		}
	}
	rows := make([]paymentRow, 0, len(sales))
	for i, sale := range sales {
		r, ok := read(i)
		if !ok || !order.ValidID(sale) {
			continue
		}
		if l, ok := lanes[sale]; ok {
			r.pending, r.paid, r.cancelled, r.expired = r.pending+l.pending, r.paid+l.paid, r.cancelled+l.cancelled, r.expired+l.expired
			r.overdue = max(r.overdue, l.overdue)
		}
		rows = append(rows, r)
	}
	if len(rows) > maxSaleSeries {
		slices.SortFunc(rows, func(a, b paymentRow) int {
			return cmp.Or(cmp.Compare(b.pending, a.pending), strings.Compare(a.id, b.id))
		})
		rows = rows[:maxSaleSeries]
	}
	slices.SortFunc(rows, func(a, b paymentRow) int { return strings.Compare(a.id, b.id) })
	b := promtext.AppendMetadata(nil, "flashgate_sale_payment_orders", "gauge")
	for _, r := range rows {
		for _, st := range []struct {
			state string
			n     int64
		}{{order.StatePendingPayment, r.pending}, {order.StatePaid, r.paid},
			{order.StateCancelled, r.cancelled}, {order.StateExpired, r.expired}} {
			b = append(b, `flashgate_sale_payment_orders{sale="`...)
			b = append(b, r.id...)
			b = append(b, `",state="`...)
			b = append(b, st.state...)
			b = append(b, `"} `...)
			b = strconv.AppendInt(b, st.n, 10)
			b = append(b, '\n')
		}
	}
	b = promtext.AppendMetadata(b, "flashgate_sale_payment_overdue_seconds", "gauge")
	for _, r := range rows {
		b = promtext.AppendSale(b, "flashgate_sale_payment_overdue_seconds", r.id)
		b = strconv.AppendFloat(b, float64(r.overdue)/1000, 'f', 3, 64)
		b = append(b, '\n')
	}
	_, _ = w.Write(b)
}

// num reads an integer field of an HMGET reply; a missing one is 0.
func num(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
