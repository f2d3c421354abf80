// Package repair gives a Redis that came back without its last writes what
// MySQL knows of them, before its sales sell again.
//
// Redis with appendfsync everysec may lose up to a second of writes when its
// machine crashes, and a replica promoted by a failover lags its primary;
// meanwhile the orders of those writes may have reached MySQL already. Redis
// would then sell their units again and replay their idempotency keys into
// new orders. The scripts package holds every sale whose Redis run id
// changed since it was last checked (the hold script, run before every
// SCRIPT LOAD): a held sale refuses buyers with 503 until a Repairer has
// released it.
//
// A Repairer runs in every consumer process. It watches the Held set; when
// sales are held it first waits until the orders queue is drained (an order
// forgotten by Redis but still on its way to MySQL would otherwise be missed),
// then, per sale, reads the orders whose latest event MySQL holds is newer
// than Redis's event count (meta seq; every outbox entry carries its number,
// and MySQL keeps the largest per order) and applies them with the repair
// script: their records, units, buyers' units, pending payments and
// idempotency keys, atomically with buyers. The last call releases the sale.
// Any number of Repairers may work at once: the script changes nothing on a
// sale no longer held.
package repair

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/scripts"
)

// Defaults of Config's zero fields.
const (
	// DefaultPoll is how often the Held set is read.
	DefaultPoll = 500 * time.Millisecond
	// DefaultGrace is how long the orders queue must stay empty, and MySQL's
	// count of a held sale's events unchanged, before the sale is repaired:
	// longer than a consumer holds a delivery before its transaction
	// commits.
	DefaultGrace = 2 * time.Second
	// DefaultPassEvery is how often a hold pass runs, to find a sale held by
	// a process that died before it could list the sale in the Held set.
	DefaultPassEvery = time.Minute
	// chunk is how many orders one repair script call applies.
	chunk = 500
)

// Config tunes a Repairer; zero fields take the defaults.
type Config struct {
	Poll, Grace, PassEvery time.Duration
	// Timeout bounds each Redis and MySQL call (default 5 s).
	Timeout time.Duration
}

// Deps are what a Repairer works with.
type Deps struct {
	Redis  redis.UniversalClient
	DB     *sql.DB
	Loader *scripts.Loader
	Keys   scripts.Keys
	// Ready returns the number of messages ready in the orders queue
	// (AMQP passive declare). The Repairer asks it only while sales are held.
	Ready func(ctx context.Context) (int, error)
	Log   *zap.Logger
}

// Stats counts what a Repairer did.
type Stats struct {
	Repaired uint64 // sales released
	Restored uint64 // orders whose state in Redis a repair changed (restored or moved on)
	Raised   uint64 // units of stock raised to cover what MySQL holds as sold
	Errors   uint64
}

// Repairer releases held sales; see the package doc.
type Repairer struct {
	cfg Config
	d   Deps

	repaired, restored, raised, errs atomic.Uint64
	waiting                          time.Time // the last "waiting for the queue" log, for its rate
}

// New returns a Repairer; Run starts it.
func New(cfg Config, d Deps) (*Repairer, error) {
	if d.Redis == nil || d.DB == nil || d.Loader == nil || d.Ready == nil {
		return nil, errors.New("repair: Redis, DB, Loader and Ready are required")
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.PassEvery <= 0 {
		cfg.PassEvery = DefaultPassEvery
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Repairer{cfg: cfg, d: d}, nil
}

// Stats returns the counters since start.
func (r *Repairer) Stats() Stats {
	return Stats{Repaired: r.repaired.Load(), Restored: r.restored.Load(), Raised: r.raised.Load(), Errors: r.errs.Load()}
}

// WriteMetrics writes the Repairer's counters in Prometheus text format.
func (r *Repairer) WriteMetrics(w io.Writer) {
	s := r.Stats()
	metrics.WriteCounterUint64(w, "flashgate_repair_sales_total", s.Repaired)
	metrics.WriteCounterUint64(w, "flashgate_repair_orders_total", s.Restored)
	metrics.WriteCounterUint64(w, "flashgate_repair_stock_raised_units_total", s.Raised)
	metrics.WriteCounterUint64(w, "flashgate_repair_errors_total", s.Errors)
}

// Run works until ctx ends, then returns nil. A failure is logged and tried
// again at the next poll; nothing it does is lost by stopping it at any
// instant (a sale stays held until a last call releases it).
func (r *Repairer) Run(ctx context.Context) error {
	tick := time.NewTicker(r.cfg.Poll)
	defer tick.Stop()
	lastPass := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if time.Since(lastPass) >= r.cfg.PassEvery {
			lastPass = time.Now()
			pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
			if _, err := r.d.Loader.HoldPass(pctx); err != nil && ctx.Err() == nil {
				r.errs.Add(1)
				r.d.Log.Warn("hold pass failed; trying again later", zap.Error(err))
			}
			cancel()
		}
		if err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.errs.Add(1)
			r.d.Log.Warn("repair of held sales failed; trying again", zap.Error(err))
		}
	}
}

