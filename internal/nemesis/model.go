package nemesis

// The model of one sale that porcupine checks a history against: what a
// sale's answers may be, given the operations linearized before them.

import (
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Kinds of operation in a sale's history.
const (
	KindBuy     = "buy"
	KindPay     = "pay"
	KindCancel  = "cancel"
	KindLock    = "lock"
	KindUnlock  = "unlock"
	KindRestock = "restock"
	// KindView is a read of the admin view, which Redis serves atomically
	// (sale.View): it pins the sale's figures at one point, expiries
	// included.
	KindView = "view"
	// KindExpire is not a request: the sweeper (or a late pay or cancel)
	// expiring an order the run's end found expired, placed by the checker
	// anywhere from the order's pay_by on.
	KindExpire = "expire"
)

// Input is one operation as the model reads it. Times are nanoseconds
// since the run began, on the test's clock, which is the servers' too (one
// machine): the model needs them because an order's fate depends on
// whether its pay_by had passed.
type Input struct {
	Kind  string
	User  string // buy
	Qty   int    // buy: units; restock: units added
	Key   string // buy: Idempotency-Key, "" for none
	Order string // pay, cancel, expire: the order
	// PayBy is the order's deadline (pay, cancel, expire), 0 for an order
	// without one.
	PayBy        int64
	Call, Return int64
}

// Output is an operation's answer: the HTTP code, the body's status, for
// a 202 the order id and its pay_by (0 without a payment window), and for
// a view the admin view's figures.
type Output struct {
	Code   int
	Status string
	Order  string
	PayBy  int64
	View   ViewFigures
}

// ViewFigures are the admin view's figures that the model keeps too.
type ViewFigures struct {
	Remaining, Buyers, Pending int
	Locked                     bool
}

// Order states, as the model keeps them.
const (
	stConfirmed byte = 'C'
	stPending   byte = 'P'
	stPaid      byte = 'D'
	stCancelled byte = 'X'
	stExpired   byte = 'E'
)

type modelOrder struct {
	user  string
	qty   int
	state byte
	payBy int64
}

// state is a sale as the model sees it. It is never changed once made:
// a step returns a changed copy.
type state struct {
	remaining int
	locked    bool
	// lockedUntil and zeroUntil are the latest times at which the sale may
	// have been locked, or sold out, before its last unlock or the last
	// change that gave units back: a gateway may answer 423 or 410 from
	// its memory of closed sales (cache.closed_ttl) until then plus the
	// TTL, when the announcement of the change reaches it late.
	lockedUntil, zeroUntil int64
	units                  map[string]int
	orders                 map[string]modelOrder
	// keys are the Idempotency-Keys of the sale's orders: a buy with one
	// of them is answered its order again. A refused buy keeps no key
	// (scripts/lua/reserve.lua; TestRefusedKeyBuysLater).
	keys map[string]string
}

func (s *state) clone() *state {
	c := *s
	c.units = maps.Clone(s.units)
	c.orders = maps.Clone(s.orders)
	c.keys = maps.Clone(s.keys)
	return &c
}

// key is the state written out in a canonical order, for Equal and Hash.
func (s *state) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%t|%d|%d|", s.remaining, s.locked, s.lockedUntil, s.zeroUntil)
	for _, u := range slices.Sorted(maps.Keys(s.units)) {
		if n := s.units[u]; n != 0 {
			b.WriteString(u + "=" + strconv.Itoa(n) + ",")
		}
	}
	b.WriteByte('|')
	for _, id := range slices.Sorted(maps.Keys(s.orders)) {
		b.WriteString(id + "=" + string(s.orders[id].state) + ",")
	}
	b.WriteByte('|')
	for _, k := range slices.Sorted(maps.Keys(s.keys)) {
		b.WriteString(k + "=" + s.keys[k] + ",")
	}
	return b.String()
}

// never is a time before any operation: a sale that was never locked or
// sold out.
const never = math.MinInt64 / 2

