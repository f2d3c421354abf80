package gateway

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/order"
)

// The sweeper's pace. An order is expired at most about sweepTick (plus a
// sweep call) after its pay_by: well inside API.md's 2 s. Work per tick is
// bounded by sweepCalls calls of at most sweepBatch orders each, so a
// backlog (a gateway that was down, a crowd whose window ends at once) is
// worked off over a few ticks, never in one long burst that would hold
// Redis away from buyers.
const (
	sweepTick    = 250 * time.Millisecond
	sweepRefresh = time.Second
	sweepBatch   = 100
	sweepCalls   = 64
)

// sweeper expires the orders whose payment did not come in time. One runs
// in every gateway and none is in charge: the sweep script is atomic and
// idempotent, so two gateways sweeping the same sale at once expire each
// order once between them, and any one of them left running is enough.
//
// It does not look at every sale each tick. Once a second (sweepRefresh) it
// reads, for each sale ever given a payment window (Keys.Paying, a set
// Store.Upsert fills before the window exists), the pay_by of its earliest
// due order; each tick it sweeps only the sales whose earliest pay_by has
// come by Redis's clock, and each sweep answers the sale's next pay_by. A
// window is at least 1 s, so an order accepted after a refresh is due after
// the next one: no order is missed between refreshes.
//
// Its state belongs to the goroutine of run; the counters are atomic.
type sweeper struct {
	store *Store
	rdb   redis.UniversalClient
	log   *zap.Logger
	// timeout bounds each Redis call (redis.timeout).
	timeout time.Duration

	next   map[string]int64 // sale → pay_by of its earliest due order (Redis ms)
	offset int64            // Redis's clock minus ours, in ms
	failed bool             // the last call failed: a warning was logged

	set                    *metrics.Set
	lag                    *metrics.PrometheusHistogram
	calls, errors, expired atomic.Uint64
}

func newSweeper(store *Store, rdb redis.UniversalClient, log *zap.Logger, timeout time.Duration) *sweeper {
	set := metrics.NewSet()
	w := &sweeper{store: store, rdb: rdb, log: log, timeout: timeout, next: map[string]int64{}, set: set,
		lag: set.NewPrometheusHistogramExt("flashgate_sweep_lag_seconds",
			[]float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300})}
	set.RegisterMetricsWriter(func(out io.Writer) {
		metrics.WriteCounterUint64(out, "flashgate_sweep_calls_total", w.calls.Load())
		metrics.WriteCounterUint64(out, "flashgate_sweep_errors_total", w.errors.Load())
		metrics.WriteCounterUint64(out, "flashgate_sweep_expired_total", w.expired.Load())
	})
	return w
}

// run sweeps until ctx is done. It blocks; Redis failures are counted, and
// logged once until a call succeeds again, and the next tick tries again.
func (w *sweeper) run(ctx context.Context) {
	tick := time.NewTicker(sweepTick)
	defer tick.Stop()
	refresh := time.NewTicker(sweepRefresh)
	defer refresh.Stop()
	w.refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-refresh.C:
			w.refresh(ctx)
			w.settle(ctx)
		case <-tick.C:
			w.sweep(ctx)
		}
	}
}

// settle finishes the half-done stock moves of sales of several buckets
// (Store.settleMoves), bounded by a few Redis timeouts.
func (w *sweeper) settle(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 4*w.timeout)
	defer cancel()
	if err := w.store.settleMoves(sctx); err != nil && ctx.Err() == nil {
		w.log.Warn("cannot settle the stock moves of bucketed sales; retrying", zap.Error(err))
	}
}

// refresh reads the earliest pay_by of every sale in Keys.Paying, and
// Redis's clock.
func (w *sweeper) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	sales, err := w.rdb.SMembers(rctx, w.store.keys.Paying()).Result()
	if err != nil {
		w.fail(ctx, "refresh", err)
		return
	}
	if len(sales) == 0 {
		clear(w.next)
		w.ok()
		return
	}
	firsts := make([]*redis.ZSliceCmd, len(sales))
	var clock *redis.TimeCmd
	for lo := 0; lo < len(sales); lo += saleChunk {
		pipe := w.rdb.Pipeline()
		if lo == 0 {
			clock = pipe.Time(rctx)
		}
		for i := lo; i < min(len(sales), lo+saleChunk); i++ {
			firsts[i] = pipe.ZRangeWithScores(rctx, w.store.keys.Due(sales[i]), 0, 0)
		}
		local := time.Now()
		if _, err := pipe.Exec(rctx); err != nil {
			w.fail(ctx, "refresh", err)
			return
		}
		if lo == 0 {
			w.offset = clock.Val().UnixMilli() - local.UnixMilli()
		}
	}
	clear(w.next)
	for i, sale := range sales {
		if z := firsts[i].Val(); len(z) == 1 {
			w.next[sale] = int64(z[0].Score)
		}
	}
	w.ok()
}

