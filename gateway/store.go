package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// Store is the gateway's view of Redis: reservations, sale operations and
// the life of an order (pay, cancel, expiry), each one script call. It is
// safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	loader *scripts.Loader
	keys   scripts.Keys
	// buckets holds the *bucketSet of every sale of several buckets met
	// (buckets.go), by sale id: fixed at creation, so never stale.
	buckets sync.Map
	// settleAge is the age of a half-done move that the settling pass
	// finishes (buckets.go).
	settleAge time.Duration
	// changed, when set, is told after a script call changed the meta
	// hash of id (a sale, or a bucket of one), and whether it wrote to
	// id's outbox. It must not block.
	changed func(id string, outbox bool)
}

// changedOn tells changed, if set.
func (s *Store) changedOn(id string, outbox bool) {
	if s.changed != nil {
		s.changed(id, outbox)
	}
}

// NewStore returns a Store on the given client and loaded scripts.
func NewStore(rdb redis.UniversalClient, loader *scripts.Loader, keys scripts.Keys) *Store {
	return &Store{rdb: rdb, loader: loader, keys: keys, settleAge: settleAge}
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
}

// reserveOn applies rs in order in one atomic script call on the keys of
// lane (a sale, or a bucket of one), recording them as orders of sale, and
// writes one Result per reservation into out (len(out) ≥ len(rs)). It
// returns an error wrapping ErrUnavailable when Redis could not answer, or
// answered what the gateway cannot read; then no Result is set and nothing
// may be promised to the buyers. It blocks for the script call, bounded by
// ctx.
func (s *Store) reserveOn(ctx context.Context, lane, sale string, rs []Reservation, out []Result) error {
	keys := make([]string, 5, 5+len(rs))
	keys[0], keys[1], keys[2], keys[3], keys[4] = s.keys.Meta(lane), s.keys.Users(lane), s.keys.Outbox(lane),
		s.keys.Orders(lane), s.keys.Due(lane)
	args := make([]any, 2, 2+4*len(rs))
	args[0], args[1] = sale, int64(scripts.IdemTTL/time.Second)
	for _, r := range rs {
		ik := 0
		if r.IdemKey != "" {
			keys = append(keys, s.keys.Idem(lane, r.IdemKey))
			ik = len(keys)
		}
		args = append(args, r.OrderID, r.UserID, r.Quantity, ik)
	}
	v, err := s.loader.Run(ctx, scripts.Reserve, keys, args...)
	if err != nil {
		return fmt.Errorf("reserve %s: %w: %w", lane, ErrUnavailable, err)
	}
	if err := decodeReserve(v, out[:len(rs)]); err != nil {
		return fmt.Errorf("reserve %s: %w: %w", lane, ErrUnavailable, err)
	}
	for i := range rs {
		if out[i].Err == nil {
			s.changedOn(lane, true)
			break
		}
	}
	return nil
}

// reserveReply is the number of values per reservation in the reserve
// script's reply: code, order id, pay_by.
const reserveReply = 3

// decodeReserve reads the reserve script's reply into out: per reservation,
// an integer code, the order id (a string that an accepted reservation never
// leaves empty) and the pay_by (an integer, 0 or more). A reply of any other
// shape or length is an error and sets no Result: a reply misread must never
// read as accepted.
func decodeReserve(v any, out []Result) error {
	arr, ok := v.([]any)
	if !ok {
		return fmt.Errorf("reply is %T, want an array", v)
	}
	if len(arr) != reserveReply*len(out) {
		return fmt.Errorf("reply has %d elements for %d reservations", len(arr), len(out))
	}
	for i := range out {
		j := reserveReply * i
		n, ok := arr[j].(int64)
		if !ok {
			clear(out)
			return fmt.Errorf("reply element %d is %#v, want an integer code", j, arr[j])
		}
		id, ok := arr[j+1].(string)
		if !ok || id == "" && scripts.Code(n) == scripts.CodeOK {
			clear(out)
			return fmt.Errorf("reply element %d is %#v, want an order id", j+1, arr[j+1])
		}
		payBy, ok := arr[j+2].(int64)
		if !ok || payBy < 0 {
			clear(out)
			return fmt.Errorf("reply element %d is %#v, want a pay_by", j+2, arr[j+2])
		}
		out[i] = Result{OrderID: id, PayBy: payBy, Err: outcome(scripts.Code(n))}
	}
	return nil
}

// SaleView is a sale as Redis holds it, read atomically, with Redis's clock.
type SaleView struct {
	ID            string
	Now           int64 // Unix ms
	Stock         int64
	Sold          int64
	Limit         int64
	Locked        bool
	StartsAt      int64 // Unix ms, 0 for an open start
	EndsAt        int64 // Unix ms, 0 for an open end
	Buyers        int64
	OutboxPending int64
	PaymentWindow int64 // seconds; 0 for none
	// Numbers of orders: awaiting payment, and moved to each final state.
	Pending, Paid, Cancelled, Expired int64
	// Buckets is the sale's bucket count (1 for the one slot); Moved, of a
	// sale of several, the units its home has handed to them.
	Buckets, Moved int64
}

