// Package reconcile audits one sale across Redis and MySQL: it reads the
// sale's figures and orders on both sides and lists every disagreement, so
// that an operator (`flashgate reconcile`) or a test can tell an order in
// transit from one lost or invented (Invariant 3: every 202 becomes exactly
// one MySQL row, and no row exists without a reservation), and a state on
// its way to MySQL from one that differs for good (Invariant 8: MySQL's
// state follows Redis's and never leaves paid, cancelled or expired). It
// also holds the order view's status against MySQL (API.md: created exactly
// when the order is in MySQL): an order that reads created without a row is
// drift; one in MySQL that still reads queued is counted apart (Queued),
// since its consumer's mark may be on its way, and MarkQueued marks it.
//
// Units are compared as live units (package order: pending_payment, paid,
// confirmed): Redis's sold counts them, and so do MySQL's rows in those
// states; the units of a cancelled or expired order are back in the stock.
//
// A sale of several buckets (API.md "buckets", sale/buckets.go) sells in
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

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/scripts"
)

// ErrNoSale is returned by Sale when neither Redis nor MySQL knows the
// sale.
var ErrNoSale = errors.New("no such sale")

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
		if err := readCreated(ctx, rdb, keys, slot, orders); err != nil {
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
		if a != nil && !a.bad && !a.rec.Created && !a.marked {
			r.Queued++
			r.example("queued", id, "")
			if r.queued == nil {
				r.queued = map[string][]string{}
			}
			r.queued[a.slot] = append(r.queued[a.slot], id)
		}
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
		if !a.found && !a.bad && (a.rec.Created || a.marked) {
			r.CreatedNoRow++
			r.example("created", id, "no row in MySQL")
		}
	}
	if !exists && r.Accepted == 0 && r.Rows == 0 && r.LedgerOrders == 0 {
		return nil, fmt.Errorf("reconcile %s: %w", sale, ErrNoSale)
	}
	return r, nil
}

// accepted is one order of the orders hash, and whether MySQL has its row.
type accepted struct {
	rec   scripts.Record
	bad   bool // not a record: nothing to compare a row with
	found bool
	slot  string // the sale or bucket whose orders hash holds it
	// marked: its id is in its slot's created set (the view says created
	// whatever its record's flag).
	marked bool
}
