package orderdb

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/flashgate/flashgate/order"
)

const insertRows = "INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at, state, pay_by, seq, idempotency_key) VALUES "

// The rows' values are written into the statements as SQL literals by
// appendRow, not sent as placeholders' arguments: a batch's statements
// then cost no boxed argument per value and no pass of the driver's own
// interpolation (which the pool's InterpolateParams asks for: one round
// trip per statement), a third of the consumer's CPU when they were.
// Every value is an integer, a time or a string; strings are quoted
// (below) so that no value can end its literal whatever the server's
// sql_mode.

// appendRow appends the tuple of o's values in insertRows' column order:
// no state is confirmed, no pay_by and no idempotency key are NULL.
func appendRow(b []byte, o order.Order) []byte {
	state := o.State
	if state == "" {
		state = order.StateConfirmed
	}
	b = append(b, '(')
	b = appendString(b, o.OrderID)
	b = append(b, ',')
	b = appendString(b, o.SaleID)
	b = append(b, ',')
	b = appendString(b, o.UserID)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(o.Quantity), 10)
	b = append(b, ',')
	b = appendTime(b, o.ReservedAt)
	b = append(b, ',')
	b = appendString(b, state)
	b = append(b, ',')
	if o.PayBy.IsZero() {
		b = append(b, "NULL"...)
	} else {
		b = appendTime(b, o.PayBy)
	}
	b = append(b, ',')
	b = strconv.AppendInt(b, o.Seq, 10)
	b = append(b, ',')
	if o.IdemKey == "" {
		b = append(b, "NULL"...)
	} else {
		b = appendString(b, o.IdemKey)
	}
	return append(b, ')')
}

// appendString appends s as a string literal: quoted when every byte is
// printable ASCII other than a quote or a backslash (the only bytes a
// quoted literal treats apart, the backslash only without
// NO_BACKSLASH_ESCAPES), as ids and keys are; else as a hexadecimal
// literal, which reads the same under every sql_mode.
func appendString(b []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '\'' || c == '\\' {
			b = append(b, "X'"...)
			b = hex.AppendEncode(b, []byte(s))
			return append(b, '\'')
		}
	}
	b = append(b, '\'')
	b = append(b, s...)
	return append(b, '\'')
}

// appendTime appends t as a DATETIME literal, in UTC (the pool's sessions'
// time_zone) to the nanosecond with trailing zeros cut, as the driver's
// own interpolation wrote it; the zero time as the zero date.
func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "'0000-00-00'"...)
	}
	b = append(b, '\'')
	b = t.UTC().AppendFormat(b, "2006-01-02 15:04:05.999999999")
	return append(b, '\'')
}

// latest returns one snapshot per order id, the one that writing the batch
// one by one, in its order, would leave: the first in a final state, else
// the last, with the largest seq of the order's snapshots and the first
// idempotency key any of them carries (writing them one by one keeps both).
func latest(orders []order.Order) []order.Order {
	at := make(map[string]int, len(orders))
	out := make([]order.Order, 0, len(orders))
	for _, o := range orders {
		i, seen := at[o.OrderID]
		if !seen {
			at[o.OrderID] = len(out)
			out = append(out, o)
			continue
		}
		seq, key := max(out[i].Seq, o.Seq), cmp.Or(out[i].IdemKey, o.IdemKey)
		if !order.Final(out[i].State) {
			out[i] = o
		}
		out[i].Seq, out[i].IdemKey = seq, key
	}
	return out
}

// Written is what one transaction changed. Every order given counts once,
// as Inserted or as a Duplicate.
type Written struct {
	Inserted   int // new rows
	Duplicates int // snapshots of orders already in MySQL (a redelivery, a relay's duplicate, a new state) or repeated in the batch
	// Updated counts, of the Duplicates' rows, those this write changed:
	// their state or pay_by, and also those whose only change is a larger
	// seq or an idempotency key they lacked (a final row's seq still rises).
	Updated int
}

// ledgerSlots is how many rows (slots) a sale's ledger spreads over. Each
// transaction adds to one slot, so that N writers of one sale wait for
// each other's ledger row only when they pick the same slot: never within
// one process (takeSlot), with a chance of about 1/ledgerSlots between
// two processes. Readers sum at most this many rows per sale (Ledger). It
// is the width of slotsHeld, one bit per slot.
const ledgerSlots = 32

