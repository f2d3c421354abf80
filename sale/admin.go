package sale

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/flashgate/flashgate/scripts"
)

// Sale reads a sale. It returns ErrNotFound or an error wrapping ErrUnavailable.
// A sale of several buckets is its home's view with the buckets' counts
// summed in (sumBuckets).
func (s *Store) Sale(ctx context.Context, sale string) (*View, error) {
	v, _, err := s.admin(ctx, sale, "get")
	if err != nil {
		return nil, err
	}
	return s.sumBuckets(ctx, v)
}

// sumBuckets adds to the home view v of a sale of several buckets what its
// buckets hold: sold, buyers (a buyer buys in one bucket only), outbox
// entries and orders by state. Each bucket is read atomically, the sum is
// not one instant. A sale of one bucket is returned as it is.
func (s *Store) sumBuckets(ctx context.Context, v *View) (*View, error) {
	if v.Buckets <= 1 {
		return v, nil
	}
	bs, err := s.bucketsNow(ctx, v.ID)
	if err != nil {
		return nil, err
	}
	if bs == nil {
		return nil, fmt.Errorf("sale %s: %w: %d buckets but no names", v.ID, ErrUnavailable, v.Buckets)
	}
	for _, bucket := range bs.names {
		b, _, err := s.admin(ctx, bucket, "get")
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("sale %s: %w: bucket %s missing", v.ID, ErrUnavailable, bucket)
		}
		if err != nil {
			return nil, err
		}
		v.Sold += b.Sold
		v.Buyers += b.Buyers
		v.OutboxPending += b.OutboxPending
		v.Pending += b.Pending
		v.Paid += b.Paid
		v.Cancelled += b.Cancelled
		v.Expired += b.Expired
	}
	return v, nil
}

// Upsert creates or updates a sale, atomically with buyers. created tells
// which. It returns a *StockBelowSoldError (ErrStockBelowSold), an error
// wrapping ErrBucketsFixed and naming the sale's count, ErrBadWindow,
// ErrStockRequired, or an error wrapping ErrUnavailable; a refusal changes
// nothing. A refused create leaves the sale registry (Keys.Sales) as it
// was.
func (s *Store) Upsert(ctx context.Context, sale string, u Update) (view *View, created bool, err error) {
	bs, err := s.bucketsNow(ctx, sale)
	if err != nil {
		return nil, false, err
	}
	if bs != nil {
		return s.upsertBuckets(ctx, bs, u)
	}
	if u.Buckets != nil && *u.Buckets > 1 && u.Stock != nil {
		n, err := s.rdb.Exists(ctx, s.keys.Meta(sale)).Result()
		if err != nil {
			return nil, false, fmt.Errorf("upsert %s: %w: %w", sale, ErrUnavailable, err)
		}
		if n == 0 {
			return s.createBuckets(ctx, sale, u)
		}
		// A sale of one bucket: its script refuses the other count.
	}
	return s.upsertOne(ctx, sale, u, "")
}