// Once repairs the sales held now, if the orders queue is drained; it blocks
// for the grace period while sales are held, and returns the first error.
func (r *Repairer) Once(ctx context.Context) error {
	held, err := r.held(ctx)
	if err != nil || len(held) == 0 {
		return err
	}
	drained, err := r.drained(ctx, held)
	if err != nil || !drained {
		return err
	}
	for _, sale := range held {
		if err := r.Sale(ctx, sale); err != nil {
			return err
		}
	}
	return nil
}

func (r *Repairer) held(ctx context.Context) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	held, err := r.d.Redis.SMembers(cctx, r.d.Keys.Held()).Result()
	if err != nil {
		return nil, fmt.Errorf("repair: read held sales: %w", err)
	}
	// The buckets of a sale of several (gateway/buckets.go, ids "SALE#i.n")
	// before the homes: a home's repair counts what its buckets hold once
	// they are repaired.
	slices.SortFunc(held, func(a, b string) int {
		la, lb := strings.Contains(a, "#"), strings.Contains(b, "#")
		if la != lb {
			if la {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return held, nil
}

// laneOf splits a bucket id "SALE#i.n" into its sale and the suffix its
// orders' ids end in, ".i"; ok is false for a sale id.
func laneOf(id string) (sale, suffix string, ok bool) {
	sale, b, ok := scripts.SplitBucket(id)
	if !ok {
		return id, "", false
	}
	return sale, "." + strconv.Itoa(b), true
}

// drained reports whether the orders queue had nothing ready at two looks a
// grace apart, with MySQL's event count of every held sale unchanged between
// them: what was on its way to MySQL when Redis went back has arrived.
func (r *Repairer) drained(ctx context.Context, held []string) (bool, error) {
	look := func() (int, []int64, error) {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
		n, err := r.d.Ready(cctx)
		if err != nil {
			return 0, nil, fmt.Errorf("repair: orders queue depth: %w", err)
		}
		seqs := make([]int64, len(held))
		for i, sale := range held {
			mysqlSale, _, _ := laneOf(sale)
			if seqs[i], err = orderdb.MaxSeq(cctx, r.d.DB, mysqlSale); err != nil {
				return 0, nil, fmt.Errorf("repair: sale %s: %w", sale, err)
			}
		}
		return n, seqs, nil
	}
	n1, s1, err := look()
	if err != nil {
		return false, err
	}
	if n1 == 0 {
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(r.cfg.Grace):
		}
	}
	n2, s2, err := look()
	if err != nil {
		return false, err
	}
	if n1 == 0 && n2 == 0 && slices.Equal(s1, s2) {
		return true, nil
	}
	if time.Since(r.waiting) >= 10*time.Second {
		r.waiting = time.Now()
		r.d.Log.Info("sales held after a Redis restart wait for the orders queue to drain before their repair",
			zap.Strings("sales", held), zap.Int("ready", n2))
	}
	return false, nil
}

// Sale repairs one held sale: it gives Redis the orders of the sale whose
// latest event MySQL holds and Redis has not counted, then releases it. A
// sale not held, or gone, is only taken off the Held set.
func (r *Repairer) Sale(ctx context.Context, sale string) error {
	k := r.d.Keys
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	m, err := r.d.Redis.HMGet(cctx, k.Meta(sale), "hold", "seq", "buckets").Result()
	cancel()
	if err != nil {
		return fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	if h, _ := m[0].(string); h != "1" {
		return r.release(ctx, sale)
	}
	if b, _ := m[2].(string); b != "" && b != "1" {
		return r.home(ctx, sale)
	}
	// A bucket's orders are the rows of its sale whose ids end in its
	// suffix; their seq counts the bucket's events, so rows of the other
	// buckets are skipped, and seq set to the sale's largest is only ahead.
	mysqlSale, suffix, lane := laneOf(sale)
	var rseq int64
	if s, _ := m[1].(string); s != "" {
		if rseq, err = strconv.ParseInt(s, 10, 64); err != nil {
			return fmt.Errorf("repair: sale %s: meta seq %q", sale, s)
		}
	}
	cctx, cancel = context.WithTimeout(ctx, r.cfg.Timeout)
	maxSeq, err := orderdb.MaxSeq(cctx, r.d.DB, mysqlSale)
	cancel()
	if err != nil {
		return fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	var changed, raised int64
	seq, afterID := rseq, ""
	for {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		page, err := orderdb.After(cctx, r.d.DB, mysqlSale, seq, afterID, chunk)
		cancel()
		if err != nil {
			return fmt.Errorf("repair: sale %s: %w", sale, err)
		}
		last := len(page) < chunk
		rows := page
		if lane {
			rows = slices.DeleteFunc(slices.Clone(page), func(o order.Order) bool { return !strings.HasSuffix(o.OrderID, suffix) })
		}
		applied, c, rs, err := r.apply(ctx, sale, rows, last, maxSeq)
		if err != nil {
			return err
		}
		if !applied {
			break // released by another repairer
		}
		changed += c
		raised += rs
		if last {
			r.repaired.Add(1)
			r.restored.Add(uint64(changed))
			r.raised.Add(uint64(raised))
			r.d.Log.Info("repaired a sale held after a Redis restart", zap.String("sale", sale),
				zap.Int64("redis_seq", rseq), zap.Int64("mysql_seq", maxSeq), zap.Int64("orders_restored", changed),
				zap.Int64("stock_raised", raised))
			if raised > 0 {
				r.d.Log.Warn("MySQL holds more units of the sale than its stock in Redis (a restock lost with Redis's last writes?); stock raised to the units sold",
					zap.String("sale", sale), zap.Int64("by", raised))
			}
			break
		}
		seq, afterID = page[len(page)-1].Seq, page[len(page)-1].OrderID
	}
	return r.release(ctx, sale)
}

// home repairs the held home of a sale of several buckets, which holds no
// order but moved, the units its buckets were handed. A Redis that lost its
// last writes may have lost takes from the pool that its buckets still hold
// (the buckets on other primaries, or repaired from MySQL just before): a
// moved too small would let the pool hand the same units out twice. So
// moved is counted again from what it stands for, while the held home
// refuses every take and accept (move.lua): the buckets' stock, the takes
// recorded in the home whose credit has not run, and the gives recorded in
// the buckets whose accept has not. The reads go in the order that can only
// count a unit moving meanwhile twice, never miss it: a twice-counted unit
// is one the pool keeps back, a missed one would be sold twice.
func (r *Repairer) home(ctx context.Context, sale string) error {
	k := r.d.Keys
	cctx, cancel := context.WithTimeout(ctx, 4*r.cfg.Timeout)
	defer cancel()
	meta, err := r.d.Redis.HMGet(cctx, k.Meta(sale), "names", "stock", "moved").Result()
	if err != nil {
		return fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	list, _ := meta[0].(string)
	names := scripts.BucketNames(list)
	if names == nil {
		return fmt.Errorf("repair: sale %s: buckets without names", sale)
	}
	var moved int64
	// 1. Takes not credited: the record in the home, no op key in the bucket.
	takes, err := r.d.Redis.HGetAll(cctx, k.Moves(sale)).Result()
	if err != nil {
		return fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	for id, rec := range takes {
		m, err := scripts.ParseMove(rec)
		if err != nil || !m.Take || m.Bucket >= len(names) {
			return fmt.Errorf("repair: sale %s: move record %s = %q", sale, id, rec)
		}
		done, err := r.d.Redis.Exists(cctx, k.Op(names[m.Bucket], id)).Result()
		if err != nil {
			return fmt.Errorf("repair: sale %s: %w", sale, err)
		}
		if done == 0 {
			moved += m.Units
		}
	}
	// 2. The buckets' stock.
	for _, lane := range names {
		st, err := r.d.Redis.HGet(cctx, k.Meta(lane), "stock").Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("repair: sale %s: bucket %s: %w", sale, lane, err)
		}
		moved += st
	}
	// 3. Gives not accepted: the record in a bucket, no op key in the home.
	for _, lane := range names {
		gives, err := r.d.Redis.HGetAll(cctx, k.Moves(lane)).Result()
		if err != nil {
			return fmt.Errorf("repair: sale %s: %w", sale, err)
		}
		for id, rec := range gives {
			m, err := scripts.ParseMove(rec)
			if err != nil || m.Take {
				return fmt.Errorf("repair: sale %s: move record %s = %q", sale, id, rec)
			}
			done, err := r.d.Redis.Exists(cctx, k.Op(sale, id)).Result()
			if err != nil {
				return fmt.Errorf("repair: sale %s: %w", sale, err)
			}
			if done == 0 {
				moved += m.Units
			}
		}
	}
	stock, _ := strconv.ParseInt(fmt.Sprint(meta[1]), 10, 64)
	before, _ := strconv.ParseInt(fmt.Sprint(meta[2]), 10, 64)
	fields := []any{"moved", moved}
	if moved > stock {
		// Units the buckets hold that the home's stock lost (a restock lost
		// with the same writes): they were offered, and may be sold.
		fields = append(fields, "stock", moved)
		r.raised.Add(uint64(moved - stock))
		r.d.Log.Warn("the buckets of a sale hold more units than its stock in Redis (a restock lost with Redis's last writes?); stock raised to them",
			zap.String("sale", sale), zap.Int64("by", moved-stock))
	}
	if err := r.d.Redis.HSet(cctx, k.Meta(sale), fields...).Err(); err != nil {
		return fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	// The release: the repair script's last call, with no orders.
	if _, _, _, err := r.apply(ctx, sale, nil, true, 0); err != nil {
		return err
	}
	r.repaired.Add(1)
	r.d.Log.Info("repaired the home of a bucketed sale held after a Redis restart", zap.String("sale", sale),
		zap.Int64("moved_before", before), zap.Int64("moved", moved))
	return r.release(ctx, sale)
}

func (r *Repairer) release(ctx context.Context, sale string) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if err := r.d.Redis.SRem(cctx, r.d.Keys.Held(), sale).Err(); err != nil {
		return fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	return nil
}

// apply runs the repair script on rows; applied is false when the sale was
// not held (any more).
func (r *Repairer) apply(ctx context.Context, sale string, rows []order.Order, last bool, maxSeq int64) (applied bool, changed, raised int64, err error) {
	k := r.d.Keys
	keys := []string{k.Meta(sale), k.Users(sale), k.Orders(sale), k.Due(sale)}
	lastArg := "0"
	if last {
		lastArg = "1"
	}
	args := make([]any, 0, 5+7*len(rows))
	announced, _, _ := laneOf(sale) // a bucket's release is its sale's news
	args = append(args, k.Events(), announced, lastArg, maxSeq, int64(scripts.IdemTTL/time.Second))
	for _, o := range rows {
		ik := 0
		if o.IdemKey != "" {
			keys = append(keys, k.Idem(sale, o.IdemKey))
			ik = len(keys)
		}
		var payBy int64
		if !o.PayBy.IsZero() {
			payBy = o.PayBy.UnixMilli()
		}
		letter := scripts.StateLetter(o.State)
		if letter == "" {
			return false, 0, 0, fmt.Errorf("repair: sale %s: order %s has state %q", sale, o.OrderID, o.State)
		}
		args = append(args, o.OrderID, o.UserID, o.Quantity, letter, payBy, o.ReservedAt.UnixMilli(), ik)
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	v, err := r.d.Loader.Run(cctx, scripts.Repair, keys, args...)
	if errors.Is(err, scripts.ErrNotLoaded) {
		// The consumer loads its scripts on first use; so does this.
		if _, err = r.d.Loader.Load(cctx); err == nil {
			v, err = r.d.Loader.Run(cctx, scripts.Repair, keys, args...)
		}
	}
	if err != nil {
		return false, 0, 0, fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	out, ok := v.([]any)
	if !ok || len(out) != 3 {
		return false, 0, 0, fmt.Errorf("repair: sale %s: reply %v", sale, v)
	}
	h, _ := out[0].(int64)
	changed, _ = out[1].(int64)
	raised, _ = out[2].(int64)
	return h == 1, changed, raised, nil
}
