package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/scripts"
)

// idemTTL is how long the Idempotency-Key of an accepted reservation is
// kept, so that a repeat replays its answer. A refusal keeps no key:
// reserve.lua says why.
const idemTTL = 24 * time.Hour

// Store is the gateway's view of Redis: reservations and sale operations,
// each one script call. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	loader *scripts.Loader
	keys   scripts.Keys
}

// NewStore returns a Store on the given client and loaded scripts.
func NewStore(rdb redis.UniversalClient, loader *scripts.Loader, keys scripts.Keys) *Store {
	return &Store{rdb: rdb, loader: loader, keys: keys}
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
type Result struct {
	OrderID string
	Err     error
}

// Reserve applies rs in order in one atomic script call and writes one
// Result per reservation into out (len(out) ≥ len(rs)). It returns an error
// wrapping ErrUnavailable when Redis could not answer, or answered what the
// gateway cannot read; then no Result is set and nothing may be promised to
// the buyers. It blocks for the script call, bounded by ctx.
func (s *Store) Reserve(ctx context.Context, sale string, rs []Reservation, out []Result) error {
	keys := make([]string, 4, 4+len(rs))
	keys[0], keys[1], keys[2], keys[3] = s.keys.Meta(sale), s.keys.Users(sale), s.keys.Outbox(sale), s.keys.Orders(sale)
	args := make([]any, 2, 2+4*len(rs))
	args[0], args[1] = sale, int64(idemTTL/time.Second)
	for _, r := range rs {
		ik := 0
		if r.IdemKey != "" {
			keys = append(keys, s.keys.Idem(sale, r.IdemKey))
			ik = len(keys)
		}
		args = append(args, r.OrderID, r.UserID, r.Quantity, ik)
	}
	v, err := s.loader.Run(ctx, scripts.Reserve, keys, args...)
	if err != nil {
		return fmt.Errorf("reserve %s: %w: %w", sale, ErrUnavailable, err)
	}
	if err := decodeReserve(v, out[:len(rs)]); err != nil {
		return fmt.Errorf("reserve %s: %w: %w", sale, ErrUnavailable, err)
	}
	return nil
}

// decodeReserve reads the reserve script's reply into out: per reservation,
// an integer code and the order id, a string that an accepted reservation
// never leaves empty. A reply of any other shape or length is an error and
// sets no Result: a reply misread must never read as accepted.
func decodeReserve(v any, out []Result) error {
	arr, ok := v.([]any)
	if !ok {
		return fmt.Errorf("reply is %T, want an array", v)
	}
	if len(arr) != 2*len(out) {
		return fmt.Errorf("reply has %d elements for %d reservations", len(arr), len(out))
	}
	for i := range out {
		n, ok := arr[2*i].(int64)
		if !ok {
			clear(out)
			return fmt.Errorf("reply element %d is %#v, want an integer code", 2*i, arr[2*i])
		}
		id, ok := arr[2*i+1].(string)
		if !ok || id == "" && scripts.Code(n) == scripts.CodeOK {
			clear(out)
			return fmt.Errorf("reply element %d is %#v, want an order id", 2*i+1, arr[2*i+1])
		}
		out[i] = Result{OrderID: id, Err: outcome(scripts.Code(n))}
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
// clearTime clears it (open window).
type SaleUpdate struct {
	Stock    *int64
	Limit    *int64
	StartsAt *int64
	EndsAt   *int64
}

const clearTime = -1

// Sale reads a sale. It returns ErrNotFound or an error wrapping ErrUnavailable.
func (s *Store) Sale(ctx context.Context, sale string) (*SaleView, error) {
	v, _, err := s.admin(ctx, sale, "get")
	return v, err
}

// Upsert creates or updates a sale, atomically with buyers. created tells
// which. It returns ErrConflict (stock below sold), ErrBadWindow,
// ErrStockRequired, or an error wrapping ErrUnavailable. A refused create
// leaves the sale registry (Keys.Sales) as it was.
func (s *Store) Upsert(ctx context.Context, sale string, u SaleUpdate) (view *SaleView, created bool, err error) {
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
			return nil, false, ErrConflict
		}
		if u.StartsAt != nil && u.EndsAt != nil && *u.StartsAt > 0 && *u.EndsAt > 0 && *u.EndsAt <= *u.StartsAt {
			return nil, false, ErrBadWindow
		}
		if err := s.rdb.SAdd(ctx, s.keys.Sales(), sale).Err(); err != nil {
			return nil, false, fmt.Errorf("upsert %s: %w: %w", sale, ErrUnavailable, err)
		}
	}
	return s.admin(ctx, sale, "upsert", optInt(u.Stock), optInt(u.Limit), optTime(u.StartsAt), optTime(u.EndsAt))
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
	return v, err
}

// SetLocked locks or unlocks a sale. Once it returns, every reservation the
// script runs sees the new state.
func (s *Store) SetLocked(ctx context.Context, sale string, locked bool) (*SaleView, error) {
	op := "unlock"
	if locked {
		op = "lock"
	}
	v, _, err := s.admin(ctx, sale, op)
	return v, err
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

func (s *Store) adminKeys(ctx context.Context, sale string, keys []string, op string, args ...any) (*SaleView, bool, error) {
	v, err := s.loader.Run(ctx, scripts.Admin, keys, append([]any{op, s.keys.Events(), sale}, args...)...)
	var n [adminReply]int64
	if err == nil {
		n, err = decodeAdmin(v)
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w: %w", op, sale, ErrUnavailable, err)
	}
	if err := outcome(scripts.Code(n[0])); err != nil {
		return nil, false, err
	}
	return &SaleView{ID: sale, Now: n[2], Stock: n[3], Sold: n[4], Limit: n[5], Locked: n[6] == 1,
		StartsAt: n[7], EndsAt: n[8], Buyers: n[9], OutboxPending: n[10]}, n[1] == 1, nil
}

// adminReply is the length of the admin script's reply: {code, created,
// now, stock, sold, limit, locked, starts, ends, buyers, outbox}.
const adminReply = 11

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

// Order reads an order's record. It returns ErrNotFound for an order the
// sale never accepted, or an error wrapping ErrUnavailable.
func (s *Store) Order(ctx context.Context, sale, orderID string) (scripts.Record, error) {
	v, err := s.rdb.HGet(ctx, s.keys.Orders(sale), orderID).Result()
	if errors.Is(err, redis.Nil) {
		return scripts.Record{}, ErrNotFound
	}
	if err != nil {
		return scripts.Record{}, fmt.Errorf("order %s/%s: %w: %w", sale, orderID, ErrUnavailable, err)
	}
	r, err := scripts.ParseRecord(v)
	if err != nil {
		return scripts.Record{}, fmt.Errorf("order %s/%s: %w: %w", sale, orderID, ErrUnavailable, err)
	}
	return r, nil
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