// upsertOne is Upsert of a sale of one slot, or of the home of a sale of
// several buckets (names set on its create).
func (s *Store) upsertOne(ctx context.Context, sale string, u Update, names string) (view *View, created bool, err error) {
	// The relay finds outboxes through the registry, a set in a slot of its
	// own that no script on the sale's slot may write. So the id is added
	// before the script runs, so that no sale can take an order before the
	// relay can know of it; but only by a call that can create the sale.
	// A call without stock cannot: the script refuses it as a create
	// (STOCK_REQUIRED) and runs it only as an update, of a sale whose
	// creating call added the id before its own script ran, that is before
	// this one could see the sale. That also settles two PUTs racing on a
	// new sale, one with stock and one without: whichever script runs first,
	// the sale exists only after the id is in. A call with stock is refused
	// as a create only for what is checked here first (on a create the
	// script sees no window but this one, and sold is 0), so an id it adds
	// names a sale that exists once its script has run.
	//
	// Nothing is removed after a refusal or a failure, not even a member
	// this call added: of two PUTs with stock racing on a new sale, the
	// second's SADD is a no-op because the first's added the id; were the
	// first to fail and take it back, the second's sale would take orders
	// that no relay finds. So an id stays where the script may not have run
	// (Redis unreachable after the SADD): an id without a sale costs the
	// relay one look at an empty outbox, a sale without an id loses orders.
	if u.Stock != nil {
		if *u.Stock < 0 {
			return nil, false, &StockBelowSoldError{Stock: *u.Stock}
		}
		if u.StartsAt != nil && u.EndsAt != nil && *u.StartsAt > 0 && *u.EndsAt > 0 && *u.EndsAt <= *u.StartsAt {
			return nil, false, ErrBadWindow
		}
		if err := s.rdb.SAdd(ctx, s.keys.Sales(), sale).Err(); err != nil {
			return nil, false, fmt.Errorf("upsert %s: %w: %w", sale, ErrUnavailable, err)
		}
	}
	// The sweepers find due orders through Keys.Paying, by the same rule: a
	// call that may give the sale a window adds it there before its script,
	// so that no order can await payment before a sweeper can know of its
	// sale, and nothing takes an id out. Only a call without stock on a sale
	// that does not exist (refused) leaves an id without a sale there, which
	// costs each sweeper one look a second.
	if u.PaymentWindow != nil && *u.PaymentWindow > 0 {
		if err := s.rdb.SAdd(ctx, s.keys.Paying(), sale).Err(); err != nil {
			return nil, false, fmt.Errorf("upsert %s: %w: %w", sale, ErrUnavailable, err)
		}
	}
	key := ""
	if u.WaitingRoom != nil && *u.WaitingRoom != RoomOff {
		if key, err = newRoomKey(); err != nil {
			return nil, false, err
		}
	}
	v, created, err := s.admin(ctx, sale, "upsert", optInt(u.Stock), optInt(u.Limit), optTime(u.StartsAt), optTime(u.EndsAt),
		optInt(u.PaymentWindow), optInt(u.Buckets), names, optInt(u.WaitingRoom), optInt(u.AdmitPerSecond),
		optInt(u.PassSeconds), key)
	switch {
	case err == nil:
		return v, created, nil
	case errors.Is(err, ErrStockBelowSold):
		return nil, false, &StockBelowSoldError{Stock: *u.Stock, Sold: v.Sold}
	case errors.Is(err, ErrBucketsFixed):
		return nil, false, fmt.Errorf("%w: the sale has %d", ErrBucketsFixed, max(v.Buckets, 1))
	}
	return nil, false, err
}

// createBuckets creates a sale of several buckets: the buckets first, each
// a sale of no stock with the sale's settings, registered (Keys.Sales, and
// Keys.Paying with a window) before its script runs as upsertOne registers a
// sale; then the home, which makes the sale exist. A create that fails
// half way leaves buckets that nothing sends buyers to, and a retry finds
// and updates them (their ids depend on the sale id and the slot map only).
func (s *Store) createBuckets(ctx context.Context, sale string, u Update) (*View, bool, error) {
	if u.StartsAt != nil && u.EndsAt != nil && *u.StartsAt > 0 && *u.EndsAt > 0 && *u.EndsAt <= *u.StartsAt {
		return nil, false, ErrBadWindow
	}
	names, err := s.bucketNames(ctx, sale, int(*u.Buckets))
	if err != nil {
		return nil, false, err
	}
	if err := s.rdb.SAdd(ctx, s.keys.Bucketed(), sale).Err(); err != nil {
		return nil, false, fmt.Errorf("upsert %s: %w: %w", sale, ErrUnavailable, err)
	}
	zero := int64(0)
	bucket := Update{Stock: &zero, Limit: u.Limit, StartsAt: u.StartsAt, EndsAt: u.EndsAt, PaymentWindow: u.PaymentWindow}
	for _, name := range names {
		if _, _, err := s.upsertOne(ctx, name, bucket, ""); err != nil {
			return nil, false, err
		}
	}
	v, created, err := s.upsertOne(ctx, sale, u, strings.Join(names, ","))
	if err != nil {
		return nil, false, err
	}
	v, err = s.sumBuckets(ctx, v)
	return v, created, err
}

