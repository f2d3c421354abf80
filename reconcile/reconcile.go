// Package reconcile audits one sale across Redis and MySQL: it reads the
// sale's figures and orders on both sides and lists every disagreement, so
// that an operator (`flashgate reconcile`) or a test can tell an order in
// transit from one lost or invented (Invariant 3: every 202 becomes exactly
// one MySQL row, and no row exists without a reservation), and a state on
// its way to MySQL from one that differs for good (Invariant 8: MySQL's
// state follows Redis's and never leaves paid, cancelled or expired).
//
// Units are compared as live units (package order: pending_payment, paid,
// confirmed): Redis's sold counts them, and so do MySQL's rows in those
// states; the units of a cancelled or expired order are back in the stock.
//
// A sale of several buckets (API.md "buckets", gateway/buckets.go) sells in
// its buckets, each a slot with its own meta, users, orders, outbox and due
// set, whose orders name the sale; its home slot sells nothing. Redis's
// figures are then the buckets' summed, and MySQL's are the sale's as ever.
// Its stock is checked too: every unit the home handed out (moved) is in a
// bucket's stock or in a move whose second half has not run.
package reconcile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/scripts"
)

// ErrNoSale is returned by Sale when neither Redis nor MySQL knows the
// sale.
var ErrNoSale = errors.New("no such sale")

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
	Examples       []string // up to a few ids of each problem, "kind id[ detail]"
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

// Sale reads one sale from Redis and MySQL and compares them order by
// order. It blocks while it reads every order of the sale, in pages (scans,
// never one long call that would stall Redis), so it is an operator's tool,
// not something to run per request. Concurrent calls are safe. It returns
// ErrNoSale when neither side knows the sale, or a wrapped I/O error.
//
// A value of the orders hash that is not a record (scripts.ParseRecord) is
// counted in BadRecords, which is drift; its order still counts as accepted
// (its id is there), with no units and no state, and is missing when
// neither MySQL nor the outbox holds it.
//
// A sale of several buckets is read bucket by bucket, each atomically; the
// sum is not one instant, so a sale that is selling can show a difference
// that a sale at rest does not.
func Sale(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys, db *sql.DB, sale string) (*Report, error) {
	r := &Report{Sale: sale, Buckets: 1, States: map[string]int64{}, Counters: map[string]int64{}, RowStates: map[string]int64{}}

	// Redis: the home first, which names the buckets of a sale of several,
	// then every slot that holds orders, then the moves between them.
	exists, err := r.readHome(ctx, rdb, keys)
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", sale, err)
	}
	orders := map[string]*accepted{}
	// inOutbox holds, per order, the states of its entries still there.
	inOutbox := map[string]map[string]bool{}
	for _, slot := range append([]string{sale}, r.Lanes...) {
		if err := r.readSlot(ctx, rdb, keys, slot, orders, inOutbox); err != nil {
			return nil, fmt.Errorf("reconcile %s: %w", sale, err)
		}
	}
	if r.Buckets > 1 {
		if err := r.readMoves(ctx, rdb, keys); err != nil {
			return nil, fmt.Errorf("reconcile %s: %w", sale, err)
		}
	}
	r.OutboxOrders = int64(len(inOutbox))
	liveUnits := func(a *accepted) int64 {
		if a == nil || a.bad || !order.Live(a.rec.State) {
			return 0
		}
		return a.rec.Quantity
	}
	for id := range inOutbox {
		r.OutboxUnits += liveUnits(orders[id]) // minus the row's, below
	}

	// MySQL: one snapshot for the rows and the ledger.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: mysql: %w", sale, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	rows, err := tx.QueryContext(ctx, `SELECT order_id, user_id, quantity, state FROM orders WHERE sale_id = ?`, sale)
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: mysql: %w", sale, err)
	}
	users := map[string]struct{}{}
	for rows.Next() {
		var id, user, state string
		var qty int64
		if err := rows.Scan(&id, &user, &qty, &state); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reconcile %s: mysql: %w", sale, err)
		}
		r.Rows++
		r.Units += qty
		r.RowStates[state]++
		live := order.Live(state)
		if live {
			r.RowsLive++
			r.UnitsLive += qty
			users[user] = struct{}{}
			if inOutbox[id] != nil {
				r.OutboxUnits -= qty
			}
		}
		a := orders[id]
		switch {
		case a == nil:
			r.Unknown++
			r.example("unknown", id, "")
			continue
		case a.bad:
		case a.rec.UserID != user || a.rec.Quantity != qty:
			r.Mismatched++
			r.example("mismatched", id, "")
		case a.rec.State != state && inOutbox[id][a.rec.State]:
			r.StateInTransit++
		case a.rec.State != state:
			r.StateDiffers++
			detail := "redis " + a.rec.State + ", mysql " + state
			if order.Final(state) {
				detail += "; final in MySQL, never resolves"
			}
			r.example("state", id, detail)
		}
		a.found = true
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return nil, fmt.Errorf("reconcile %s: mysql: %w", sale, err)
	}
	rows.Close()
	r.Users = int64(len(users))
	// The ledger's slots summed, in the same snapshot as the rows.
	if r.LedgerUnits, r.LedgerOrders, err = orderdb.Ledger(ctx, tx, sale); err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", sale, err)
	}
	for id, a := range orders {
		if !a.found && inOutbox[id] == nil {
			r.Missing++
			r.example("missing", id, "")
		}
	}
	if !exists && r.Accepted == 0 && r.Rows == 0 && r.LedgerOrders == 0 {
		return nil, fmt.Errorf("reconcile %s: %w", sale, ErrNoSale)
	}
	return r, nil
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

