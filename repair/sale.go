package repair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/scripts"
)

const (
	// chunk is how many orders one repair script call applies.
	chunk = 500
	// saleChunk is how many held sales one round reads at once: one
	// pipeline of their meta hashes and one query of their largest seqs.
	saleChunk = 500
)

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
// failure leaves that sale held and the others go on. Once every sale it
// could is released, the orders of each with an event since its last
// repair are marked created again (remarks).
func (r *Repairer) sales(ctx context.Context, held []string) error {
	var firstErr error
	fail := func(err error) {
		r.errs.Add(1)
		if firstErr == nil {
			firstErr = err
		}
	}
	// The marks of the released sales are given again once the round has
	// released every sale it could: buyers do not wait for them.
	var later []remark
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
			var rm *remark
			switch _, _, lane := laneOf(sale); {
			case m.err != nil:
				err = m.err
			case !m.held:
				err = r.release(ctx, sale)
			case m.buckets > 1:
				err = r.home(ctx, sale)
			case lane:
				rm, err = r.sale(ctx, sale, m)
			case seqs[sale] <= m.seq:
				rm, err = m.remark(sale, seqs[sale]), r.clean(ctx, sale, m.seq)
			default:
				rm, err = m.remark(sale, seqs[sale]), r.restore(ctx, sale, m.seq, seqs[sale])
			}
			if err == nil && rm != nil {
				later = append(later, *rm)
			}
			if err != nil && ctx.Err() == nil {
				fail(err)
				r.d.Log.Warn("repair of a held sale failed; it stays held, the others go on", zap.String("sale", sale), zap.Error(err))
			}
		}
	}
	if err := r.remarks(ctx, later); err != nil {
		fail(err)
		r.d.Log.Warn("cannot mark created again the orders of a repaired sale; the next repair will", zap.Error(err))
	}
	return firstErr
}

// meta is what a round reads of a held sale's meta hash.
type meta struct {
	held bool
	seq  int64
	// cseq: the orders MySQL holds of the sale with an event up to it were
	// marked created under a history of this Redis that a repair checked
	// (see remarks); -1 when the meta has none (a sale older than it).
	cseq    int64
	buckets int64
	err     error // the hash could not be read as a sale's
}

func (r *Repairer) metas(ctx context.Context, sales []string) ([]meta, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	pipe := r.d.Redis.Pipeline()
	cmds := make([]*redis.SliceCmd, len(sales))
	for i, sale := range sales {
		cmds[i] = pipe.HMGet(cctx, r.d.Keys.Meta(sale), "hold", "seq", "buckets", "cseq")
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
		out[i].cseq = -1
		if c, _ := v[3].(string); c != "" {
			out[i].cseq, _ = strconv.ParseInt(c, 10, 64)
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

// Sale repairs one held sale: it gives Redis the orders of the sale whose
// latest event MySQL holds and Redis has not counted, then releases it,
// then marks created again the orders MySQL holds with an event since the
// sale's last repair (see remarks). A sale not held, or gone, is only taken
// off the Held set. Call it only once the fence has passed (Once does).
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
	rm, err := r.sale(ctx, sale, m)
	if err != nil || rm == nil {
		return err
	}
	return r.remarks(ctx, []remark{*rm})
}

// sale repairs and releases the held sale (or bucket) whose meta is m, and
// returns what to mark again.
func (r *Repairer) sale(ctx context.Context, sale string, m meta) (*remark, error) {
	mysqlSale, _, _ := laneOf(sale)
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	maxSeq, err := orderdb.MaxSeq(cctx, r.d.DB, mysqlSale)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	if err := r.restore(ctx, sale, m.seq, maxSeq); err != nil {
		return nil, err
	}
	return m.remark(sale, maxSeq), nil
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
	rep, err := r.d.Loader.Repair(cctx, keys, args...)
	if errors.Is(err, scripts.ErrNotLoaded) {
		// The consumer loads its scripts on first use; so does this.
		if _, err = r.d.Loader.Load(cctx); err == nil {
			rep, err = r.d.Loader.Repair(cctx, keys, args...)
		}
	}
	if err != nil {
		return false, 0, 0, fmt.Errorf("repair: sale %s: %w", sale, err)
	}
	return rep.Applied, rep.Changed, rep.Raised, nil
}