// upsertBuckets updates a sale of several buckets: the home decides, then
// each bucket takes the new settings, before it returns. A stock below what
// the home has handed to the buckets is decided once their unsold units
// are back (lowerBuckets), so that only what they sold refuses it. A
// failure half way is an error (503): the PUT, repeated, sets them all.
func (s *Store) upsertBuckets(ctx context.Context, bs *bucketSet, u Update) (*View, bool, error) {
	v, created, err := s.upsertOne(ctx, bs.sale, u, "")
	if errors.Is(err, errStockBelowMoved) {
		v, created, err = s.lowerBuckets(ctx, bs, u)
	}
	if err != nil {
		return nil, false, err
	}
	bucket := Update{Limit: u.Limit, StartsAt: u.StartsAt, EndsAt: u.EndsAt, PaymentWindow: u.PaymentWindow}
	if bucket != (Update{}) {
		for _, name := range bs.names {
			if _, _, err := s.upsertOne(ctx, name, bucket, ""); err != nil {
				return nil, false, err
			}
		}
	}
	v, err = s.sumBuckets(ctx, v)
	return v, created, err
}

// Restock adds n units to a sale's stock, atomically with buyers, once
// even when the call is retried. It returns ErrNotFound, ErrStockCeiling
// when the stock would pass MaxStock (the bound a PUT enforces; nothing
// changes then), or an error wrapping ErrUnavailable.
func (s *Store) Restock(ctx context.Context, sale string, n int64) (*View, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	v, _, err := s.adminKeys(ctx, sale, []string{s.keys.Meta(sale), s.keys.Users(sale), s.keys.Outbox(sale),
		s.keys.Op(sale, hex.EncodeToString(id[:]))}, "restock", n, MaxStock)
	if err != nil {
		return nil, err
	}
	// A sale of several buckets: the units join its pool, whence the
	// buckets draw.
	return s.sumBuckets(ctx, v)
}

// SetLocked locks or unlocks a sale. Once it returns, every reservation the
// script runs sees the new state.
func (s *Store) SetLocked(ctx context.Context, sale string, locked bool) (*View, error) {
	op := "unlock"
	if locked {
		op = "lock"
	}
	v, _, err := s.admin(ctx, sale, op)
	if err != nil {
		return nil, err
	}
	if v.Buckets <= 1 {
		return v, nil
	}
	// Every bucket of the sale, before the call returns.
	bs, err := s.bucketsNow(ctx, sale)
	if err != nil {
		return nil, err
	}
	if bs == nil {
		return nil, fmt.Errorf("%s %s: %w: %d buckets but no names", op, sale, ErrUnavailable, v.Buckets)
	}
	for _, bucket := range bs.names {
		if _, _, err := s.admin(ctx, bucket, op); err != nil {
			return nil, err
		}
	}
	return s.sumBuckets(ctx, v)
}

func (s *Store) admin(ctx context.Context, sale, op string, args ...any) (*View, bool, error) {
	return s.adminKeys(ctx, sale, []string{s.keys.Meta(sale), s.keys.Users(sale), s.keys.Outbox(sale)}, op, args...)
}

// adminKeys runs the admin script and reads its reply. A refusal (the
// outcome of a code other than OK) comes with the sale as the script saw
// it, so that the caller can say which numbers refused the call; a failure
// to reach Redis or to read the reply comes with no view.
func (s *Store) adminKeys(ctx context.Context, sale string, keys []string, op string, args ...any) (*View, bool, error) {
	a, err := s.loader.Admin(ctx, keys, append([]any{op, s.keys.Events(), sale}, args...)...)
	if errors.Is(err, scripts.ErrUnconfirmed) {
		s.changedOn(sale, false)
		return nil, false, fmt.Errorf("%s %s: %w: %w", op, sale, ErrUnconfirmed, err)
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w: %w", op, sale, ErrUnavailable, err)
	}
	s.changedOn(sale, false)
	v := &View{ID: sale, Now: a.Now, Stock: a.Stock, Sold: a.Sold, Limit: a.Limit, Locked: a.Locked,
		StartsAt: a.StartsAt, EndsAt: a.EndsAt, Buyers: a.Buyers, OutboxPending: a.Outbox, PaymentWindow: a.Window,
		Pending: a.Pending, Paid: a.Paid, Cancelled: a.Cancelled, Expired: a.Expired, Buckets: a.Buckets, Moved: a.Moved,
		Room: a.Room}
	if err := outcome(a.Code); err != nil {
		return v, false, err
	}
	return v, a.Created, nil
}

func optInt(p *int64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(*p, 10)
}

func optTime(p *int64) string {
	switch {
	case p == nil:
		return ""
	case *p == ClearTime:
		return "null"
	default:
		return strconv.FormatInt(*p, 10)
	}
}
