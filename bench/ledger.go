package bench

import "sync"

// acceptance is the first 202 seen for an order id.
type acceptance struct {
	user string
	qty  int64
	key  string // Idempotency-Key of the request, "" when none
}

// ledger records every 202 and tells a legitimate replay (the same
// Idempotency-Key answered again with the same order) from a duplicate order
// id. It is safe for concurrent use; its size is one entry per order.
type ledger struct {
	mu       sync.Mutex
	orders   map[string]acceptance
	byKey    map[string]string // Idempotency-Key → order id of its 202
	dups     int64
	reserved int64
	replays  int64
	units    int64
}

func newLedger() *ledger {
	return &ledger{orders: map[string]acceptance{}, byKey: map[string]string{}}
}

// accept records a 202 for orderID, answering a request of user for qty
// units that carried Idempotency-Key key ("" when none). It returns the
// units of all distinct orders so far.
func (l *ledger) accept(orderID, user string, qty int64, key string) (units int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if key != "" {
		if prev, ok := l.byKey[key]; !ok {
			l.byKey[key] = orderID
		} else if prev != orderID {
			l.reserved++
		}
	}
	if a, ok := l.orders[orderID]; ok {
		if key != "" && a.key == key && a.user == user && a.qty == qty {
			l.replays++
		} else {
			l.dups++
		}
		return l.units
	}
	l.orders[orderID] = acceptance{user: user, qty: qty, key: key}
	l.units += qty
	return l.units
}

// figures fills the 202 part of f.
func (l *ledger) figures(f *Figures) {
	l.mu.Lock()
	defer l.mu.Unlock()
	perUser := make(map[string]int64, len(l.orders))
	f.AcceptedOrders, f.AcceptedUnits, f.UsersOverLimit = int64(len(l.orders)), 0, 0
	for _, a := range l.orders {
		f.AcceptedUnits += a.qty
		perUser[a.user] += a.qty
	}
	for _, n := range perUser {
		if n > f.Limit {
			f.UsersOverLimit++
		}
	}
	f.DupOrderIDs, f.IdemReserved = l.dups, l.reserved
}

// ids returns the accepted order ids.
func (l *ledger) ids() map[string]struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]struct{}, len(l.orders))
	for id := range l.orders {
		m[id] = struct{}{}
	}
	return m
}

// paid returns the units of the orders of ids and the number of users whose
// units in them add up to more than limit.
func (l *ledger) paid(ids map[string]struct{}, limit int64) (units, overLimit int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	perUser := map[string]int64{}
	for id := range ids {
		a := l.orders[id]
		units += a.qty
		perUser[a.user] += a.qty
	}
	for _, n := range perUser {
		if n > limit {
			overLimit++
		}
	}
	return units, overLimit
}

// Ledger is the 202 side of the invariant checks, as a run keeps it: every
// 202 recorded once per order id, a legitimate replay (the same
// Idempotency-Key answered again with the same order) told from a
// duplicate order id, and a key answered with two orders counted. The
// crowd of the process tests (bench/crowdtest) records its 202s in one,
// so that a run and a test judge them alike. It is safe for concurrent
// use; its size is one entry per order.
type Ledger struct{ l *ledger }

// NewLedger returns an empty Ledger.
func NewLedger() *Ledger { return &Ledger{l: newLedger()} }

// Accept records a 202 for orderID, the answer to a request of user for
// qty units that carried Idempotency-Key key ("" when none).
func (x *Ledger) Accept(orderID, user string, qty int64, key string) {
	x.l.accept(orderID, user, qty, key)
}

// Figures returns the 202 part of the Figures of a sale with per-user
// limit limit (Figures.AcceptedOrders to IdemReserved), and the replays
// recorded.
func (x *Ledger) Figures(limit int64) (f Figures, replays int64) {
	f.Limit = limit
	x.l.figures(&f)
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	return f, x.l.replays
}
