package sale

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// Order reads an order's record, at Redis's clock: an order awaiting a
// payment whose pay_by has come reads as expired, the decision a pay would
// meet, even before a sweep has returned its units. It returns ErrNotFound
// for an order the sale never accepted, or an error wrapping ErrUnavailable.
// It blocks for one script call, bounded by ctx.
func (s *Store) Order(ctx context.Context, sale, orderID string) (scripts.Record, error) {
	r, _, err := s.orderOp(ctx, sale, "get", orderID)
	if errors.Is(err, ErrOrderNotFound) {
		return scripts.Record{}, ErrNotFound
	}
	return r, err
}

// Pay marks a pending_payment order paid, atomically with buyers and the
// sweep, and returns its record; changed is false when it was paid already
// (the same answer again). A pay at or after the order's pay_by expires the
// order there and then (units back; changed true) and returns
// ErrOrderExpired with the expired record. It also returns ErrOrderExpired
// for an expired order, ErrOrderCancelled, ErrOrderConfirmed (its sale asks
// no payment), ErrOrderNotFound, or an error wrapping ErrUnavailable. It
// blocks for one script call, bounded by ctx.
func (s *Store) Pay(ctx context.Context, sale, orderID string) (rec scripts.Record, changed bool, err error) {
	return s.orderOp(ctx, sale, "pay", orderID)
}

// Cancel cancels a pending_payment or confirmed order and returns its units
// to the stock and to the buyer's allowance, atomically with buyers; changed
// is false when it was cancelled already (the same answer again). A cancel
// of a pending order at or after its pay_by expires it instead, and returns
// ErrOrderExpired (changed true). It also returns ErrOrderExpired for an
// expired order, ErrOrderPaid, ErrOrderNotFound, or an error wrapping
// ErrUnavailable. It blocks for one script call, bounded by ctx.
func (s *Store) Cancel(ctx context.Context, sale, orderID string) (rec scripts.Record, changed bool, err error) {
	return s.orderOp(ctx, sale, "cancel", orderID)
}

func (s *Store) orderKeys(sale string) []string {
	return []string{s.keys.Meta(sale), s.keys.Users(sale), s.keys.Outbox(sale), s.keys.Orders(sale), s.keys.Due(sale)}
}

// orderOp runs pay, cancel or get and reads the reply {code, record, now,
// changed}. A refusal that carries a record (ORDER_PAID, ORDER_EXPIRED, …)
// returns it with the sentinel.
func (s *Store) orderOp(ctx context.Context, sale, op, orderID string) (scripts.Record, bool, error) {
	// An order of a sale of several buckets is in the bucket its id names.
	bucket := sale
	if b, ok := orderBucket(orderID); ok {
		bs, err := s.bucketsOf(ctx, sale)
		if err != nil {
			return scripts.Record{}, false, err
		}
		if bs == nil || b >= len(bs.names) {
			return scripts.Record{}, false, ErrOrderNotFound
		}
		bucket = bs.names[b]
	}
	v, err := s.loader.Run(ctx, scripts.Order, s.orderKeys(bucket), op, s.keys.Events(), sale, orderID)
	if err != nil {
		return scripts.Record{}, false, fmt.Errorf("%s %s/%s: %w: %w", op, sale, orderID, ErrUnavailable, err)
	}
	code, rec, now, changed, err := decodeOrder(v)
	if err != nil {
		return scripts.Record{}, false, fmt.Errorf("%s %s/%s: %w: %w", op, sale, orderID, ErrUnavailable, err)
	}
	if changed {
		s.changedOn(bucket, true)
	}
	if rec.Due(now) {
		rec.State = order.StateExpired
	}
	return rec, changed, outcome(code)
}

// decodeOrder reads the order script's reply to pay, cancel or get: an
// integer code, the record (a string, empty only with ORDER_NOT_FOUND), the
// time and the changed flag. A reply of any other shape is an error.
func decodeOrder(v any) (code scripts.Code, rec scripts.Record, now int64, changed bool, err error) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return 0, rec, 0, false, fmt.Errorf("reply is %T of %d elements, want 4", v, len(a))
	}
	n, ok1 := a[0].(int64)
	str, ok2 := a[1].(string)
	now, ok3 := a[2].(int64)
	ch, ok4 := a[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, rec, 0, false, fmt.Errorf("reply %#v, want code, record, time, changed", a)
	}
	code = scripts.Code(n)
	if str == "" {
		if code != scripts.CodeOrderNotFound {
			return 0, rec, 0, false, fmt.Errorf("reply %#v has no record", a)
		}
		return code, rec, now, false, nil
	}
	if rec, err = scripts.ParseRecord(str); err != nil {
		return 0, scripts.Record{}, 0, false, err
	}
	return code, rec, now, ch == 1, nil
}
