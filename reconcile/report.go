package reconcile

import (
	"fmt"
	"strings"

	"github.com/flashgate/flashgate/order"
)

// maxListed bounds the order ids a Report lists per kind of problem.
const maxListed = 10

// States are the five states in the order reports print them.
var States = []string{order.StateConfirmed, order.StatePendingPayment, order.StatePaid, order.StateCancelled, order.StateExpired}

// Report compares one sale in Redis with MySQL. The figures are read while
// the pipeline may be moving (Redis first, then MySQL in one consistent
// snapshot), so a busy sale can show a transient difference; Drift is exact
// once the outbox and the queue are drained.
type Report struct {
	Sale string

	// Redis.
	Sold          int64            // the meta hash's sold: units of live orders
	Buyers        int64            // users holding units (HLEN users)
	UserUnits     int64            // units over the users hash
	Accepted      int64            // orders in the orders hash: every order ever accepted
	AcceptedUnits int64            // their units, whatever their state
	LiveOrders    int64            // of Accepted, orders in a live state
	LiveUnits     int64            // their units
	States        map[string]int64 // orders per state (a bad record in none)
	Counters      map[string]int64 // the meta hash's pending, paid, cancelled and expired
	Due           int64            // orders in the due set (awaiting payment)
	OutboxEntries int64            // orders and changes of their state in the outbox, not yet confirmed by RabbitMQ (an entry may hold several orders; one that is not an order counts once)
	OutboxOrders  int64            // distinct orders among them
	// OutboxUnits is what the outbox's entries will change in MySQL's
	// live units once delivered: for each order with an entry there, its
	// live units in Redis minus those of its row (none for a missing row).
	// Negative when cancellations and expiries are on their way.
	OutboxUnits int64
	OutboxBad   int64 // outbox entries that are not orders
	BadRecords  int64 // orders hash values that are not order records (counted in Accepted, with no units)

	// A sale of several buckets: the figures above are summed over its
	// buckets (and its home, which holds none of them).
	Buckets   int      // 1 for a sale of one slot
	Lanes     []string // the buckets' ids, of a sale of several
	Stock     int64    // the home's stock: the whole sale's
	Moved     int64    // the home's moved: units handed to the buckets
	LaneStock int64    // the buckets' stock, summed
	Moving    int64    // units in move records whose second half has not run
	MovesBad  int64    // move records that are not moves (the settling pass skips them)
	Doubled   int      // order ids in the orders hashes of two buckets

	// MySQL.
	Rows         int64            // rows in orders
	Units        int64            // SUM(quantity), whatever the state
	RowsLive     int64            // rows in a live state
	UnitsLive    int64            // their SUM(quantity)
	RowStates    map[string]int64 // rows per state
	Users        int64            // distinct users of live rows
	LedgerUnits  int64            // sale_ledger.units
	LedgerOrders int64            // sale_ledger.orders

	// Order by order.
	Missing    int // accepted, neither in MySQL nor in the outbox: in RabbitMQ, or lost
	Unknown    int // in MySQL, never accepted in Redis
	Mismatched int // in both, with another user or quantity (a bad record is not compared)
	// StateDiffers counts orders in both whose states differ with no
	// outbox entry of Redis's state: the change is in RabbitMQ, or lost.
	// One whose MySQL state is final never resolves.
	StateDiffers int
	// StateInTransit counts orders in both whose states differ while an
	// outbox entry of Redis's state is still pending: not drift.
	StateInTransit int
	// Queued counts orders in MySQL whose view says queued (record flagged
	// "q", id not in the created set): their consumer's mark is on its way,
	// or was lost (MarkQueued marks them). Not drift: the orders are right.
	Queued int
	// CreatedNoRow counts orders whose view says created with no row in
	// MySQL: the view's promise broken (drift).
	CreatedNoRow int
	Examples     []string // up to a few ids of each problem, "kind id[ detail]"

	queued map[string][]string // the Queued orders' ids, by slot
}

// InTransit is sold − MySQL live units − outbox units: the live units
// between the outbox and MySQL (in RabbitMQ or a consumer's hands). It is 0
// when the pipeline is drained; anything else then is drift.
func (r *Report) InTransit() int64 { return r.Sold - r.UnitsLive - r.OutboxUnits }

// Drained reports whether nothing is pending or in transit.
func (r *Report) Drained() bool {
	return r.OutboxEntries == 0 && r.InTransit() == 0 && r.Missing == 0 && r.StateDiffers == 0
}

