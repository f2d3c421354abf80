package orderdb

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/flashgate/flashgate/order"
)

// Written is what one transaction changed.
type Written struct {
	Inserted   int // new rows
	Duplicates int // orders already in MySQL (a redelivery or a relay's duplicate)
}

// WriteOrders inserts orders in one transaction, idempotently on order_id,
// and adds to each sale's ledger the units and orders of the rows it actually
// inserted: a duplicate adds nothing. It is safe to run again after any
// failure, including a lost COMMIT reply: what was committed is then a
// duplicate. Concurrent callers may write the same orders.
//
// The rows are grouped by (sale, quantity), one multi-row insert per group,
// because MySQL reports affected rows per statement: with every row of a
// statement of the same sale and quantity, the count of inserted rows gives
// the units exactly. Locks are taken in a fixed order (order ids, then sale
// ids) so that concurrent consumers do not deadlock on each other.
//
// It blocks for one transaction, is safe for concurrent use, and returns an
// error wrapping the driver's (nothing is then committed, unless the error
// came from COMMIT itself); IsDataError tells the ones no retry can fix.
func WriteOrders(ctx context.Context, db *sql.DB, orders []order.Order) (Written, error) {
	if len(orders) == 0 {
		return Written{}, nil
	}
	sorted := slices.Clone(orders)
	slices.SortFunc(sorted, func(a, b order.Order) int {
		return cmp.Or(cmp.Compare(a.SaleID, b.SaleID), cmp.Compare(a.Quantity, b.Quantity), cmp.Compare(a.OrderID, b.OrderID))
	})
	sorted = slices.CompactFunc(sorted, func(a, b order.Order) bool { return a.OrderID == b.OrderID })

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Written{}, fmt.Errorf("write orders: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op

	type tally struct{ units, orders int64 }
	ledger := map[string]*tally{}
	var w Written
	var q strings.Builder
	args := make([]any, 0, 5*len(sorted))
	for start := 0; start < len(sorted); {
		end := start + 1
		for end < len(sorted) && sorted[end].SaleID == sorted[start].SaleID && sorted[end].Quantity == sorted[start].Quantity {
			end++
		}
		group := sorted[start:end]
		q.Reset()
		args = args[:0]
		q.WriteString("INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at) VALUES ")
		for i, o := range group {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?,?,?,?,?)")
			args = append(args, o.OrderID, o.SaleID, o.UserID, o.Quantity, o.ReservedAt)
		}
		// A no-op update: an existing row counts 0 affected rows.
		q.WriteString(" ON DUPLICATE KEY UPDATE order_id = order_id")
		res, err := tx.ExecContext(ctx, q.String(), args...)
		if err != nil {
			return Written{}, fmt.Errorf("write orders: insert: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return Written{}, fmt.Errorf("write orders: rows affected: %w", err)
		}
		if n < 0 || n > int64(len(group)) {
			// Would mean the driver counts found rows: the ledger would
			// be wrong, so write nothing.
			return Written{}, fmt.Errorf("write orders: %d rows affected by %d inserts", n, len(group))
		}
		if n > 0 {
			t := ledger[group[0].SaleID]
			if t == nil {
				t = &tally{}
				ledger[group[0].SaleID] = t
			}
			t.units += n * int64(group[0].Quantity)
			t.orders += n
		}
		w.Inserted += int(n)
		w.Duplicates += len(group) - int(n)
		start = end
	}
	w.Duplicates += len(orders) - len(sorted) // repeated inside the batch

	if len(ledger) > 0 {
		sales := make([]string, 0, len(ledger))
		for s := range ledger {
			sales = append(sales, s)
		}
		slices.Sort(sales)
		q.Reset()
		args = args[:0]
		q.WriteString("INSERT INTO sale_ledger (sale_id, units, orders) VALUES ")
		for i, s := range sales {
			if i > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?,?,?)")
			args = append(args, s, ledger[s].units, ledger[s].orders)
		}
		q.WriteString(" ON DUPLICATE KEY UPDATE units = units + VALUES(units), orders = orders + VALUES(orders)")
		// Last statement before COMMIT: the ledger row of a hot sale is
		// the one lock every consumer wants; hold it as briefly as possible.
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return Written{}, fmt.Errorf("write orders: ledger: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return Written{}, fmt.Errorf("write orders: commit: %w", err)
	}
	return w, nil
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