// Remaining is stock not yet sold.
func (v *SaleView) Remaining() int64 { return v.Stock - v.Sold }

// State is the sale's state; where several apply, the first of ended,
// upcoming, locked, sold_out wins.
func (v *SaleView) State() string {
	switch {
	case v.EndsAt > 0 && v.Now >= v.EndsAt:
		return "ended"
	case v.StartsAt > 0 && v.Now < v.StartsAt:
		return "upcoming"
	case v.Locked:
		return "locked"
	case v.Remaining() <= 0:
		return "sold_out"
	default:
		return "active"
	}
}

// SaleUpdate is an admin PUT: nil fields keep their value; a time of
// clearTime clears it (open window). PaymentWindow is in seconds; a sale
// created without one has none (0). A new window applies to the orders
// accepted after it.
type SaleUpdate struct {
	Stock         *int64
	Limit         *int64
	StartsAt      *int64
	EndsAt        *int64
	PaymentWindow *int64
	Buckets       *int64 // fixed at creation: another count on an update is ErrBucketsFixed
}

const clearTime = -1

// Sale reads a sale. It returns ErrNotFound or an error wrapping ErrUnavailable.
// A sale of several buckets is its home's view with the buckets' counts
// summed in (sumBuckets).
func (s *Store) Sale(ctx context.Context, sale string) (*SaleView, error) {
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
func (s *Store) sumBuckets(ctx context.Context, v *SaleView) (*SaleView, error) {
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
	for _, lane := range bs.names {
		b, _, err := s.admin(ctx, lane, "get")
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("sale %s: %w: bucket %s missing", v.ID, ErrUnavailable, lane)
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
func (s *Store) Upsert(ctx context.Context, sale string, u SaleUpdate) (view *SaleView, created bool, err error) {
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
func (s *Store) upsertOne(ctx context.Context, sale string, u SaleUpdate, names string) (view *SaleView, created bool, err error) {
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
	v, created, err := s.admin(ctx, sale, "upsert", optInt(u.Stock), optInt(u.Limit), optTime(u.StartsAt), optTime(u.EndsAt),
		optInt(u.PaymentWindow), optInt(u.Buckets), names)
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
func (s *Store) createBuckets(ctx context.Context, sale string, u SaleUpdate) (*SaleView, bool, error) {
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
	lane := SaleUpdate{Stock: &zero, Limit: u.Limit, StartsAt: u.StartsAt, EndsAt: u.EndsAt, PaymentWindow: u.PaymentWindow}
	for _, name := range names {
		if _, _, err := s.upsertOne(ctx, name, lane, ""); err != nil {
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
func (s *Store) upsertBuckets(ctx context.Context, bs *bucketSet, u SaleUpdate) (*SaleView, bool, error) {
	v, created, err := s.upsertOne(ctx, bs.sale, u, "")
	if errors.Is(err, errStockBelowMoved) {
		v, created, err = s.lowerBuckets(ctx, bs, u)
	}
	if err != nil {
		return nil, false, err
	}
	lane := SaleUpdate{Limit: u.Limit, StartsAt: u.StartsAt, EndsAt: u.EndsAt, PaymentWindow: u.PaymentWindow}
	if lane != (SaleUpdate{}) {
		for _, name := range bs.names {
			if _, _, err := s.upsertOne(ctx, name, lane, ""); err != nil {
				return nil, false, err
			}
		}
	}
	v, err = s.sumBuckets(ctx, v)
	return v, created, err
}

// Restock adds n units to a sale's stock, atomically with buyers, once
// even when the call is retried. It returns ErrNotFound, ErrStockCeiling
// when the stock would pass maxStock (the bound a PUT enforces; nothing
// changes then), or an error wrapping ErrUnavailable.
func (s *Store) Restock(ctx context.Context, sale string, n int64) (*SaleView, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	v, _, err := s.adminKeys(ctx, sale, []string{s.keys.Meta(sale), s.keys.Users(sale), s.keys.Outbox(sale),
		s.keys.Op(sale, hex.EncodeToString(id[:]))}, "restock", n, maxStock)
	if err != nil {
		return nil, err
	}
	// A sale of several buckets: the units join its pool, whence the
	// buckets draw.
	return s.sumBuckets(ctx, v)
}

// SetLocked locks or unlocks a sale. Once it returns, every reservation the
// script runs sees the new state.
func (s *Store) SetLocked(ctx context.Context, sale string, locked bool) (*SaleView, error) {
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
	for _, lane := range bs.names {
		if _, _, err := s.admin(ctx, lane, op); err != nil {
			return nil, err
		}
	}
	return s.sumBuckets(ctx, v)
}

// Ping runs a script, so that it checks the script path and not only the
// connection.
func (s *Store) Ping(ctx context.Context) error {
	v, err := s.loader.Run(ctx, scripts.Admin, []string{s.keys.Meta("_ready"), s.keys.Users("_ready"), s.keys.Outbox("_ready")}, "ping", s.keys.Events(), "_ready")
	if err != nil {
		return fmt.Errorf("ping: %w: %w", ErrUnavailable, err)
	}
	if v != "pong" {
		return fmt.Errorf("ping: %w: script answered %v", ErrUnavailable, v)
	}
	return nil
}

func (s *Store) admin(ctx context.Context, sale, op string, args ...any) (*SaleView, bool, error) {
	return s.adminKeys(ctx, sale, []string{s.keys.Meta(sale), s.keys.Users(sale), s.keys.Outbox(sale)}, op, args...)
}

// adminKeys runs the admin script and reads its reply. A refusal (the
// outcome of a code other than OK) comes with the sale as the script saw
// it, so that the caller can say which numbers refused the call; a failure
// to reach Redis or to read the reply comes with no view.
func (s *Store) adminKeys(ctx context.Context, sale string, keys []string, op string, args ...any) (*SaleView, bool, error) {
	reply, err := s.loader.Run(ctx, scripts.Admin, keys, append([]any{op, s.keys.Events(), sale}, args...)...)
	var n [adminReply]int64
	if err == nil {
		n, err = decodeAdmin(reply)
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w: %w", op, sale, ErrUnavailable, err)
	}
	s.changedOn(sale, false)
	v := &SaleView{ID: sale, Now: n[2], Stock: n[3], Sold: n[4], Limit: n[5], Locked: n[6] == 1,
		StartsAt: n[7], EndsAt: n[8], Buyers: n[9], OutboxPending: n[10], PaymentWindow: n[11],
		Pending: n[12], Paid: n[13], Cancelled: n[14], Expired: n[15], Buckets: n[16], Moved: n[17]}
	if err := outcome(scripts.Code(n[0])); err != nil {
		return v, false, err
	}
	return v, n[1] == 1, nil
}

// adminReply is the length of the admin script's reply: {code, created,
// now, stock, sold, limit, locked, starts, ends, buyers, outbox, window,
// pending, paid, cancelled, expired, buckets, moved}.
const adminReply = 18

// decodeAdmin reads the admin script's reply: adminReply integers, the
// first the outcome code. A reply of any other shape or length is an error.
func decodeAdmin(v any) ([adminReply]int64, error) {
	var n [adminReply]int64
	a, ok := v.([]any)
	if !ok || len(a) != adminReply {
		return n, fmt.Errorf("reply is %T of %d elements, want %d integers", v, len(a), adminReply)
	}
	for i := range a {
		if n[i], ok = a[i].(int64); !ok {
			return n, fmt.Errorf("reply element %d is %#v, want an integer", i, a[i])
		}
	}
	return n, nil
}

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
	lane := sale
	if b, ok := orderBucket(orderID); ok {
		bs, err := s.bucketsOf(ctx, sale)
		if err != nil {
			return scripts.Record{}, false, err
		}
		if bs == nil || b >= len(bs.names) {
			return scripts.Record{}, false, ErrOrderNotFound
		}
		lane = bs.names[b]
	}
	v, err := s.loader.Run(ctx, scripts.Order, s.orderKeys(lane), op, s.keys.Events(), sale, orderID)
	if err != nil {
		return scripts.Record{}, false, fmt.Errorf("%s %s/%s: %w: %w", op, sale, orderID, ErrUnavailable, err)
	}
	code, rec, now, changed, err := decodeOrder(v)
	if err != nil {
		return scripts.Record{}, false, fmt.Errorf("%s %s/%s: %w: %w", op, sale, orderID, ErrUnavailable, err)
	}
	if changed {
		s.changedOn(lane, true)
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

// Sweep expires up to limit of the sale's orders whose pay_by has come (Redis
// TIME), returning their units to the stock and to their buyers' allowance,
// in one atomic script call. It is idempotent and safe to run from any
// number of gateways at once: an order is expired by exactly one call, and
// one already paid, cancelled or expired is left alone. It returns an error
// wrapping ErrUnavailable when Redis could not answer; it blocks for the
// script call, bounded by ctx.
func (s *Store) Sweep(ctx context.Context, sale string, limit int) (SweepResult, error) {
	v, err := s.loader.Run(ctx, scripts.Order, s.orderKeys(sale), "sweep", s.keys.Events(), saleOf(sale), limit)
	if err == nil {
		var res SweepResult
		if res, err = decodeSweep(v); err == nil {
			if len(res.Expired) > 0 {
				s.changedOn(sale, true)
			}
			return res, nil
		}
	}
	return SweepResult{}, fmt.Errorf("sweep %s: %w: %w", sale, ErrUnavailable, err)
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
	case *p == clearTime:
		return "null"
	default:
		return strconv.FormatInt(*p, 10)
	}
}