// sweep expires what is due on the sales whose earliest pay_by has come,
// within sweepCalls calls: sales are served in turn, the most overdue
// first, and a sale with more due than one call takes is called again
// while calls are left.
func (w *sweeper) sweep(ctx context.Context) {
	now := time.Now().UnixMilli() + w.offset
	type due struct {
		sale string
		at   int64
	}
	var list []due
	for sale, at := range w.next {
		if at > 0 && at <= now {
			list = append(list, due{sale, at})
		}
	}
	if len(list) == 0 {
		return
	}
	slices.SortFunc(list, func(a, b due) int { return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.sale, b.sale)) })
	calls := 0
	for len(list) > 0 && calls < sweepCalls && ctx.Err() == nil {
		more := list[:0]
		for _, d := range list {
			if calls == sweepCalls {
				break
			}
			calls++
			again, err := w.sweepSale(ctx, d.sale)
			if err != nil {
				// Redis is likely down or slow: the next tick tries again,
				// rather than this one waiting out a timeout per sale.
				return
			}
			if again {
				more = append(more, d)
			}
		}
		list = more
	}
}

// sweepSale makes one sweep call on sale and reports whether more of it is
// due now.
func (w *sweeper) sweepSale(ctx context.Context, sale string) (again bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, w.timeout)
	res, err := w.store.Sweep(rctx, sale, sweepBatch)
	cancel()
	w.calls.Add(1)
	if err != nil {
		w.fail(ctx, "sweep", err, zap.String("sale_id", sale))
		return false, err
	}
	w.ok()
	w.offset = res.Now - time.Now().UnixMilli()
	w.next[sale] = res.Next
	if res.Next == 0 {
		delete(w.next, sale)
	}
	for _, e := range res.Expired {
		w.lag.Update(float64(res.Now-e.PayBy) / 1000)
	}
	w.expired.Add(uint64(len(res.Expired)))
	return res.Next > 0 && res.Next <= res.Now, nil
}

// fail counts a failed call and warns of the first of a run of them (a
// Redis that is down fails every tick).
func (w *sweeper) fail(ctx context.Context, op string, err error, fields ...zap.Field) {
	w.errors.Add(1)
	if ctx.Err() != nil || w.failed {
		return
	}
	w.failed = true
	w.log.Warn("payment sweep failed; retrying every tick", append(fields, zap.String("op", op), zap.Error(err))...)
}

func (w *sweeper) ok() { w.failed = false }

// paymentRow is one sale's payment figures, as a scrape reads them.
type paymentRow struct {
	id                                string
	pending, paid, cancelled, expired int64
	overdue                           int64 // ms since the earliest due pay_by; 0 when none is due
}

// writePaymentMetrics writes the sweeper's own series (calls, errors,
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
func (s *Server) writePaymentMetrics(w io.Writer) {
	s.sweeper.set.WritePrometheus(w)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	sales, err := s.rdb.SMembers(ctx, s.store.keys.Paying()).Result()
	if err != nil || len(sales) == 0 {
		return
	}
	metas := make([]*redis.SliceCmd, len(sales))
	firsts := make([]*redis.ZSliceCmd, len(sales))
	var clock *redis.TimeCmd
	for lo := 0; lo < len(sales); lo += saleChunk {
		pipe := s.rdb.Pipeline()
		if lo == 0 {
			clock = pipe.Time(ctx)
		}
		for i := lo; i < min(len(sales), lo+saleChunk); i++ {
			metas[i] = pipe.HMGet(ctx, s.store.keys.Meta(sales[i]), "stock", "pending", "paid", "cancelled", "expired")
			firsts[i] = pipe.ZRangeWithScores(ctx, s.store.keys.Due(sales[i]), 0, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return
		}
	}
	now := clock.Val().UnixMilli()
	read := func(i int) (paymentRow, bool) {
		v := metas[i].Val()
		if len(v) != 5 || v[0] == nil {
			return paymentRow{}, false // an id without a sale (see Store.Upsert)
		}
		r := paymentRow{id: sales[i], pending: num(v[1]), paid: num(v[2]), cancelled: num(v[3]), expired: num(v[4])}
		if z := firsts[i].Val(); len(z) == 1 {
			r.overdue = max(0, now-int64(z[0].Score))
		}
		return r, true
	}
	// A bucket's orders are its sale's (buckets.go): they go to the
	// sale's row, its home's, which holds none of its own.
	lanes := map[string]paymentRow{}
	for i, id := range sales {
		if sale, _, ok := laneSale(id); ok {
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
	b := []byte("# TYPE flashgate_sale_payment_orders gauge\n")
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
	b = append(b, "# TYPE flashgate_sale_payment_overdue_seconds gauge\n"...)
	for _, r := range rows {
		b = append(b, `flashgate_sale_payment_overdue_seconds{sale="`...)
		b = append(b, r.id...)
		b = append(b, `"} `...)
		b = strconv.AppendFloat(b, float64(r.overdue)/1000, 'f', 3, 64)
		b = append(b, '\n')
	}
	_, _ = w.Write(b)
}
