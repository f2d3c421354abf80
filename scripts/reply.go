package scripts

import (
	"context"
	"errors"
	"fmt"
)

// ErrReply is wrapped by the error of a typed call (Loader.Reserve,
// Loader.Admin, …) whose script answered a reply of another shape than the
// one the call reads: a script from a folder that does not match this
// binary, say. Nothing is read from such a reply, so nothing may be
// promised on it (DESIGN.md, invariant 7).
var ErrReply = errors.New("unexpected script reply")

// Each typed call runs one script with Run (NOSCRIPT handled there) and
// decodes its reply in one place, the decode function of its shape below,
// as each of go-redis's *Cmd types owns the decoding of its reply. Run's
// own errors come back as they are; a reply of another shape is an error
// wrapping ErrReply. The caller builds the keys and arguments (the
// script's header says which) and maps the codes to its own errors.

// call runs the script name and decodes its reply with decode.
func call[T any](ctx context.Context, l *Loader, name string, decode func(any) (T, error), keys []string, args []any) (T, error) {
	v, err := l.Run(ctx, name, keys, args...)
	if err == nil || errors.Is(err, ErrUnconfirmed) {
		r, derr := decode(v)
		if derr == nil {
			return r, err // the reply, with ErrUnconfirmed in replicated mode when unconfirmed
		}
		err = replyError(name, derr)
	}
	var zero T
	return zero, err
}

func replyError(name string, err error) error {
	return fmt.Errorf("scripts: %s: %w: %w", name, ErrReply, err)
}

// Reserved is one reservation's outcome in the reserve script's reply.
type Reserved struct {
	Code Code
	// OrderID is the accepted order's id, which differs from the one sent
	// when an Idempotency-Key replays an earlier order; never empty with
	// CodeOK, empty or not with a refusal.
	OrderID string
	// PayBy is the accepted order's payment deadline, Unix ms (Redis's
	// clock); 0 when its sale asks no payment. Never negative.
	PayBy int64
}

// reserveWidth is the number of values per reservation in the reserve
// script's reply: code, order id, pay_by.
const reserveWidth = 3

// ReserveReply is the reserve script's reply: one Reserved per reservation
// sent, in the order sent. It reads the reply where go-redis left it, so
// that a batch's decoding allocates nothing. The zero value has no
// reservation.
type ReserveReply struct{ a []any }

// Len is the number of reservations.
func (r ReserveReply) Len() int { return len(r.a) / reserveWidth }

// At is the outcome of reservation i; it panics unless 0 ≤ i < Len().
func (r ReserveReply) At(i int) Reserved {
	j := reserveWidth * i
	return Reserved{Code: Code(r.a[j].(int64)), OrderID: r.a[j+1].(string), PayBy: r.a[j+2].(int64)}
}

// decodeReserve reads the reply to n reservations: per reservation an
// integer code, the order id (a string that an accepted reservation never
// leaves empty) and the pay_by (an integer, 0 or more). A reply of any
// other shape or length is an error: a reply misread must never read as
// accepted.
func decodeReserve(v any, n int) (ReserveReply, error) {
	a, ok := v.([]any)
	if !ok {
		return ReserveReply{}, fmt.Errorf("reply is %T, want an array", v)
	}
	if len(a) != reserveWidth*n {
		return ReserveReply{}, fmt.Errorf("reply has %d elements for %d reservations", len(a), n)
	}
	for j := 0; j < len(a); j += reserveWidth {
		code, ok := a[j].(int64)
		if !ok {
			return ReserveReply{}, fmt.Errorf("reply element %d is %#v, want an integer code", j, a[j])
		}
		if id, ok := a[j+1].(string); !ok || id == "" && Code(code) == CodeOK {
			return ReserveReply{}, fmt.Errorf("reply element %d is %#v, want an order id", j+1, a[j+1])
		}
		if payBy, ok := a[j+2].(int64); !ok || payBy < 0 {
			return ReserveReply{}, fmt.Errorf("reply element %d is %#v, want a pay_by", j+2, a[j+2])
		}
	}
	return ReserveReply{a: a}, nil
}

// Reserve runs the reserve script for n reservations (keys and args as
// lua/reserve.lua says: 4 arguments per reservation after the sale and the
// TTL) and returns its reply, of exactly n outcomes. It blocks as Run
// does, returns Run's errors, or one wrapping ErrReply; in replicated mode
// the reply comes with an error wrapping ErrUnconfirmed when the replicas
// did not confirm it (so do Admin's and Order's). It is safe for
// concurrent use; on success it allocates nothing beyond Run.
func (l *Loader) Reserve(ctx context.Context, keys []string, n int, args ...any) (ReserveReply, error) {
	v, err := l.Run(ctx, Reserve, keys, args...)
	if err != nil && !errors.Is(err, ErrUnconfirmed) {
		return ReserveReply{}, err
	}
	r, derr := decodeReserve(v, n)
	if derr != nil {
		return ReserveReply{}, replyError(Reserve, derr)
	}
	return r, err
}