// SaleSpec is what the model must know of a sale beyond its history.
type SaleSpec struct {
	ID    string
	Stock int
	Limit int
	// Window reports a sale with a payment window: its 202s are
	// pending_payment orders.
	Window bool
	// Stale is how long a gateway may answer a refusal it remembers after
	// the sale changed (cache.closed_ttl plus the announcement's way).
	Stale int64
	// Skew is the clock skew tolerated between the test and Redis.
	Skew int64
}

// Model is porcupine's model of the sale spec describes.
func Model(spec SaleSpec) porcupine.Model {
	return porcupine.Model{
		Init: func() any {
			return &state{remaining: spec.Stock, lockedUntil: never, zeroUntil: never,
				units: map[string]int{}, orders: map[string]modelOrder{}, keys: map[string]string{}}
		},
		Step: func(st, in, out any) (bool, any) {
			s := st.(*state)
			ok, next := step(spec, s, in.(Input), out.(Output))
			if !ok {
				return false, s
			}
			return true, next
		},
		Equal: func(a, b any) bool { return a.(*state).key() == b.(*state).key() },
		Hash: func(st any) uint64 {
			h := fnv.New64a()
			h.Write([]byte(st.(*state).key()))
			return h.Sum64()
		},
		DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
		DescribeState: func(st any) string {
			s := st.(*state)
			return fmt.Sprintf("remaining %d, locked %t, users %v", s.remaining, s.locked, s.units)
		},
	}
}

// describe is one operation in words, for porcupine's visualization.
func describe(in Input, out Output) string {
	var op string
	switch in.Kind {
	case KindBuy:
		op = fmt.Sprintf("buy(%s, %d", in.User, in.Qty)
		if in.Key != "" {
			op += ", key " + in.Key
		}
		op += ")"
	case KindPay, KindCancel, KindExpire:
		op = in.Kind + "(" + in.Order + ")"
	case KindRestock:
		op = fmt.Sprintf("restock(%d)", in.Qty)
	case KindView:
		v := out.View
		return fmt.Sprintf("view() → %d remaining, %d buyers, %d pending, locked %t", v.Remaining, v.Buyers, v.Pending, v.Locked)
	default:
		op = in.Kind + "()"
	}
	ans := fmt.Sprintf("%d %s", out.Code, out.Status)
	if out.Order != "" {
		ans += " " + out.Order
	}
	return op + " → " + ans
}

// step applies one operation to s: whether its answer is one the sale
// could give in state s, and the state after it.
func step(spec SaleSpec, s *state, in Input, out Output) (bool, *state) {
	switch in.Kind {
	case KindBuy:
		return stepBuy(spec, s, in, out)
	case KindPay, KindCancel, KindExpire:
		return stepOrder(s, in, out, spec.Skew)
	case KindLock, KindUnlock:
		if out.Code != 200 {
			return false, s
		}
		n := s.clone()
		n.locked = in.Kind == KindLock
		if in.Kind == KindUnlock && s.locked {
			n.lockedUntil = max(n.lockedUntil, in.Return)
		}
		return true, n
	case KindRestock:
		if out.Code != 200 {
			return false, s
		}
		return true, s.giveBack(in.Qty, in.Return)
	case KindView:
		return out.Code == 200 && out.View == s.figures(), s
	}
	return false, s
}

// figures are what the admin view of s says.
func (s *state) figures() ViewFigures {
	f := ViewFigures{Remaining: s.remaining, Locked: s.locked}
	for _, n := range s.units {
		if n > 0 {
			f.Buyers++
		}
	}
	for _, o := range s.orders {
		if o.state == stPending {
			f.Pending++
		}
	}
	return f
}

// giveBack is s with units added to the remaining stock by an operation
// that returned at ret.
func (s *state) giveBack(units int, ret int64) *state {
	n := s.clone()
	if n.remaining == 0 && units > 0 {
		n.zeroUntil = max(n.zeroUntil, ret)
	}
	n.remaining += units
	return n
}