// accepted is one order of the orders hash, and whether MySQL has its row.
type accepted struct {
	rec   scripts.Record
	bad   bool // not a record: nothing to compare a row with
	found bool
	slot  string // the sale or bucket whose orders hash holds it
}

// readHome reads the sale's own meta hash: whether it exists and, for a
// sale of several buckets, the buckets' ids (its field names, as
// gateway/buckets.go writes them), its stock and moved.
func (r *Report) readHome(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys) (bool, error) {
	pipe := rdb.TxPipeline()
	exists := pipe.Exists(ctx, keys.Meta(r.Sale))
	meta := pipe.HMGet(ctx, keys.Meta(r.Sale), "buckets", "names", "stock", "moved")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("redis: %w", err)
	}
	m := meta.Val()
	if len(m) != 4 {
		return exists.Val() == 1, nil
	}
	buckets := num(m[0])
	names, _ := m[1].(string)
	if buckets <= 1 && names == "" {
		return exists.Val() == 1, nil
	}
	lanes := strings.Split(names, ",")
	if len(lanes) < 2 || int64(len(lanes)) != buckets || slices.Contains(lanes, "") {
		return false, fmt.Errorf("redis: the sale has %d buckets, its meta names %q", buckets, names)
	}
	r.Buckets, r.Lanes = len(lanes), lanes
	r.Stock, r.Moved = num(m[2]), num(m[3])
	return true, nil
}

