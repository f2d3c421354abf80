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

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/scripts"
)

// Defaults of Config's zero fields.
const (
	// DefaultPoll is how often the Held set is read.
	DefaultPoll = 100 * time.Millisecond
	// DefaultPassEvery is how often a hold pass runs, to find a sale held by
	// a process that died before it could list the sale in the Held set.
	DefaultPassEvery = time.Minute
	// DefaultFenceWait bounds one fence: past it the queue is looked at
	// again, from a new moment.
	DefaultFenceWait = 30 * time.Second
	// chunk is how many orders one repair script call applies.
	chunk = 500
	// saleChunk is how many held sales one round reads at once: one
	// pipeline of their meta hashes and one query of their largest seqs.
	saleChunk = 500
	// witnessFresh is how recently a consumer's witness must have been
	// written to count: a consumer that wrote none for longer has stopped.
	witnessFresh = 5 * time.Second
	// witnessForget is when a witness is removed from the hash.
	witnessForget = time.Minute
)

// Config tunes a Repairer; zero fields take the defaults.
type Config struct {
	Poll, PassEvery, FenceWait time.Duration
	// Timeout bounds each Redis and MySQL call (default 5 s).
	Timeout time.Duration
}

// Deps are what a Repairer works with.
type Deps struct {
	Redis  redis.UniversalClient
	DB     *sql.DB
	Loader *scripts.Loader
	Keys   scripts.Keys
	// Queue returns the orders queue's messages ready and its number of
	// consumers (AMQP passive declare). The Repairer asks it only while
	// sales are held.
	Queue func(ctx context.Context) (broker.Depth, error)
	// Name is this process's consumer's name among the witnesses; Settled
	// is that consumer's Settled (package consumer). Without Settled the
	// Repairer witnesses for no consumer (a process that consumes nothing).
	Name    string
	Settled func(now time.Time) (through, failed time.Time)
	Log     *zap.Logger
}

// Stats counts what a Repairer did.
type Stats struct {
	Repaired uint64 // sales released after their orders were given back
	Released uint64 // sales released that had lost nothing MySQL holds
	Restored uint64 // orders whose state in Redis a repair changed (restored or moved on)
	Raised   uint64 // units of stock raised to cover what MySQL holds as sold
	Errors   uint64
}

// Repairer releases held sales; see the package doc.
type Repairer struct {
	cfg Config
	d   Deps

	repaired, released, restored, raised, errs atomic.Uint64
	waiting                                    time.Time // the last "waiting" log, for its rate
}

