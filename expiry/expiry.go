// Package expiry returns the units of unpaid orders: the sweeper that
// expires every order whose payment did not come by its pay_by, a job that
// runs in every gateway process beside the relay, and the payment figures
// of /metrics.
package expiry

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/scripts"
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

// Sweeper expires the orders whose payment did not come in time. One runs
// in every gateway process and none is in charge: the sweep script is atomic and
// idempotent, so two gateways sweeping the same sale at once expire each
// order once between them, and any one of them left running is enough.
//
// It does not look at every sale each tick. Once a second (sweepRefresh) it
// reads, for each sale ever given a payment window (Keys.Paying, a set
// sale.Store.Upsert fills before the window exists), the pay_by of its earliest
// due order; each tick it sweeps only the sales whose earliest pay_by has
// come by Redis's clock, and each sweep answers the sale's next pay_by. A
// window is at least 1 s, so an order accepted after a refresh is due after
// the next one: no order is missed between refreshes.
//
// Create it with New and run it with Run; its state belongs to the
// goroutine of Run, and WriteMetrics is safe to call beside it.
type Sweeper struct {
	rdb    redis.UniversalClient
	loader *scripts.Loader
	keys   scripts.Keys
	log    *zap.Logger
	// timeout bounds each Redis call (redis.timeout).
	timeout time.Duration
	wrote   func(id string)

	next   map[string]int64 // sale → pay_by of its earliest due order (Redis ms)
	offset int64            // Redis's clock minus ours, in ms
	failed bool             // the last call failed: a warning was logged

	set                    *metrics.Set
	lag                    *metrics.PrometheusHistogram
	calls, errors, expired atomic.Uint64
}

// Deps are what a Sweeper needs besides its clients.
type Deps struct {
	Log *zap.Logger
	// Timeout bounds each Redis call (redis.timeout); 0 is 2 s.
	Timeout time.Duration
	// Wrote, when set, is told after a sweep expired orders of id (a sale,
	// or a bucket of one), and so wrote to its outbox and gave units back
	// (relay.Relay.Wrote, sale.Store.Touch). It must not block.
	Wrote func(id string)
}

// New returns a Sweeper of the sales under keys, on the given client and
// loaded scripts.
func New(rdb redis.UniversalClient, loader *scripts.Loader, keys scripts.Keys, d Deps) *Sweeper {
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	if d.Timeout <= 0 {
		d.Timeout = 2 * time.Second
	}
	set := metrics.NewSet()
	w := &Sweeper{rdb: rdb, loader: loader, keys: keys, log: d.Log, timeout: d.Timeout, wrote: d.Wrote,
		next: map[string]int64{}, set: set,
		lag: set.NewPrometheusHistogramExt("flashgate_sweep_lag_seconds",
			[]float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300})}
	set.RegisterMetricsWriter(func(out io.Writer) {
		metrics.WriteCounterUint64(out, "flashgate_sweep_calls_total", w.calls.Load())
		metrics.WriteCounterUint64(out, "flashgate_sweep_errors_total", w.errors.Load())
		metrics.WriteCounterUint64(out, "flashgate_sweep_expired_total", w.expired.Load())
	})
	return w
}

// Run sweeps until ctx is done. It blocks; Redis failures are counted, and
// logged once until a call succeeds again, and the next tick tries again,
// so it has no error of its own: it returns nil once ctx is done.
func (w *Sweeper) Run(ctx context.Context) error {
	tick := time.NewTicker(sweepTick)
	defer tick.Stop()
	refresh := time.NewTicker(sweepRefresh)
	defer refresh.Stop()
	w.refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			w.refresh(ctx)
		case <-tick.C:
			w.sweep(ctx)
		}
	}
}

// refresh reads the earliest pay_by of every sale in Keys.Paying, and
// Redis's clock.
func (w *Sweeper) refresh(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	p, err := w.readPaying(rctx)
	if err != nil {
		w.fail(ctx, "refresh", err)
		return
	}
	if len(p.sales) > 0 {
		w.offset = p.clock - p.local
	}
	clear(w.next)
	for i, sale := range p.sales {
		if p.first[i] > 0 {
			w.next[sale] = p.first[i]
		}
	}
	w.ok()
}

// paying is one read of the sales ever given a payment window.
type paying struct {
	sales []string
	// clock is Redis's time, in Unix ms, read with the first pipeline; local
	// is ours when that pipeline was sent.
	clock, local int64
	first        []int64           // per sale: pay_by of its earliest order awaiting payment; 0: none
	meta         []*redis.SliceCmd // per sale, when fields were asked: those of its meta hash
}

// readPaying reads Keys.Paying, then Redis's clock, each sale's earliest
// due pay_by and, when fields are given, those fields of its meta hash, in
// pipelines of saleChunk sales, all bounded by ctx.
func (w *Sweeper) readPaying(ctx context.Context, fields ...string) (paying, error) {
	sales, err := w.rdb.SMembers(ctx, w.keys.Paying()).Result()
	if err != nil || len(sales) == 0 {
		return paying{}, err
	}
	p := paying{sales: sales, first: make([]int64, len(sales))}
	firsts := make([]*redis.ZSliceCmd, len(sales))
	if len(fields) > 0 {
		p.meta = make([]*redis.SliceCmd, len(sales))
	}
	for lo := 0; lo < len(sales); lo += saleChunk {
		pipe := w.rdb.Pipeline()
		var clock *redis.TimeCmd
		if lo == 0 {
			clock = pipe.Time(ctx)
		}
		for i := lo; i < min(len(sales), lo+saleChunk); i++ {
			if p.meta != nil {
				p.meta[i] = pipe.HMGet(ctx, w.keys.Meta(sales[i]), fields...)
			}
			firsts[i] = pipe.ZRangeWithScores(ctx, w.keys.Due(sales[i]), 0, 0)
		}
		local := time.Now()
		if _, err := pipe.Exec(ctx); err != nil {
			return paying{}, err
		}
		if clock != nil {
			p.clock, p.local = clock.Val().UnixMilli(), local.UnixMilli()
		}
	}
	for i, f := range firsts {
		if z := f.Val(); len(z) == 1 {
			p.first[i] = int64(z[0].Score)
		}
	}
	return p, nil
}

// sweep expires what is due on the sales whose earliest pay_by has come,
// within sweepCalls calls: sales are served in turn, the most overdue
// first, and a sale with more due than one call takes is called again
// while calls are left.
func (w *Sweeper) sweep(ctx context.Context) {
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
func (w *Sweeper) sweepSale(ctx context.Context, sale string) (again bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, w.timeout)
	res, err := w.sweepCall(rctx, sale, sweepBatch)
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
func (w *Sweeper) fail(ctx context.Context, op string, err error, fields ...zap.Field) {
	w.errors.Add(1)
	if ctx.Err() != nil || w.failed {
		return
	}
	w.failed = true
	w.log.Warn("payment sweep failed; retrying every tick", append(fields, zap.String("op", op), zap.Error(err))...)
}

func (w *Sweeper) ok() { w.failed = false }
