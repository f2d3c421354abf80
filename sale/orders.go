package sale

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// Order reads an order's record, at Redis's clock: Created when the record
// says so or the sale's created set holds the order (scripts.Keys.Created),
// that is once the order is in MySQL. An order awaiting a payment whose
// pay_by has come reads as expired, the decision a pay would meet, even
// before a sweep has returned its units. It returns ErrNotFound
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
	return []string{s.keys.Meta(sale), s.keys.Users(sale), s.keys.Outbox(sale), s.keys.Orders(sale), s.keys.Due(sale),
		s.keys.Created(sale)}
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
	r, err := s.loader.Order(ctx, s.orderKeys(bucket), op, s.keys.Events(), sale, orderID)
	unconfirmed := errors.Is(err, scripts.ErrUnconfirmed)
	if err != nil && !unconfirmed {
		return scripts.Record{}, false, fmt.Errorf("%s %s/%s: %w: %w", op, sale, orderID, ErrUnavailable, err)
	}
	if r.Changed {
		s.changedOn(bucket, true)
	}
	rec := r.Record
	if rec.Due(r.Now) {
		rec.State = order.StateExpired
	}
	res := outcome(r.Code)
	switch {
	case res == errRepairing:
		s.loader.Stale()
	case unconfirmed:
		// Whatever the answer (paid, or expired there and then), it is a
		// change the replicas have not confirmed.
		return rec, r.Changed, fmt.Errorf("%s %s/%s: %w: %w", op, sale, orderID, ErrUnconfirmed, err)
	}
	return rec, r.Changed, res
}