func stepBuy(spec SaleSpec, s *state, in Input, out Output) (bool, *state) {
	// A request without an Idempotency-Key may be refused from a gateway's
	// memory of closed sales; one with a key always goes to Redis.
	cached := in.Key == ""
	if id, ok := s.keys[in.Key]; ok && !cached {
		// A repeat of a key that bought: the first answer again, nothing
		// reserved.
		return out.Code == 202 && out.Order == id, s
	}
	mayBeStaleLocked := cached && in.Call <= s.lockedUntil+spec.Stale
	mayBeStaleZero := cached && in.Call <= s.zeroUntil+spec.Stale
	held := s.units[in.User]
	switch {
	case out.Code == 423 && out.Status == "locked":
		return s.locked || mayBeStaleLocked, s
	case out.Code == 410 && out.Status == "sold_out":
		if s.locked {
			// Redis would say locked; only a remembered sold-out says this.
			return cached && (s.remaining == 0 || mayBeStaleZero), s
		}
		// Redis says so only to a buyer under the limit; a gateway's
		// memory says so to anyone (gateway/closed.go).
		if s.remaining == 0 && (held+in.Qty <= spec.Limit || cached) {
			return true, s
		}
		return mayBeStaleZero, s
	case out.Code == 409 && out.Status == "limit_reached":
		return !s.locked && held+in.Qty > spec.Limit, s
	case out.Code == 409 && out.Status == "insufficient_stock":
		return !s.locked && held+in.Qty <= spec.Limit && s.remaining > 0 && s.remaining < in.Qty, s
	case out.Code == 202:
		if s.locked || held+in.Qty > spec.Limit || s.remaining < in.Qty || out.Order == "" {
			return false, s
		}
		if _, dup := s.orders[out.Order]; dup {
			return false, s
		}
		n := s.clone()
		n.remaining -= in.Qty
		n.units[in.User] = held + in.Qty
		st := stConfirmed
		if spec.Window {
			st = stPending
		}
		n.orders[out.Order] = modelOrder{user: in.User, qty: in.Qty, state: st, payBy: out.PayBy}
		if !cached {
			n.keys[in.Key] = out.Order
		}
		return true, n
	}
	return false, s
}

// stepOrder is a pay, a cancel, or an expiry of one order (API.md, Orders
// and payment; scripts/lua/order.lua): a pending order may be paid or
// cancelled before its pay_by and is refused as expired at or after it.
func stepOrder(s *state, in Input, out Output, skew int64) (bool, *state) {
	o, ok := s.orders[in.Order]
	if !ok {
		// An order the model has not seen created: a pay or cancel may
		// only find none.
		return out.Code == 404 && in.Kind != KindExpire, s
	}
	// Whether the operation may have run before, or at or after, pay_by.
	mayBeBefore := o.state == stPending && in.Call <= o.payBy+skew
	mayBeAfter := o.state == stPending && in.Return >= o.payBy-skew
	finish := func(to byte) *state {
		n := s.giveBack(o.qty, in.Return)
		n.units[o.user] -= o.qty
		o.state = to
		n.orders[in.Order] = o
		return n
	}
	switch in.Kind {
	case KindExpire:
		if o.state != stPending {
			return false, s
		}
		return true, finish(stExpired)
	case KindPay:
		switch {
		case out.Code == 200:
			if o.state == stPaid {
				return true, s
			}
			if !mayBeBefore {
				return false, s
			}
			n := s.clone()
			o.state = stPaid
			n.orders[in.Order] = o
			return true, n
		case out.Status == "order_expired":
			return o.state == stExpired || mayBeAfter, s
		case out.Status == "order_cancelled":
			return o.state == stCancelled, s
		case out.Status == "conflict":
			return o.state == stConfirmed, s
		}
	case KindCancel:
		switch {
		case out.Code == 200:
			if o.state == stCancelled {
				return true, s
			}
			if o.state == stConfirmed || mayBeBefore {
				return true, finish(stCancelled)
			}
			return false, s
		case out.Status == "order_paid":
			return o.state == stPaid, s
		case out.Status == "order_expired":
			return o.state == stExpired || mayBeAfter, s
		}
	}
	return false, s
}
