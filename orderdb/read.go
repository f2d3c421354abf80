package orderdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/flashgate/flashgate/order"
)

// MaxSeq returns the largest seq of the sale's rows: the last of its events
// MySQL holds, 0 for a sale without rows (or whose rows all predate the
// count). It reads the index (sale_id, seq) only, blocks for one round
// trip, is safe for concurrent use and returns the driver's error, wrapped.
func MaxSeq(ctx context.Context, db *sql.DB, sale string) (int64, error) {
	var seq int64
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM orders WHERE sale_id = ?`, sale).Scan(&seq); err != nil {
		return 0, fmt.Errorf("max seq of %s: %w", sale, err)
	}
	return seq, nil
}

// MaxSeqs is MaxSeq of many sales in one query: the largest seq of each
// sale's rows, with no entry for a sale without rows. It reads the index
// (sale_id, seq) only, one seek per sale (a loose index scan: MySQL's
// "Using index for group-by"), whatever the sales' numbers of rows, so
// that a repair of thousands of sales neither scans orders nor asks once
// per sale. It blocks for one round trip, is safe for concurrent use and
// returns the driver's error, wrapped.
func MaxSeqs(ctx context.Context, db *sql.DB, sales []string) (map[string]int64, error) {
	out := make(map[string]int64, len(sales))
	if len(sales) == 0 {
		return out, nil
	}
	args := make([]any, len(sales))
	for i, s := range sales {
		args[i] = s
	}
	rows, err := db.QueryContext(ctx, maxSeqsQuery(len(sales)), args...)
	if err != nil {
		return nil, fmt.Errorf("max seq of %d sales: %w", len(sales), err)
	}
	defer rows.Close()
	for rows.Next() {
		var sale string
		var seq sql.NullInt64
		if err := rows.Scan(&sale, &seq); err != nil {
			return nil, fmt.Errorf("max seq of %d sales: %w", len(sales), err)
		}
		out[sale] = seq.Int64
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("max seq of %d sales: %w", len(sales), err)
	}
	return out, nil
}

// maxSeqsQuery is MaxSeqs's query for n sales.
func maxSeqsQuery(n int) string {
	var q strings.Builder
	q.WriteString("SELECT sale_id, MAX(seq) FROM orders FORCE INDEX (orders_sale_seq) WHERE sale_id IN (?")
	q.WriteString(strings.Repeat(",?", n-1))
	q.WriteString(") GROUP BY sale_id")
	return q.String()
}

// The columns After reads, in the order scanRow scans them.
const orderColumns = "order_id, sale_id, user_id, quantity, reserved_at, state, pay_by, seq, idempotency_key"

// The queries After runs. The index is forced: the optimizer, when most of
// the sale's rows come after the cursor, prefers reading the index from the
// sale's first row and filtering, which makes every page cost the whole
// sale; forced, it seeks to the cursor, (sale_id, seq, order_id), since
// InnoDB's secondary index ends with the primary key, and ORDER BY follows
// the index: no sort.
const (
	afterSeq = "SELECT " + orderColumns + " FROM orders FORCE INDEX (orders_sale_seq)" +
		" WHERE sale_id = ? AND seq > ? ORDER BY seq, order_id LIMIT ?"
	afterCursor = "SELECT " + orderColumns + " FROM orders FORCE INDEX (orders_sale_seq)" +
		" WHERE sale_id = ? AND (seq > ? OR seq = ? AND order_id > ?) ORDER BY seq, order_id LIMIT ?"
)

// After returns the sale's rows after the cursor (seq, afterID), in the
// order of (seq, order_id), at most limit of them, as orders: their state,
// pay_by (zero: none), seq and idempotency key ("" for none) as MySQL holds
// them. afterID "" stands for none of seq's rows, so After(ctx, db, sale,
// s, "", n) is the first page of the rows with seq above s; the next page
// starts after the last row returned, After(ctx, db, sale, last.Seq,
// last.OrderID, n), which is right when several rows share a seq. Fewer
// than limit rows means there are no more (as of this read).
//
// The rows are not validated: they are what WriteOrders stored. It reads
// one range of the index (sale_id, seq) and the rows it names, blocks for
// one query, is safe for concurrent use and returns the driver's error,
// wrapped, or an error for a limit below 1.
func After(ctx context.Context, db *sql.DB, sale string, seq int64, afterID string, limit int) ([]order.Order, error) {
	if limit < 1 {
		return nil, fmt.Errorf("orders of %s after %d: limit %d, want at least 1", sale, seq, limit)
	}
	var rows *sql.Rows
	var err error
	if afterID == "" {
		rows, err = db.QueryContext(ctx, afterSeq, sale, seq, limit)
	} else {
		rows, err = db.QueryContext(ctx, afterCursor, sale, seq, seq, afterID, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("orders of %s after %d: %w", sale, seq, err)
	}
	defer rows.Close()
	var out []order.Order
	for rows.Next() {
		o, err := scanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("orders of %s after %d: %w", sale, seq, err)
		}
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orders of %s after %d: %w", sale, seq, err)
	}
	return out, nil
}

// scanRow scans one row of orderColumns.
func scanRow(rows *sql.Rows) (order.Order, error) {
	var o order.Order
	var payBy sql.NullTime
	var key sql.NullString
	if err := rows.Scan(&o.OrderID, &o.SaleID, &o.UserID, &o.Quantity, &o.ReservedAt, &o.State, &payBy, &o.Seq, &key); err != nil {
		return order.Order{}, err
	}
	o.ReservedAt = o.ReservedAt.UTC()
	if payBy.Valid {
		o.PayBy = payBy.Time.UTC()
	}
	o.IdemKey = key.String
	return o, nil
}
