package expiry

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate/scripts"
)

// Expiry is one order a sweep expired, with the pay_by it missed.
type Expiry = scripts.Expiry

// SweepResult is what one sweep call did.
type SweepResult = scripts.SweepReply

// sweepCall expires up to limit of the orders of id (a sale, or a bucket of one) whose pay_by has come (Redis
// TIME), returning their units to the stock and to their buyers' allowance,
// in one atomic script call. It is idempotent and safe to run from any
// number of gateways at once: an order is expired by exactly one call, and
// one already paid, cancelled or expired is left alone. It returns an error
// when Redis could not answer, or answered what cannot be read; it blocks
// for the script call, bounded by ctx.
func (w *Sweeper) sweepCall(ctx context.Context, id string, limit int) (SweepResult, error) {
	keys := []string{w.keys.Meta(id), w.keys.Users(id), w.keys.Outbox(id), w.keys.Orders(id), w.keys.Due(id)}
	res, err := w.loader.Sweep(ctx, keys, "sweep", w.keys.Events(), scripts.SaleOf(id), limit)
	if err != nil {
		return SweepResult{}, fmt.Errorf("sweep %s: %w", id, err)
	}
	if len(res.Expired) > 0 && w.wrote != nil {
		w.wrote(id)
	}
	return res, nil
}