// New returns a Repairer; Run starts it.
func New(cfg Config, d Deps) (*Repairer, error) {
	if d.Redis == nil || d.DB == nil || d.Loader == nil || d.Queue == nil {
		return nil, errors.New("repair: Redis, DB, Loader and Queue are required")
	}
	if d.Settled != nil && d.Name == "" {
		return nil, errors.New("repair: a witness needs its consumer's Name")
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.PassEvery <= 0 {
		cfg.PassEvery = DefaultPassEvery
	}
	if cfg.FenceWait <= 0 {
		cfg.FenceWait = DefaultFenceWait
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Repairer{cfg: cfg, d: d}, nil
}

// Stats returns the counters since start.
func (r *Repairer) Stats() Stats {
	return Stats{Repaired: r.repaired.Load(), Released: r.released.Load(), Restored: r.restored.Load(),
		Raised: r.raised.Load(), Errors: r.errs.Load()}
}

// WriteMetrics writes the Repairer's counters in Prometheus text format.
func (r *Repairer) WriteMetrics(w io.Writer) {
	s := r.Stats()
	metrics.WriteCounterUint64(w, "flashgate_repair_sales_total", s.Repaired)
	metrics.WriteCounterUint64(w, "flashgate_repair_released_sales_total", s.Released)
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

// Once repairs the sales held now, once every order on its way to MySQL
// when they were held has arrived (fence). It blocks while sales are held
// until the fence has passed (at most FenceWait, then it returns nil to be
// called again) and the sales are repaired. A sale whose repair fails is
// left held for the next call, and the others are repaired: Once returns
// the first such error, after trying them all.
func (r *Repairer) Once(ctx context.Context) error {
	held, err := r.held(ctx)
	if err != nil || len(held) == 0 {
		return err
	}
	passed, err := r.fence(ctx)
	if err != nil || !passed {
		return err
	}
	return r.sales(ctx, held)
}

func (r *Repairer) held(ctx context.Context) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	held, err := r.d.Redis.SMembers(cctx, r.d.Keys.Held()).Result()
	if err != nil {
		return nil, fmt.Errorf("repair: read held sales: %w", err)
	}
	// The buckets of a sale of several (ids "SALE#i.n") before the homes:
	// a home's repair counts what its buckets hold once they are repaired.
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

// sales repairs the held sales in chunks: per chunk, one pipeline reads
// their meta hashes and one query MySQL's largest seq of each. A sale whose
// Redis counts every event MySQL holds lost nothing MySQL knows (the fence
// has passed: nothing more is on its way) and is released at once; the
// others are given back their orders. Progress is kept sale by sale: a
// failure leaves that sale held and the others go on.
func (r *Repairer) sales(ctx context.Context, held []string) error {
	var firstErr error
	fail := func(err error) {
		r.errs.Add(1)
		if firstErr == nil {
			firstErr = err
		}
	}
	for lo := 0; lo < len(held) && ctx.Err() == nil; lo += saleChunk {
		part := held[lo:min(len(held), lo+saleChunk)]
		metas, err := r.metas(ctx, part)
		if err != nil {
			fail(err)
			continue
		}
		var plain []string
		for i, sale := range part {
			if _, _, lane := laneOf(sale); !lane && metas[i].buckets <= 1 {
				plain = append(plain, sale)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		seqs, err := orderdb.MaxSeqs(cctx, r.d.DB, plain)
		cancel()
		if err != nil {
			fail(fmt.Errorf("repair: %w", err))
			continue
		}
		for i, sale := range part {
			m := metas[i]
			var err error
			switch _, _, lane := laneOf(sale); {
			case m.err != nil:
				err = m.err
			case !m.held:
				err = r.release(ctx, sale)
			case m.buckets > 1:
				err = r.home(ctx, sale)
			case lane:
				err = r.Sale(ctx, sale)
			case seqs[sale] <= m.seq:
				err = r.clean(ctx, sale, m.seq)
			default:
				err = r.restore(ctx, sale, m.seq, seqs[sale])
			}
			if err != nil && ctx.Err() == nil {
				fail(err)
				r.d.Log.Warn("repair of a held sale failed; it stays held, the others go on", zap.String("sale", sale), zap.Error(err))
			}
		}
	}
	return firstErr
}

// meta is what a round reads of a held sale's meta hash.
type meta struct {
	held    bool
	seq     int64
	buckets int64
	err     error // the hash could not be read as a sale's
}

func (r *Repairer) metas(ctx context.Context, sales []string) ([]meta, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	pipe := r.d.Redis.Pipeline()
	cmds := make([]*redis.SliceCmd, len(sales))
	for i, sale := range sales {
		cmds[i] = pipe.HMGet(cctx, r.d.Keys.Meta(sale), "hold", "seq", "buckets")
	}
	if _, err := pipe.Exec(cctx); err != nil {
		return nil, fmt.Errorf("repair: read %d held sales: %w", len(sales), err)
	}
	out := make([]meta, len(sales))
	for i, c := range cmds {
		v := c.Val()
		h, _ := v[0].(string)
		out[i].held = h == "1"
		if s, _ := v[1].(string); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				out[i].err = fmt.Errorf("repair: sale %s: meta seq %q", sales[i], s)
			}
			out[i].seq = n
		}
		if b, _ := v[2].(string); b != "" {
			out[i].buckets, _ = strconv.ParseInt(b, 10, 64)
		}
	}
	return out, nil
}

// clean releases a held sale whose Redis counts every event MySQL holds:
// the repair script's last call, with no orders.
func (r *Repairer) clean(ctx context.Context, sale string, rseq int64) error {
	applied, _, _, err := r.apply(ctx, sale, nil, true, rseq)
	if err != nil {
		return err
	}
	if applied {
		r.released.Add(1)
	}
	return r.release(ctx, sale)
}

// fence reports whether every order on its way to MySQL when the held sales
// were held has arrived, that is every message queued before t0, the
// moment the fence began (after the sales were held): every consumer on
// the orders queue has witnessed (Deps.Settled, written to the Witnesses
// hash by the repairer of its process) that what RabbitMQ sent it before
// t0 is settled, with no delivery gone back to the queue since t0 and the
// same number of consumers at the end. RabbitMQ hands out a queue's
// messages in the order they were queued: a busy consumer's witness is the
// publish time of a message it settled, so every message queued before
// that one has been handed out, and those handed to it are settled; an idle
// consumer has credit, so nothing waits in the queue while it waits. With
// no consumer at all the queue must hold no message. It blocks until then,
// or FenceWait (then false).
func (r *Repairer) fence(ctx context.Context) (bool, error) {
	look := func() (broker.Depth, error) {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
		d, err := r.d.Queue(cctx)
		if err != nil {
			return d, fmt.Errorf("repair: orders queue depth: %w", err)
		}
		return d, nil
	}
	t0 := time.Now()
	if err := r.witness(ctx); err != nil {
		return false, err
	}
	first, err := look()
	if err != nil {
		return false, err
	}
	if first.Consumers == 0 {
		if first.Ready > 0 {
			r.wait("sales held after a Redis restart wait for a consumer to drain the orders queue before their repair",
				zap.Int("ready", first.Ready))
			return false, nil
		}
		return true, nil
	}
	deadline := time.NewTimer(r.cfg.FenceWait)
	defer deadline.Stop()
	tick := time.NewTicker(r.cfg.Poll)
	defer tick.Stop()
	for {
		ok, behind, err := r.witnessed(ctx, t0, first.Consumers)
		if err != nil {
			return false, err
		}
		if ok {
			last, err := look()
			if err != nil {
				return false, err
			}
			return last.Consumers == first.Consumers, nil
		}
		if behind < 0 {
			return false, nil // a delivery went back to the queue: begin again
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-deadline.C:
			r.wait("sales held after a Redis restart wait for the orders queue's consumers to settle what was queued before",
				zap.Int("consumers", first.Consumers), zap.Int("behind", behind), zap.Int("ready", first.Ready))
			return false, nil
		case <-tick.C:
		}
		if err := r.witness(ctx); err != nil {
			return false, err
		}
	}
}

func (r *Repairer) wait(msg string, f ...zap.Field) {
	if time.Since(r.waiting) >= 10*time.Second {
		r.waiting = time.Now()
		r.d.Log.Info(msg, f...)
	}
}

// witness writes this process's consumer's witness: "through,failed,at",
// Unix ms.
func (r *Repairer) witness(ctx context.Context) error {
	if r.d.Settled == nil {
		return nil
	}
	now := time.Now()
	through, failed := r.d.Settled(now)
	v := strconv.FormatInt(ms(through), 10) + "," + strconv.FormatInt(ms(failed), 10) + "," + strconv.FormatInt(now.UnixMilli(), 10)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if err := r.d.Redis.HSet(cctx, r.d.Keys.Witnesses(), r.d.Name, v).Err(); err != nil {
		return fmt.Errorf("repair: write the witness of %s: %w", r.d.Name, err)
	}
	return nil
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// witnessed reads the witnesses: ok when at least consumers of them are
// fresh and each has settled through t0; behind counts the fresh ones not
// there yet, or is -1 when one had deliveries go back to the queue since
// t0. Witnesses long silent are removed.
func (r *Repairer) witnessed(ctx context.Context, t0 time.Time, consumers int) (ok bool, behind int, err error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	all, err := r.d.Redis.HGetAll(cctx, r.d.Keys.Witnesses()).Result()
	if err != nil {
		return false, 0, fmt.Errorf("repair: read the witnesses: %w", err)
	}
	now := time.Now()
	fresh := 0
	var gone []string
	for name, v := range all {
		through, failed, at, perr := parseWitness(v)
		if perr != nil || now.Sub(at) > witnessForget {
			gone = append(gone, name)
			continue
		}
		if now.Sub(at) > witnessFresh {
			continue
		}
		if !failed.IsZero() && !failed.Before(t0) {
			return false, -1, nil
		}
		if through.IsZero() {
			// Not consuming now (no session): RabbitMQ counts it out
			// too, and what it held went back to the queue (failed).
			continue
		}
		fresh++
		if through.Before(t0) {
			behind++
		}
	}
	if len(gone) > 0 {
		_ = r.d.Redis.HDel(cctx, r.d.Keys.Witnesses(), gone...).Err() // tidying; the next round tries again
	}
	return behind == 0 && fresh >= consumers, behind, nil
}

func parseWitness(v string) (through, failed, at time.Time, err error) {
	f := strings.Split(v, ",")
	if len(f) != 3 {
		return through, failed, at, fmt.Errorf("witness %q", v)
	}
	var n [3]int64
	for i := range f {
		if n[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return through, failed, at, fmt.Errorf("witness %q", v)
		}
	}
	if n[0] > 0 {
		through = time.UnixMilli(n[0])
	}
	if n[1] > 0 {
		failed = time.UnixMilli(n[1])
	}
	return through, failed, time.UnixMilli(n[2]), nil
}

// Sale repairs one held sale: it gives Redis the orders of the sale whose
// latest event MySQL holds and Redis has not counted, then releases it. A
// sale not held, or gone, is only taken off the Held set. Call it only once
// the fence has passed (Once does).
func (r *Repairer) Sale(ctx context.Context, sale string) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	metas, err := r.metas(cctx, []string{sale})
	cancel()
	if err != nil {
		return err
	}
	m := metas[0]
	if m.err != nil {
		return m.err
	}
	if !m.held {
		return r.release(ctx, sale)
	}
	if m.buckets > 1 {
		return r.home(ctx, sale)
	}
	mysqlSale, _, _ := laneOf(sale)
	cctx, cancel = context.WithTimeout(ctx, r.cfg.Timeout)
	maxSeq, err := orderdb.MaxSeq(cctx, r.d.DB, mysqlSale)
	cancel()
	if err != nil {
		return fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	return r.restore(ctx, sale, m.seq, maxSeq)
}

// restore gives a held sale the orders MySQL holds after Redis's event
// count rseq, in pages read along the index (sale_id, seq), then releases
// it. A bucket's orders are the rows of its sale whose ids end in its
// suffix; their seq counts the bucket's events, so rows of the other
// buckets are skipped, and seq set to the sale's largest is only ahead.
func (r *Repairer) restore(ctx context.Context, sale string, rseq, maxSeq int64) error {
	mysqlSale, suffix, lane := laneOf(sale)
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
