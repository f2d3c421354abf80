package expiry

import (
	"context"
	"fmt"

	"github.com/flashgate/flashgate/scripts"
)

// Expiry is one order a sweep expired, with the pay_by it missed.
type Expiry struct {
	OrderID string
	PayBy   int64 // Unix ms
}

// SweepResult is what one sweep call did.
type SweepResult struct {
	Now     int64    // Redis's clock, Unix ms
	Expired []Expiry // the orders it expired, their units back
	Next    int64    // pay_by of the earliest order still awaiting payment; 0: none
}

// sweepCall expires up to limit of the orders of id (a sale, or a bucket of one) whose pay_by has come (Redis
// TIME), returning their units to the stock and to their buyers' allowance,
// in one atomic script call. It is idempotent and safe to run from any
// number of gateways at once: an order is expired by exactly one call, and
// one already paid, cancelled or expired is left alone. It returns an error
// when Redis could not answer, or answered what cannot be read; it blocks
// for the script call, bounded by ctx.
func (w *Sweeper) sweepCall(ctx context.Context, id string, limit int) (SweepResult, error) {
	keys := []string{w.keys.Meta(id), w.keys.Users(id), w.keys.Outbox(id), w.keys.Orders(id), w.keys.Due(id)}
	v, err := w.loader.Run(ctx, scripts.Order, keys, "sweep", w.keys.Events(), scripts.SaleOf(id), limit)
	if err == nil {
		var res SweepResult
		if res, err = decodeSweep(v); err == nil {
			if len(res.Expired) > 0 && w.wrote != nil {
				w.wrote(id)
			}
			return res, nil
		}
	}
	return SweepResult{}, fmt.Errorf("sweep %s: %w", id, err)
}

// decodeSweep reads the sweep's reply {now, next, id, payby, id, payby, …}.
func decodeSweep(v any) (SweepResult, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 || len(a)%2 != 0 {
		return SweepResult{}, fmt.Errorf("reply is %T of %d elements, want now, next and pairs", v, len(a))
	}
	var res SweepResult
	var ok1, ok2 bool
	res.Now, ok1 = a[0].(int64)
	res.Next, ok2 = a[1].(int64)
	if !ok1 || !ok2 {
		return SweepResult{}, fmt.Errorf("reply %#v, want integers now and next", a[:2])
	}
	if len(a) > 2 {
		res.Expired = make([]Expiry, 0, (len(a)-2)/2)
	}
	for i := 2; i < len(a); i += 2 {
		id, ok1 := a[i].(string)
		pb, ok2 := a[i+1].(int64)
		if !ok1 || !ok2 {
			return SweepResult{}, fmt.Errorf("reply elements %d, %d are %#v, %#v, want an order id and a pay_by", i, i+1, a[i], a[i+1])
		}
		res.Expired = append(res.Expired, Expiry{OrderID: id, PayBy: pb})
	}
	return res, nil
}
