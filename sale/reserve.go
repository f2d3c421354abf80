package sale

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashgate/flashgate/scripts"
)

// A buy's path through the store, top to bottom: Buy picks the order id and
// the buyer's bucket (idFor); the batcher (batcher.go) queues it with the
// other buys of the sale and sends a batch as one Reserve; Reserve sends a
// sale of one bucket to reserveOn, one script call, and a bucket's batch to
// reserveBucket (buckets.go), which refills a short bucket from the pool
// and calls reserveOn again.

// Buy reserves quantity units of sale for user, with the buy's
// Idempotency-Key (idem, "" for none), batched with the other buys of the
// sale in flight on this process. It returns the outcome in Result.Err
// (nil: accepted, else one of the sentinels), or an error: ErrRateLimited at
// once when the sale already has Batching.MaxInFlight reservations in
// flight here, an error wrapping ErrUnavailable when Redis did not answer in
// time (nothing was promised). It blocks for at most about two Timeouts.
func (s *Store) Buy(sale, user string, quantity int, idem string) (Result, error) {
	return s.batch.run(sale, s.idFor(sale, user), Reservation{OrderID: s.ids.next(), UserID: user, Quantity: quantity, IdemKey: idem})
}

// Reservation is one buyer's request, with the order id chosen before the call.
type Reservation struct {
	OrderID  string
	UserID   string
	Quantity int
	IdemKey  string // empty when the request had none
}

// Result is the outcome of one Reservation: Err is nil when accepted, or one
// of the outcome sentinels. OrderID is the accepted order's id, which differs
// from the Reservation's when an Idempotency-Key replays an earlier order.
// PayBy is the accepted order's payment deadline in Unix ms (Redis's clock),
// 0 when its sale asks no payment: the order is then confirmed, else
// pending_payment.
type Result struct {
	OrderID string
	PayBy   int64
	Err     error
	// SoldOut reports that the sale, open, had no unit left after the call
	// that decided this reservation, whatever the reservation's own
	// outcome (a buyer at the limit, the last unit taken). Known only of a
	// sale of one bucket: a bucket's last unit is not the sale's.
	SoldOut bool
}

// Reserve applies rs on id (a sale, or one of its buckets) and writes one
// Result per reservation into out (len(out) ≥ len(rs)). A sale of one bucket
// is one atomic script call. A sale of several is one call per bucket its
// buyers are in, and more where a bucket has to draw stock from the pool
// first; each reservation is still decided atomically and exactly once. It
// returns an error wrapping ErrUnavailable when Redis could not answer, or
// answered what the store cannot read; then no Result is set and nothing
// may be promised to the buyers. It blocks for the script calls, bounded by
// ctx.
func (s *Store) Reserve(ctx context.Context, id string, rs []Reservation, out []Result) error {
	if sale, b, ok := scripts.SplitBucket(id); ok {
		bs, err := s.bucketsOf(ctx, sale)
		if err != nil {
			return err
		}
		if bs == nil || b >= len(bs.names) {
			return fmt.Errorf("reserve %s: %w: no such bucket", id, ErrUnavailable)
		}
		return s.reserveBucket(ctx, bs, b, rs, out)
	}
	if err := s.reserveOn(ctx, id, id, rs, out); err != nil {
		return err
	}
	var bs *bucketSet
	for i := range rs {
		if !errors.Is(out[i].Err, errBucketed) {
			continue
		}
		if bs == nil {
			var err error
			if bs, err = s.bucketsOf(ctx, id); err != nil {
				return err
			}
			if bs == nil {
				return fmt.Errorf("reserve %s: %w: home answered BUCKETED but names no buckets", id, ErrUnavailable)
			}
		}
		if err := s.reserveBucket(ctx, bs, bs.bucketOf(rs[i].UserID), rs[i:i+1], out[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// reserveOn applies rs in order in one atomic script call on the keys of
// id (a sale, or a bucket of one), recording them as orders of sale, and
// writes one Result per reservation into out (len(out) ≥ len(rs)). It
// returns an error wrapping ErrUnavailable when Redis could not answer, or
// answered what the store cannot read; then no Result is set and nothing
// may be promised to the buyers. It blocks for the script call, bounded by
// ctx.
func (s *Store) reserveOn(ctx context.Context, id, sale string, rs []Reservation, out []Result) error {
	keys := make([]string, 5, 5+len(rs))
	keys[0], keys[1], keys[2], keys[3], keys[4] = s.keys.Meta(id), s.keys.Users(id), s.keys.Outbox(id),
		s.keys.Orders(id), s.keys.Due(id)
	var b scripts.ReserveBatch
	size := 0
	for _, r := range rs {
		size += len(r.OrderID) + len(r.UserID) + 12
	}
	b.Grow(size)
	for _, r := range rs {
		ik := 0
		if r.IdemKey != "" {
			keys = append(keys, s.keys.Idem(id, r.IdemKey))
			ik = len(keys)
		}
		b.Add(r.OrderID, r.UserID, r.Quantity, ik)
	}
	r, err := s.loader.Reserve(ctx, keys, sale, &b)
	unconfirmed := errors.Is(err, scripts.ErrUnconfirmed)
	if err != nil && !unconfirmed {
		// The script may have run and written (its reply lost, the call
		// timed out after it): the relay is told, so that it reads the
		// outbox now rather than at its next scan.
		s.changedOn(id, true)
		return fmt.Errorf("reserve %s: %w: %w", id, ErrUnavailable, err)
	}
	wrote, held := false, false
	for i := range rs {
		o := r.At(i)
		res := Result{OrderID: o.OrderID, PayBy: o.PayBy, Err: outcome(o.Code), SoldOut: r.Left == 0 && id == sale}
		switch {
		case res.Err == nil && unconfirmed:
			res.Err = ErrUnconfirmed // made on the primary; its buyer hears 503 unconfirmed with the order id
		case res.Err == errRepairing:
			held = true
		}
		out[i] = res
		wrote = wrote || o.Code == scripts.CodeOK
	}
	if wrote {
		s.changedOn(id, true)
	}
	if held {
		s.loader.Stale() // a pass lists the held sale for package repair
	}
	return nil
}