// Drift lists every disagreement, one sentence each; none means Redis and
// MySQL agree.
func (r *Report) Drift() []string {
	var d []string
	if r.InTransit() != 0 {
		d = append(d, fmt.Sprintf("sold %d ≠ MySQL live units %d + outbox units %d (difference %d: in transit, or lost/extra)",
			r.Sold, r.UnitsLive, r.OutboxUnits, r.InTransit()))
	}
	if r.LedgerUnits != r.Units || r.LedgerOrders != r.Rows {
		d = append(d, fmt.Sprintf("ledger %d units / %d orders ≠ orders table %d units / %d rows",
			r.LedgerUnits, r.LedgerOrders, r.Units, r.Rows))
	}
	if r.LiveUnits != r.Sold {
		d = append(d, fmt.Sprintf("Redis: sold %d ≠ units of live orders %d", r.Sold, r.LiveUnits))
	}
	if r.UserUnits != r.Sold {
		d = append(d, fmt.Sprintf("Redis: sold %d ≠ units held by users %d", r.Sold, r.UserUnits))
	}
	for _, st := range States[1:] { // confirmed has no counter
		if r.Counters[st] != r.States[st] {
			d = append(d, fmt.Sprintf("Redis: meta counter %s %d ≠ %d orders %s", counter(st), r.Counters[st], r.States[st], st))
		}
	}
	if r.Due != r.States[order.StatePendingPayment] {
		d = append(d, fmt.Sprintf("Redis: due set holds %d orders ≠ %d orders pending_payment", r.Due, r.States[order.StatePendingPayment]))
	}
	if r.BadRecords > 0 {
		d = append(d, fmt.Sprintf("%d orders hash values are not order records", r.BadRecords))
	}
	if r.OutboxBad > 0 {
		d = append(d, fmt.Sprintf("%d outbox entries are not orders", r.OutboxBad))
	}
	if r.Missing > 0 {
		d = append(d, fmt.Sprintf("%d accepted orders are neither in MySQL nor in the outbox (in transit, or lost)", r.Missing))
	}
	if r.Unknown > 0 {
		d = append(d, fmt.Sprintf("%d orders in MySQL were never accepted in Redis", r.Unknown))
	}
	if r.Mismatched > 0 {
		d = append(d, fmt.Sprintf("%d orders differ between Redis and MySQL (user or quantity)", r.Mismatched))
	}
	if r.CreatedNoRow > 0 {
		d = append(d, fmt.Sprintf("%d orders read created in the order view with no row in MySQL", r.CreatedNoRow))
	}
	if r.StateDiffers > 0 {
		d = append(d, fmt.Sprintf("%d orders have another state in MySQL than in Redis, with no outbox entry for it (in transit, or lost)", r.StateDiffers))
	}
	if r.Buckets > 1 {
		if r.Moved != r.LaneStock+r.Moving {
			d = append(d, fmt.Sprintf("Redis: moved %d ≠ buckets' stock %d + units moving %d (stock made or lost between the home and its buckets)",
				r.Moved, r.LaneStock, r.Moving))
		}
		if r.Moved > r.Stock {
			d = append(d, fmt.Sprintf("Redis: moved %d > stock %d (the buckets were handed more than the sale has)", r.Moved, r.Stock))
		}
		if r.Sold > r.Stock {
			d = append(d, fmt.Sprintf("Redis: the buckets sold %d > stock %d", r.Sold, r.Stock))
		}
		if r.MovesBad > 0 {
			d = append(d, fmt.Sprintf("%d move records are not moves", r.MovesBad))
		}
		if r.Doubled > 0 {
			d = append(d, fmt.Sprintf("%d orders are in two buckets", r.Doubled))
		}
	}
	if r.OutboxEntries == 0 && r.InTransit() == 0 && r.Buyers != r.Users {
		d = append(d, fmt.Sprintf("buyers: Redis %d ≠ MySQL distinct users of live orders %d", r.Buyers, r.Users))
	}
	return d
}

// counter is the meta hash's counter of orders in state.
func counter(state string) string {
	if state == order.StatePendingPayment {
		return "pending"
	}
	return state
}

// example lists "kind id" (and detail, when not empty) unless maxListed of
// the kind are listed already.
func (r *Report) example(kind, id, detail string) {
	n := 0
	for _, e := range r.Examples {
		if strings.HasPrefix(e, kind+" ") {
			n++
		}
	}
	if n < maxListed {
		e := kind + " " + id
		if detail != "" {
			e += " (" + detail + ")"
		}
		r.Examples = append(r.Examples, e)
	}
}