// readSlot adds the figures, orders, users and outbox of slot (the sale, or
// one of its buckets) to r, orders and inOutbox: one MULTI for the figures,
// then scans for the details.
func (r *Report) readSlot(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys, slot string,
	orders map[string]*accepted, inOutbox map[string]map[string]bool) error {
	pipe := rdb.TxPipeline()
	meta := pipe.HMGet(ctx, keys.Meta(slot), "sold", "pending", "paid", "cancelled", "expired", "stock")
	buyers := pipe.HLen(ctx, keys.Users(slot))
	due := pipe.ZCard(ctx, keys.Due(slot))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis %s: %w", slot, err)
	}
	if m := meta.Val(); len(m) == 6 {
		r.Sold += num(m[0])
		for i, st := range States[1:] {
			r.Counters[st] += num(m[i+1])
		}
		if slot != r.Sale {
			r.LaneStock += num(m[5])
		}
	}
	r.Buyers += buyers.Val()
	r.Due += due.Val()

	err := hscan(ctx, rdb, keys.Orders(slot), func(id, v string) {
		if prev, dup := orders[id]; dup {
			// A scan may return a field twice; two buckets must never
			// hold the same order.
			if prev.slot != slot {
				r.Doubled++
				r.example("doubled", id, prev.slot+", "+slot)
			}
			return
		}
		rec, err := scripts.ParseRecord(v)
		orders[id] = &accepted{rec: rec, bad: err != nil, slot: slot}
		r.Accepted++
		r.AcceptedUnits += rec.Quantity
		if err != nil {
			r.BadRecords++
			r.example("bad", id, "")
			return
		}
		r.States[rec.State]++
		if order.Live(rec.State) {
			r.LiveOrders++
			r.LiveUnits += rec.Quantity
		}
	})
	if err != nil {
		return fmt.Errorf("orders hash of %s: %w", slot, err)
	}
	held := map[string]int64{}
	err = hscan(ctx, rdb, keys.Users(slot), func(user, v string) {
		held[user], _ = strconv.ParseInt(v, 10, 64)
	})
	if err != nil {
		return fmt.Errorf("users hash of %s: %w", slot, err)
	}
	for _, n := range held {
		r.UserUnits += n
	}
	for start := "-"; ; {
		msgs, err := rdb.XRangeN(ctx, keys.Outbox(slot), start, "+", 1000).Result()
		if err != nil {
			return fmt.Errorf("outbox of %s: %w", slot, err)
		}
		for _, m := range msgs {
			os, err := order.FromStreamEntry(m.Values)
			if err != nil {
				r.OutboxEntries++
				r.OutboxBad++
				continue
			}
			r.OutboxEntries += int64(len(os))
			for _, o := range os {
				if inOutbox[o.OrderID] == nil {
					inOutbox[o.OrderID] = map[string]bool{}
				}
				inOutbox[o.OrderID][o.State] = true
			}
		}
		if len(msgs) < 1000 {
			break
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
	return nil
}

// readMoves counts in r.Moving the units of the moves of a sale of several
// buckets that are half done (scripts/lua/move.lua): a take recorded in the
// home whose credit has not reached its bucket, a give recorded in a bucket
// whose units the home has not accepted. A record whose second half ran
// (its op key exists) but that is not removed yet holds no unit: they are
// in the bucket's stock, or back in the pool.
func (r *Report) readMoves(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys) error {
	done := func(slot, id string) (bool, error) {
		n, err := rdb.Exists(ctx, keys.Op(slot, id)).Result()
		return n == 1, err
	}
	takes, err := rdb.HGetAll(ctx, keys.Moves(r.Sale)).Result()
	if err != nil {
		return fmt.Errorf("moves of %s: %w", r.Sale, err)
	}
	for id, rec := range takes {
		m, err := scripts.ParseMove(rec)
		if err != nil || !m.Take || m.Bucket >= len(r.Lanes) {
			r.MovesBad++
			r.example("move", id, rec)
			continue
		}
		credited, err := done(r.Lanes[m.Bucket], id)
		if err != nil {
			return fmt.Errorf("move %s: %w", id, err)
		}
		if !credited {
			r.Moving += m.Units
		}
	}
	for _, lane := range r.Lanes {
		gives, err := rdb.HGetAll(ctx, keys.Moves(lane)).Result()
		if err != nil {
			return fmt.Errorf("moves of %s: %w", lane, err)
		}
		for id, rec := range gives {
			m, err := scripts.ParseMove(rec)
			if err != nil || m.Take {
				r.MovesBad++
				r.example("move", id, rec)
				continue
			}
			accepted, err := done(r.Sale, id)
			if err != nil {
				return fmt.Errorf("move %s: %w", id, err)
			}
			if !accepted {
				r.Moving += m.Units
			}
		}
	}
	return nil
}

// num reads an HMGET value as an integer; a missing or unreadable one is 0.
func num(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func hscan(ctx context.Context, rdb redis.UniversalClient, key string, fn func(field, value string)) error {
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, key, cursor, "*", 1000).Result()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			fn(kv[i], kv[i+1])
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
