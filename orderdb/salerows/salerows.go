// Package salerows reads a sale's orders as MySQL holds them: its rows,
// or their count and units. The checks of the tests and of make bench
// read them through it, so that the SQL is written once; the product
// itself never reads a sale's orders this way (orderdb reads by seq, in
// pages). It needs no test machinery, so that make bench, which flashgate
// links, may use it.
package salerows

import (
	"context"
	"database/sql"
	"fmt"
)

// Row is one order's row.
type Row struct {
	OrderID, SaleID, UserID string
	Quantity                int64
	State                   string
}

// Querier is what Read and Count ask of a pool: a *sql.DB, *sql.Conn or
// *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const columns = "SELECT order_id, sale_id, user_id, quantity, state FROM orders"

// Read returns the rows of sale, in no given order. It blocks for the
// query; its error is the driver's, wrapped.
func Read(ctx context.Context, q Querier, sale string) ([]Row, error) {
	return read(ctx, q, columns+" WHERE sale_id = ?", sale)
}

// ReadAll returns every row of the table, whatever its sale: for a
// database that should hold one sale alone, to find rows of another.
func ReadAll(ctx context.Context, q Querier) ([]Row, error) {
	return read(ctx, q, columns)
}

func read(ctx context.Context, q Querier, query string, args ...any) ([]Row, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("salerows: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.OrderID, &r.SaleID, &r.UserID, &r.Quantity, &r.State); err != nil {
			return nil, fmt.Errorf("salerows: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("salerows: %w", err)
	}
	return out, nil
}

// Count returns how many rows sale has and the units they add up to,
// without reading them. Its error is the driver's, wrapped.
func Count(ctx context.Context, q Querier, sale string) (rows, units int64, err error) {
	err = q.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM orders WHERE sale_id = ?`, sale).Scan(&rows, &units)
	if err != nil {
		return 0, 0, fmt.Errorf("salerows: %w", err)
	}
	return rows, units, nil
}

// Owners sums rows per order and per user: the buyer of each order id,
// the units each user holds, and the order ids seen more than once.
func Owners(rows []Row) (byID map[string]string, units map[string]int64, dups []string) {
	byID, units = make(map[string]string, len(rows)), map[string]int64{}
	for _, r := range rows {
		if _, ok := byID[r.OrderID]; ok {
			dups = append(dups, r.OrderID)
		}
		byID[r.OrderID] = r.UserID
		units[r.UserID] += r.Quantity
	}
	return byID, units, dups
}
