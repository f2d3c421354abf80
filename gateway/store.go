package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/scripts"
)

// idemTTL is how long the first answer to an Idempotency-Key is kept.
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
// wrapping ErrUnavailable when Redis could not answer; then no Result is set
// and nothing may be promised to the buyers.
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
	arr, ok := v.([]any)
	if !ok || len(arr) != 2*len(rs) {
		return fmt.Errorf("reserve %s: %w: unexpected reply %T", sale, ErrUnavailable, v)
	}
	for i := range rs {
		code, _ := arr[2*i].(int64)
		id, _ := arr[2*i+1].(string)
		out[i] = Result{OrderID: id, Err: outcome(code)}
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
// ErrStockRequired, or an error wrapping ErrUnavailable.
func (s *Store) Upsert(ctx context.Context, sale string, u SaleUpdate) (view *SaleView, created bool, err error) {
	// The relay finds outboxes through this set; add first, so that no sale
	// can take an order before the relay can know of it.
	if err := s.rdb.SAdd(ctx, s.keys.Sales(), sale).Err(); err != nil {
		return nil, false, fmt.Errorf("upsert %s: %w: %w", sale, ErrUnavailable, err)
	}
	return s.admin(ctx, sale, "upsert", optInt(u.Stock), optInt(u.Limit), optTime(u.StartsAt), optTime(u.EndsAt))
}

// Restock adds n units to a sale's stock.
func (s *Store) Restock(ctx context.Context, sale string, n int64) (*SaleView, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	v, _, err := s.adminKeys(ctx, sale, []string{s.keys.Meta(sale), s.keys.Users(sale), s.keys.Outbox(sale),
		s.keys.Op(sale, hex.EncodeToString(id[:]))}, "restock", n)
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
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w: %w", op, sale, ErrUnavailable, err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 11 {
		return nil, false, fmt.Errorf("%s %s: %w: unexpected reply %v", op, sale, ErrUnavailable, v)
	}
	n := make([]int64, len(a))
	for i := range a {
		n[i], _ = a[i].(int64)
	}
	if err := outcome(n[0]); err != nil {
		return nil, false, err
	}
	return &SaleView{ID: sale, Now: n[2], Stock: n[3], Sold: n[4], Limit: n[5], Locked: n[6] == 1,
		StartsAt: n[7], EndsAt: n[8], Buyers: n[9], OutboxPending: n[10]}, n[1] == 1, nil
}

// OrderStatus is an order as the status endpoint shows it.
type OrderStatus struct {
	Created  bool // in MySQL; otherwise queued
	UserID   string
	Quantity int64
}

// Order reads an order's status. It returns ErrNotFound for an order the
// sale never accepted.
func (s *Store) Order(ctx context.Context, sale, orderID string) (*OrderStatus, error) {
	v, err := s.rdb.HGet(ctx, s.keys.Orders(sale), orderID).Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("order %s/%s: %w: %w", sale, orderID, ErrUnavailable, err)
	}
	// "q:QTY:USER" or "c:QTY:USER"
	parts := strings.SplitN(v, ":", 3)
	if len(parts) != 3 {
		return nil, fmt.Errorf("order %s/%s: %w: bad record %q", sale, orderID, ErrUnavailable, v)
	}
	q, _ := strconv.ParseInt(parts[1], 10, 64)
	return &OrderStatus{Created: parts[0] == "c", UserID: parts[2], Quantity: q}, nil
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
