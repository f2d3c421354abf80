package repair

// Marking created again (scripts.Keys.Created) what a Redis restart may
// have lost of the consumers' marks, after a sale's release.

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/orderdb"
)

// remark is what is marked created again of a sale once it is released:
// the orders of MySQL's rows with an event after from; to is the largest
// seq MySQL held when the sale was repaired.
type remark struct {
	sale     string
	from, to int64
}

// remark is what is marked again of sale, whose MySQL holds events up to
// maxSeq: those after cseq. A sale with no cseq (older than it) is given
// one at maxSeq with nothing marked again, as the releases before it did.
func (m meta) remark(sale string, maxSeq int64) *remark {
	switch {
	case m.cseq < 0:
		return &remark{sale: sale, from: maxSeq, to: maxSeq}
	case maxSeq > m.cseq:
		return &remark{sale: sale, from: m.cseq, to: maxSeq}
	}
	return nil
}

// remarks marks created again, in each released sale of rms, the orders
// MySQL holds with an event after its from (scripts.Keys.Created), in
// pages read along the index (sale_id, seq), then records in its meta that
// it did (cseq = to, Loader.Remarked). A consumer marks an order created
// after MySQL has it, off its acknowledgement path, so a Redis that lost
// its last writes may have lost the marks of orders it kept: their view
// would say queued for ever. Such an order has an event after the sale's
// last repair, since that repair's check of MySQL waited for the queue to
// drain (an order still on its way through a repair whose mark is then
// lost by the next restart is the exception: flashgate reconcile --mark
// finds it). So the work is the sale's events since its last repair (all
// of a sale created since the release that keeps cseq; none of an older
// one at its first repair), and it runs after the releases, off the
// buyers' clock. A sale whose marks fail keeps its cseq: the next repair
// marks them again. It returns the first error and goes on with the others.
func (r *Repairer) remarks(ctx context.Context, rms []remark) error {
	var firstErr error
	var orders, sales int64
	for _, rm := range rms {
		n, err := r.remarkOne(ctx, rm)
		orders += n
		if n > 0 {
			sales++
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	r.remarked.Add(uint64(orders))
	if orders > 0 {
		r.d.Log.Info("marked created again the orders MySQL holds with an event since their sale's last repair",
			zap.Int64("orders", orders), zap.Int64("sales", sales))
	}
	return firstErr
}

func (r *Repairer) remarkOne(ctx context.Context, rm remark) (int64, error) {
	mysqlSale, suffix, lane := laneOf(rm.sale)
	var n int64
	for seq, afterID := rm.from, ""; seq < rm.to || afterID != ""; {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		page, err := orderdb.After(cctx, r.d.DB, mysqlSale, seq, afterID, chunk)
		cancel()
		if err != nil {
			return n, fmt.Errorf("repair: sale %s: %w", rm.sale, err)
		}
		args := make([]any, 0, len(page))
		for _, o := range page {
			if !lane || strings.HasSuffix(o.OrderID, suffix) {
				args = append(args, o.OrderID)
			}
		}
		if len(args) > 0 {
			cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
			err := r.d.Redis.SAdd(cctx, r.d.Keys.Created(rm.sale), args...).Err()
			cancel()
			if err != nil {
				return n, fmt.Errorf("repair: sale %s: mark created: %w", rm.sale, err)
			}
			n += int64(len(args))
		}
		if len(page) < chunk {
			break
		}
		seq, afterID = page[len(page)-1].Seq, page[len(page)-1].OrderID
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if _, err := r.d.Loader.Remarked(cctx, r.d.Keys.Meta(rm.sale), rm.to); err != nil {
		return n, fmt.Errorf("repair: sale %s: %w", rm.sale, err)
	}
	return n, nil
}