// slotsHeld has bit i set while a WriteOrders of this process uses ledger
// slot i.
var slotsHeld atomic.Uint32

// takeSlot picks the ledger slot of one transaction: a random one, or the
// next one free when another transaction of this process uses it. owned is
// false when every slot is in use; the transaction then shares the random
// slot, which is as correct, only slower, and must not release it.
func takeSlot() (slot int, owned bool) {
	start := rand.IntN(ledgerSlots)
	for {
		held := slotsHeld.Load()
		// Rotate so that bit 0 is start; the first free bit from there.
		free := ^bits.RotateLeft32(held, -start)
		if free == 0 {
			return start, false
		}
		s := (start + bits.TrailingZeros32(free)) % ledgerSlots
		if slotsHeld.CompareAndSwap(held, held|1<<s) {
			return s, true
		}
	}
}

func releaseSlot(slot int) { slotsHeld.And(^(uint32(1) << slot)) }

// Ledger returns a sale's units and orders ever accepted: the sum of its
// ledger's slots, zeros for a sale never written. q is the pool or a
// transaction (a reader comparing the ledger with the rows reads both in
// one snapshot). It blocks for one query and returns the driver's error,
// wrapped.
func Ledger(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, sale string) (units, orders int64, err error) {
	err = q.QueryRowContext(ctx, `SELECT COALESCE(SUM(units), 0), COALESCE(SUM(orders), 0) FROM sale_ledger WHERE sale_id = ?`, sale).
		Scan(&units, &orders)
	if err != nil {
		return 0, 0, fmt.Errorf("ledger %s: %w", sale, err)
	}
	return units, orders, nil
}

// finalStates is order.Final in SQL: the states a row never leaves.
const finalStates = "('" + order.StatePaid + "','" + order.StateCancelled + "','" + order.StateExpired + "')"

// WriteOrders writes order snapshots in one transaction, idempotently on
// order_id: an order not yet in MySQL is inserted, in the state its
// snapshot has, and counted in its sale's ledger (units and orders); an
// order already there adds nothing to the ledger and only takes the
// snapshot's state and pay_by, unless its row is in a final state (paid,
// cancelled, expired), which nothing changes (Invariant 8). So a state
// snapshot that arrives before its order's first message inserts the order,
// once, and a redelivered older snapshot never undoes a final state. For
// the repairer (MaxSeq, After), a row also keeps the largest seq of the
// snapshots written to it, final or not (a redelivered older one does not
// lower it), and the first idempotency key one of them carried (NULL
// while none did). It is safe to run again after any failure, including a lost
// COMMIT reply: what was committed is then a duplicate. Concurrent callers
// may write the same orders.
//
// Several snapshots of one order in a batch count as written one by one in
// the batch's order: the first final one wins, else the last one, with the
// largest seq among them and a key any of them carries.
//
// The rows are grouped by (sale, quantity), one multi-row insert per group
// whose duplicate-key update changes nothing, because MySQL reports affected
// rows per statement: with every row of a statement of the same sale and
// quantity, the count of inserted rows gives the units exactly. (An update
// of the state in that same statement would count 2 per changed row, which
// cannot be told from two inserts.) When a group had duplicates, its rows
// then get their state, seq and key in one more statement for the whole
// batch, on rows the inserts have locked already; a batch of new orders,
// the usual one, runs no such statement (its inserts carry seq and key).
// Locks are taken in a fixed order (sale ids, quantities, order ids; then
// the ledger's sale ids) so that concurrent consumers do not deadlock on
// each other.
// The ledger statement adds to one slot of each sale's ledger (the same
// slot for every sale of the batch), so that writers of one hot sale,
// which all need its ledger, mostly touch different rows: a row lock taken
// there is held until COMMIT reaches the server, a round trip later, and on
// one shared row every other writer of the sale would queue behind it.
//
// It blocks for one transaction, is safe for concurrent use, and returns an
// error wrapping the driver's (nothing is then committed, unless the error
// came from COMMIT itself); IsDataError tells the ones no retry can fix.
func WriteOrders(ctx context.Context, db *sql.DB, orders []order.Order) (Written, error) {
	return writeOrders(ctx, db, orders, nil)
}