// Room is a sale's waiting room as the admin and queue scripts read it
// (lua/queue.lua says what each field is).
type Room struct {
	Mode     int64 // 0 off, 1 fifo, 2 random
	Rate     int64 // admissions per second
	Pass     int64 // seconds
	Joined   int64
	Prequeue int64 // the random room's pre-queue once sealed, else -1
	// The admission clock: its version, and its anchor (Unix ms, head).
	Version, At, Head int64
	Key               string // the ticket key, hex; "" for a sale that never had a room
}

// JoinReply is the queue script's reply: the outcome, each buyer's join
// number (none with a refusal, which is the whole call's) and the room and
// sale as the script saw them after the call's joins.
type JoinReply struct {
	Code             Code
	Joins            []int64 // in the order of the call's users
	Room             Room
	StartsAt, EndsAt int64
	Now              int64
}

// joinWidth is the length of the queue script's reply before its join
// numbers: {code, joined, prequeue, version, at, head, rate, pass, room,
// starts, ends, now}, integers, and the key, a string.
const joinWidth = 13

// decodeJoin reads the queue script's reply to a call for users buyers: a
// refusal of joinWidth elements, or an acceptance followed by one join
// number (≥ 1) per buyer. A reply of any other shape is an error.
func decodeJoin(v any, users int) (JoinReply, error) {
	var n [joinWidth - 1]int64
	a, ok := v.([]any)
	if !ok || len(a) < joinWidth {
		return JoinReply{}, fmt.Errorf("reply is %T of %d elements, want at least %d", v, len(a), joinWidth)
	}
	for i := range n {
		if n[i], ok = a[i].(int64); !ok {
			return JoinReply{}, fmt.Errorf("reply element %d is %#v, want an integer", i, a[i])
		}
	}
	key, ok := a[joinWidth-1].(string)
	if !ok {
		return JoinReply{}, fmt.Errorf("reply element %d is %#v, want a string", joinWidth-1, a[joinWidth-1])
	}
	r := JoinReply{Code: Code(n[0]), StartsAt: n[9], EndsAt: n[10], Now: n[11],
		Room: Room{Joined: n[1], Prequeue: n[2], Version: n[3], At: n[4], Head: n[5], Rate: n[6], Pass: n[7],
			Mode: n[8], Key: key}}
	if r.Code != CodeOK {
		if len(a) != joinWidth {
			return JoinReply{}, fmt.Errorf("refusal %d carries %d join numbers", r.Code, len(a)-joinWidth)
		}
		return r, nil
	}
	if len(a) != joinWidth+users || key == "" {
		return JoinReply{}, fmt.Errorf("reply accepts %d joins of %d with key %q", len(a)-joinWidth, users, key)
	}
	r.Joins = make([]int64, users)
	for i := range r.Joins {
		j, ok := a[joinWidth+i].(int64)
		if !ok || j < 1 {
			return JoinReply{}, fmt.Errorf("reply element %d is %#v, want a join number", joinWidth+i, a[joinWidth+i])
		}
		r.Joins[i] = j
	}
	return r, nil
}

// Join runs the queue script for users (at least one) on keys (as
// lua/queue.lua says) and returns its reply. It blocks as Run does,
// returns Run's errors, or one wrapping ErrReply.
func (l *Loader) Join(ctx context.Context, keys []string, users []string) (JoinReply, error) {
	if len(users) == 0 {
		return JoinReply{}, errors.New("scripts: queue: no user to join")
	}
	args := make([]any, len(users))
	for i, u := range users {
		args[i] = u
	}
	return call(ctx, l, Queue, func(v any) (JoinReply, error) { return decodeJoin(v, len(users)) }, keys, args)
}

// OrderReply is the order script's reply to pay, cancel and get.
type OrderReply struct {
	Code Code
	// Record is the order as the call left it; the zero Record, and
	// Changed false, with CodeOrderNotFound.
	Record Record
	// Now is Redis's clock at the call, Unix ms.
	Now int64
	// Changed is true when the call changed the order (expired it too).
	Changed bool
}

// decodeOrder reads the order script's reply to pay, cancel or get: an
// integer code, the record (a string, empty only with ORDER_NOT_FOUND), the
// time and the changed flag. A reply of any other shape is an error.
func decodeOrder(v any) (OrderReply, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return OrderReply{}, fmt.Errorf("reply is %T of %d elements, want 4", v, len(a))
	}
	n, ok1 := a[0].(int64)
	str, ok2 := a[1].(string)
	now, ok3 := a[2].(int64)
	ch, ok4 := a[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return OrderReply{}, fmt.Errorf("reply %#v, want code, record, time, changed", a)
	}
	r := OrderReply{Code: Code(n), Now: now}
	if str == "" {
		if r.Code != CodeOrderNotFound && r.Code != CodeRepairing {
			return OrderReply{}, fmt.Errorf("reply %#v has no record", a)
		}
		return r, nil
	}
	rec, err := ParseRecord(str)
	if err != nil {
		return OrderReply{}, err
	}
	r.Record, r.Changed = rec, ch == 1
	return r, nil
}

