package scripts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
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

// ReserveReply is the reserve script's reply: one Reserved per reservation
// sent, in the order sent, and the units the sale has left. The zero value
// has no reservation.
type ReserveReply struct {
	rs []Reserved
	// Left is the units the sale had left after the call, while it is
	// open; -1 when it is not open or the call did not know (a held sale,
	// the home slot of a sale of several buckets). 0: sold out.
	Left int64
}

// Len is the number of reservations.
func (r ReserveReply) Len() int { return len(r.rs) }

// At is the outcome of reservation i; it panics unless 0 ≤ i < Len().
func (r ReserveReply) At(i int) Reserved { return r.rs[i] }

// decodeReserve reads the reply to n reservations: one string of lines,
// each ending in a newline: the units left (an integer, -1 or more), then
// n lines of three tab-separated fields: an integer code, the order id
// (never empty with CodeOK) and the pay_by (an integer, 0 or more). A reply
// of any other shape or length is an error: a reply misread must never
// read as accepted. The order ids are substrings of the reply, so a
// batch's decoding allocates one slice, whatever its size.
func decodeReserve(v any, n int) (ReserveReply, error) {
	s, ok := v.(string)
	if !ok {
		return ReserveReply{}, fmt.Errorf("reply is %T, want a string", v)
	}
	first, s, ok := strings.Cut(s, "\n")
	left, err := strconv.ParseInt(first, 10, 64)
	if !ok || err != nil || left < -1 {
		return ReserveReply{}, fmt.Errorf("reply's first line is %q, want the units left", first)
	}
	rs := make([]Reserved, n)
	for i := range rs {
		line, rest, ok := strings.Cut(s, "\n")
		if !ok {
			return ReserveReply{}, fmt.Errorf("reply has %d lines for %d reservations", i, n)
		}
		s = rest
		code, id, payBy, ok := cut3(line)
		if !ok {
			return ReserveReply{}, fmt.Errorf("reply line %d is %q, want code, order id and pay_by", i, line)
		}
		c, err := strconv.ParseInt(code, 10, 64)
		if err != nil {
			return ReserveReply{}, fmt.Errorf("reply line %d is %q, want an integer code", i, line)
		}
		if id == "" && Code(c) == CodeOK {
			return ReserveReply{}, fmt.Errorf("reply line %d is %q, want an order id", i, line)
		}
		p, err := strconv.ParseInt(payBy, 10, 64)
		if err != nil || p < 0 {
			return ReserveReply{}, fmt.Errorf("reply line %d is %q, want a pay_by", i, line)
		}
		rs[i] = Reserved{Code: Code(c), OrderID: id, PayBy: p}
	}
	if s != "" {
		return ReserveReply{}, fmt.Errorf("reply has more than %d lines", n)
	}
	return ReserveReply{rs: rs, Left: left}, nil
}

// cut3 splits a line of exactly three tab-separated fields.
func cut3(line string) (a, b, c string, ok bool) {
	a, rest, ok1 := strings.Cut(line, "\t")
	b, c, ok2 := strings.Cut(rest, "\t")
	return a, b, c, ok1 && ok2 && !strings.Contains(c, "\t")
}

// Reserve runs the reserve script for the reservations of b on keys
// (lua/reserve.lua says which; an Idempotency-Key's index in b is its
// index in keys, counted from 1) and returns its reply, of exactly b.Len()
// outcomes. It blocks as Run does, returns Run's errors, or one wrapping
// ErrReply; in replicated mode the reply comes with an error wrapping
// ErrUnconfirmed when the replicas did not confirm it (so do Admin's and
// Order's). It is safe for concurrent use. The call's arguments are three
// whatever the batch's size, and its reply one string.
func (l *Loader) Reserve(ctx context.Context, keys []string, sale string, b *ReserveBatch) (ReserveReply, error) {
	v, err := l.Run(ctx, Reserve, keys, sale, int64(IdemTTL/time.Second), b.buf)
	if err != nil && !errors.Is(err, ErrUnconfirmed) {
		return ReserveReply{}, err
	}
	r, derr := decodeReserve(v, b.n)
	if derr != nil {
		return ReserveReply{}, replyError(Reserve, derr)
	}
	return r, err
}

// ReserveBatch is the reservations of one reserve call, packed as the
// script reads them: a line each of order id, user id, quantity and the
// index of the Idempotency-Key's key (0: none). No id holds a tab or a
// newline (API.md's ids; order ids are the gateway's). The zero value is
// an empty batch; Reset empties it for reuse.
type ReserveBatch struct {
	buf []byte
	n   int
}

// Add appends one reservation and returns b.
func (b *ReserveBatch) Add(orderID, userID string, quantity, idemKey int) *ReserveBatch {
	b.buf = append(b.buf, orderID...)
	b.buf = append(b.buf, '\t')
	b.buf = append(b.buf, userID...)
	b.buf = append(b.buf, '\t')
	b.buf = strconv.AppendInt(b.buf, int64(quantity), 10)
	b.buf = append(b.buf, '\t')
	b.buf = strconv.AppendInt(b.buf, int64(idemKey), 10)
	b.buf = append(b.buf, '\n')
	b.n++
	return b
}

// Grow makes room for about n more bytes of reservations: an order id,
// a user id and a dozen bytes each.
func (b *ReserveBatch) Grow(n int) { b.buf = slices.Grow(b.buf, n) }

// Len is the number of reservations in b.
func (b *ReserveBatch) Len() int { return b.n }

// Reset empties b, keeping its buffer.
func (b *ReserveBatch) Reset() { b.buf, b.n = b.buf[:0], 0 }

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