// writeOrders is WriteOrders; beforeCommit, when set, is called between the
// last statement and COMMIT (tests hold a transaction open with it).
func writeOrders(ctx context.Context, db *sql.DB, orders []order.Order, beforeCommit func()) (Written, error) {
	if len(orders) == 0 {
		return Written{}, nil
	}
	sorted := latest(orders)
	slices.SortFunc(sorted, func(a, b order.Order) int {
		return cmp.Or(cmp.Compare(a.SaleID, b.SaleID), cmp.Compare(a.Quantity, b.Quantity), cmp.Compare(a.OrderID, b.OrderID))
	})

	slot, owned := takeSlot()
	if owned {
		// Deferred first, so run last: after the rollback has released
		// the slot's row lock.
		defer releaseSlot(slot)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Written{}, fmt.Errorf("write orders: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op

	b := &batch{tx: tx, orders: sorted, at: make([]int, 0, len(sorted)+1)}
	b.rows = make([]byte, 0, 160*len(sorted))
	for _, o := range sorted {
		b.at = append(b.at, len(b.rows))
		b.rows = appendRow(b.rows, o)
		b.rows = append(b.rows, ',')
	}
	b.at = append(b.at, len(b.rows))
	w, dups, ledger, err := b.insertGroups(ctx)
	if err != nil {
		return Written{}, err
	}
	w.Duplicates += len(orders) - len(sorted) // repeated inside the batch
	if len(dups) > 0 {
		if w.Updated, err = b.updateDuplicates(ctx, dups); err != nil {
			return Written{}, err
		}
	}
	if len(ledger) > 0 {
		if err := b.addToLedger(ctx, slot, ledger); err != nil {
			return Written{}, err
		}
	}
	if beforeCommit != nil {
		beforeCommit()
	}
	if err := tx.Commit(); err != nil {
		return Written{}, fmt.Errorf("write orders: commit: %w", err)
	}
	return w, nil
}

// batch is the transaction of one writeOrders: its orders, one snapshot
// per order in lock order (sale, quantity, order id), and their rows'
// tuples, built once (appendRow) and copied into every statement that
// names them.
type batch struct {
	tx     *sql.Tx
	orders []order.Order
	rows   []byte // each order's tuple and a comma, in orders' order
	at     []int  // where each order's tuple starts in rows, then len(rows)
	q      []byte
}

// tally is what one transaction adds to a sale's ledger.
type tally struct{ units, orders int64 }

// rowsOf returns the tuples of b.orders[start:end], comma-separated.
func (b *batch) rowsOf(start, end int) []byte { return b.rows[b.at[start] : b.at[end]-1] }

// insertStatement returns the multi-row insert of the tuples rows, then
// tail.
func (b *batch) insertStatement(rows []byte, tail string) string {
	b.q = append(b.q[:0], insertRows...)
	b.q = append(b.q, rows...)
	b.q = append(b.q, tail...)
	return string(b.q)
}

// insertGroups inserts the rows not yet in MySQL, one statement per group
// of one sale and quantity whose duplicate-key update changes nothing, so
// that its affected rows are its inserts and give the units exactly. It
// returns the counts so far (Inserted, Duplicates), the indexes of the
// orders of groups that met existing rows, and what each sale's ledger
// gains.
func (b *batch) insertGroups(ctx context.Context) (Written, []int, map[string]*tally, error) {
	var w Written
	var dups []int
	ledger := map[string]*tally{}
	for start := 0; start < len(b.orders); {
		end := start + 1
		for end < len(b.orders) && b.orders[end].SaleID == b.orders[start].SaleID && b.orders[end].Quantity == b.orders[start].Quantity {
			end++
		}
		first, size := b.orders[start], end-start
		// A no-op update: an existing row counts 0 affected rows.
		q := b.insertStatement(b.rowsOf(start, end), " ON DUPLICATE KEY UPDATE order_id = order_id")
		res, err := b.tx.ExecContext(ctx, q)
		if err != nil {
			return Written{}, nil, nil, fmt.Errorf("write orders: insert: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return Written{}, nil, nil, fmt.Errorf("write orders: rows affected: %w", err)
		}
		if n < 0 || n > int64(size) {
			// Would mean the driver counts found rows: the ledger would
			// be wrong, so write nothing.
			return Written{}, nil, nil, fmt.Errorf("write orders: %d rows affected by %d inserts", n, size)
		}
		if n > 0 {
			t := ledger[first.SaleID]
			if t == nil {
				t = &tally{}
				ledger[first.SaleID] = t
			}
			t.units += n * int64(first.Quantity)
			t.orders += n
		}
		if n < int64(size) {
			for i := start; i < end; i++ {
				dups = append(dups, i)
			}
		}
		w.Inserted += int(n)
		w.Duplicates += size - int(n)
		start = end
	}
	return w, dups, ledger, nil
}

// updateDuplicates gives the rows of the orders dups (indexes of b.orders)
// their snapshot's state, pay_by, seq and key, in one statement in order
// id order, and returns how many rows it changed.
func (b *batch) updateDuplicates(ctx context.Context, dups []int) (int, error) {
	// Every row named here exists and this transaction holds its lock
	// (an insert's duplicate-key update locks the row it meets), so
	// this statement inserts nothing and counts 2 per row it changes
	// (in any column: a row whose only change is its seq is Updated).
	// pay_by comes first: MySQL assigns left to right, and the state
	// test must see the row's state before this update. seq and the
	// key do not depend on the state: a final row's seq rises too.
	slices.SortFunc(dups, func(i, j int) int { return cmp.Compare(b.orders[i].OrderID, b.orders[j].OrderID) })
	var rows []byte
	for k, i := range dups {
		if k > 0 {
			rows = append(rows, ',')
		}
		rows = append(rows, b.rowsOf(i, i+1)...)
	}
	q := b.insertStatement(rows, " ON DUPLICATE KEY UPDATE"+
		" pay_by = IF(state IN "+finalStates+", pay_by, COALESCE(VALUES(pay_by), pay_by)),"+
		" state = IF(state IN "+finalStates+", state, VALUES(state)),"+
		" seq = GREATEST(seq, VALUES(seq)),"+
		" idempotency_key = COALESCE(idempotency_key, VALUES(idempotency_key))")
	res, err := b.tx.ExecContext(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("write orders: update states: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("write orders: rows affected: %w", err)
	}
	if n < 0 || n%2 != 0 || n > 2*int64(len(dups)) {
		// An insert here would be a row the ledger missed.
		return 0, fmt.Errorf("write orders: %d rows affected by %d state updates", n, len(dups))
	}
	return int(n / 2), nil
}

// addToLedger adds ledger to the slot of each of its sales, in sale order.
// It is the last statement before COMMIT: the ledger is the one table
// every writer of a sale needs; its rows are held as briefly as possible.
func (b *batch) addToLedger(ctx context.Context, slot int, ledger map[string]*tally) error {
	sales := make([]string, 0, len(ledger))
	for s := range ledger {
		sales = append(sales, s)
	}
	slices.Sort(sales)
	b.q = append(b.q[:0], "INSERT INTO sale_ledger (sale_id, slot, units, orders) VALUES "...)
	for i, s := range sales {
		if i > 0 {
			b.q = append(b.q, ',')
		}
		b.q = append(b.q, '(')
		b.q = appendString(b.q, s)
		b.q = append(b.q, ',')
		b.q = strconv.AppendInt(b.q, int64(slot), 10)
		b.q = append(b.q, ',')
		b.q = strconv.AppendInt(b.q, ledger[s].units, 10)
		b.q = append(b.q, ',')
		b.q = strconv.AppendInt(b.q, ledger[s].orders, 10)
		b.q = append(b.q, ')')
	}
	b.q = append(b.q, " ON DUPLICATE KEY UPDATE units = units + VALUES(units), orders = orders + VALUES(orders)"...)
	if _, err := b.tx.ExecContext(ctx, string(b.q)); err != nil {
		return fmt.Errorf("write orders: ledger: %w", err)
	}
	return nil
}

// IsDataError reports whether err (from WriteOrders, wrapped or not) is
// MySQL refusing the data itself, which no retry can fix, as opposed to a
// lost connection, a deadlock or a server restart, which a retry fixes.
func IsDataError(err error) bool {
	me, ok := errors.AsType[*mysql.MySQLError](err)
	if !ok {
		return false
	}
	switch me.Number {
	case 1048, // column cannot be null
		1264, // out of range
		1265, // data truncated
		1292, // incorrect datetime
		1366, // incorrect value
		1406: // data too long
		return true
	}
	return false
}