// Order runs pay, cancel or get of the order script (keys and args as
// lua/order.lua says, the operation first) and returns its reply. It
// blocks as Run does, returns Run's errors, or one wrapping ErrReply (also
// for a record ParseRecord cannot read).
func (l *Loader) Order(ctx context.Context, keys []string, args ...any) (OrderReply, error) {
	return call(ctx, l, Order, decodeOrder, keys, args)
}

// Expiry is one order a sweep expired, with the pay_by it missed.
type Expiry struct {
	OrderID string
	PayBy   int64 // Unix ms
}

// SweepReply is the order script's reply to sweep.
type SweepReply struct {
	Now     int64    // Redis's clock, Unix ms
	Expired []Expiry // the orders it expired, their units back; nil for none
	Next    int64    // pay_by of the earliest order still awaiting payment; 0: none
}

// decodeSweep reads the sweep's reply {now, next, id, payby, id, payby, …}.
func decodeSweep(v any) (SweepReply, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 || len(a)%2 != 0 {
		return SweepReply{}, fmt.Errorf("reply is %T of %d elements, want now, next and pairs", v, len(a))
	}
	var r SweepReply
	var ok1, ok2 bool
	r.Now, ok1 = a[0].(int64)
	r.Next, ok2 = a[1].(int64)
	if !ok1 || !ok2 {
		return SweepReply{}, fmt.Errorf("reply %#v, want integers now and next", a[:2])
	}
	if len(a) > 2 {
		r.Expired = make([]Expiry, 0, (len(a)-2)/2)
	}
	for i := 2; i < len(a); i += 2 {
		id, ok1 := a[i].(string)
		pb, ok2 := a[i+1].(int64)
		if !ok1 || !ok2 {
			return SweepReply{}, fmt.Errorf("reply elements %d, %d are %#v, %#v, want an order id and a pay_by", i, i+1, a[i], a[i+1])
		}
		r.Expired = append(r.Expired, Expiry{OrderID: id, PayBy: pb})
	}
	return r, nil
}

// Sweep runs the order script's sweep (args "sweep" first, as
// lua/order.lua says) and returns its reply. It blocks as Run does,
// returns Run's errors, or one wrapping ErrReply.
func (l *Loader) Sweep(ctx context.Context, keys []string, args ...any) (SweepReply, error) {
	return call(ctx, l, Order, decodeSweep, keys, args)
}

// MoveReply is the move script's reply: the outcome, and the units this
// call moved (0 for a repeat, a fence or an unfence).
type MoveReply struct {
	Code Code
	N    int64
}

// decodeMove reads the move script's reply {code, n}, n never negative.
func decodeMove(v any) (MoveReply, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return MoveReply{}, fmt.Errorf("reply %#v, want code and units", v)
	}
	code, ok1 := a[0].(int64)
	n, ok2 := a[1].(int64)
	if !ok1 || !ok2 || n < 0 {
		return MoveReply{}, fmt.Errorf("reply %#v, want code and units", v)
	}
	return MoveReply{Code: Code(code), N: n}, nil
}

// Move runs one operation of the move script (keys and args as
// lua/move.lua says, the operation first) and returns its reply. It blocks
// as Run does, returns Run's errors, or one wrapping ErrReply.
func (l *Loader) Move(ctx context.Context, keys []string, args ...any) (MoveReply, error) {
	return call(ctx, l, Move, decodeMove, keys, args)
}

// RepairReply is the repair script's reply.
type RepairReply struct {
	Applied bool  // the sale was held and this call applied the orders
	Changed int64 // orders whose record changed
	Raised  int64 // units the stock was raised by
}

// decodeRepair reads the repair script's reply {held, changed, raised}:
// three integers.
func decodeRepair(v any) (RepairReply, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return RepairReply{}, fmt.Errorf("reply %#v, want held, changed, raised", v)
	}
	h, ok1 := a[0].(int64)
	changed, ok2 := a[1].(int64)
	raised, ok3 := a[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return RepairReply{}, fmt.Errorf("reply %#v, want three integers", v)
	}
	return RepairReply{Applied: h == 1, Changed: changed, Raised: raised}, nil
}

// Repair runs the repair script (keys and args as lua/repair.lua says) and
// returns its reply. It blocks as Run does, returns Run's errors, or one
// wrapping ErrReply.
func (l *Loader) Repair(ctx context.Context, keys []string, args ...any) (RepairReply, error) {
	return call(ctx, l, Repair, decodeRepair, keys, args)
}

// decodeCount reads a reply that is one integer, 0 or more.
func decodeCount(v any) (int64, error) {
	n, ok := v.(int64)
	if !ok || n < 0 {
		return 0, fmt.Errorf("reply %#v, want a count", v)
	}
	return n, nil
}

// decodeHold reads the hold script's reply {held (0 or 1), run id}.
func decodeHold(v any) (held bool, err error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return false, fmt.Errorf("reply %#v, want held and a run id", v)
	}
	h, ok1 := a[0].(int64)
	_, ok2 := a[1].(string)
	if !ok1 || !ok2 {
		return false, fmt.Errorf("reply %#v, want held and a run id", v)
	}
	return h == 1, nil
}
