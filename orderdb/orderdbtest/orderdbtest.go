// Package orderdbtest gives tests a scratch orders database on the local
// stack's MariaDB, and the fixtures tests of the orders database share:
// valid orders, and a sale's rows and ledger as MySQL holds them. It is for
// tests only, as net/http/httptest is.
package orderdbtest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/salerows"
)

// Open returns a pool on a database of the test's own (localstack.Database),
// migrated to this binary's schema, closed and dropped when the test ends.
// It fails the test when MariaDB cannot be reached. The package's TestMain
// should hold the local stack's lock (localstack.Run).
func Open(tb testing.TB) *sql.DB {
	tb.Helper()
	return OpenWith(tb, nil)
}

// OpenWith is Open with session variables set on every connection of the
// pool (as DSN parameters), e.g. innodb_lock_wait_timeout.
func OpenWith(tb testing.TB, vars map[string]string) *sql.DB {
	tb.Helper()
	db, _ := open(tb, vars)
	return db
}

// OpenDSN is Open, and the database's DSN, for what connects on its own
// (a process the test starts, a client under test that opens its own pool).
func OpenDSN(tb testing.TB) (*sql.DB, string) {
	tb.Helper()
	return open(tb, nil)
}

func open(tb testing.TB, vars map[string]string) (*sql.DB, string) {
	tb.Helper()
	dc, err := mysql.ParseDSN(localstack.Database(tb))
	if err != nil {
		tb.Fatal(err)
	}
	if dc.Params == nil {
		dc.Params = map[string]string{}
	}
	for k, v := range vars {
		dc.Params[k] = v
	}
	cfg := config.Default()
	cfg.MySQL.DSN = dc.FormatDSN()
	db, err := orderdb.Open(cfg.MySQL, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := orderdb.Migrate(ctx, db); err != nil {
		tb.Fatal(err)
	}
	return db, cfg.MySQL.DSN
}

// Orders makes n valid confirmed orders of a sale, with ids no other test
// uses, users u0, u1, … and quantities 1-3.
func Orders(sale string, n int) []order.Order {
	out := make([]order.Order, n)
	for i := range out {
		out[i] = order.Order{
			OrderID: sale + "-" + localstack.RandomHex(6), SaleID: sale, UserID: fmt.Sprintf("u%d", i),
			Quantity: 1 + i%3, ReservedAt: time.UnixMilli(time.Now().UnixMilli()).UTC(),
			State: order.StateConfirmed,
		}
	}
	return out
}

// State reads an order's state and pay_by (zero when NULL) in MySQL. It
// fails the test on a query error, a missing row included.
func State(tb testing.TB, db *sql.DB, orderID string) (state string, payBy time.Time) {
	tb.Helper()
	var pb sql.NullTime
	if err := db.QueryRowContext(context.Background(), `SELECT state, pay_by FROM orders WHERE order_id = ?`, orderID).Scan(&state, &pb); err != nil {
		tb.Fatalf("order %s: %v", orderID, err)
	}
	if pb.Valid {
		payBy = pb.Time.UTC()
	}
	return state, payBy
}

// Row reads an order as its row holds it: every field, pay_by zero and
// IdemKey "" when NULL. It fails the test on a query error, a missing row
// included.
func Row(tb testing.TB, db *sql.DB, orderID string) order.Order {
	tb.Helper()
	var o order.Order
	var pb sql.NullTime
	var key sql.NullString
	err := db.QueryRowContext(context.Background(), `SELECT order_id, sale_id, user_id, quantity, reserved_at, state, pay_by, seq, idempotency_key
		FROM orders WHERE order_id = ?`, orderID).Scan(&o.OrderID, &o.SaleID, &o.UserID, &o.Quantity, &o.ReservedAt, &o.State, &pb, &o.Seq, &key)
	if err != nil {
		tb.Fatalf("order %s: %v", orderID, err)
	}
	o.ReservedAt = o.ReservedAt.UTC()
	if pb.Valid {
		o.PayBy = pb.Time.UTC()
	}
	o.IdemKey = key.String
	return o
}

// Totals reads the sale's rows and units in orders, and its ledger
// (orderdb.Ledger: zeros when it has none). It fails the test on a query
// error.
func Totals(tb testing.TB, db *sql.DB, sale string) (rows, units, ledgerUnits, ledgerOrders int64) {
	tb.Helper()
	ctx := context.Background()
	rows, units, err := salerows.Count(ctx, db, sale)
	if err != nil {
		tb.Fatal(err)
	}
	ledgerUnits, ledgerOrders, err = orderdb.Ledger(ctx, db, sale)
	if err != nil {
		tb.Fatal(err)
	}
	return rows, units, ledgerUnits, ledgerOrders
}

// Fill puts n rows of other sales (ids "old0" to "old<sales-1>", seq 1 to
// n) into db's orders, 100,000 per INSERT … SELECT from MariaDB's sequence
// engine: what a shop's table holds after many sales, so that a read that
// scans it shows. The shop-scale test and make bench use it.
func Fill(ctx context.Context, db *sql.DB, n, sales int) error {
	for lo := 1; lo <= n; lo += 100_000 {
		hi := min(n, lo+100_000-1)
		q := fmt.Sprintf(`INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at, state, seq)
			SELECT CONCAT('fill-', seq), CONCAT('old', seq %% %d), CONCAT('u', seq), 1, NOW(3), 'confirmed', seq
			FROM seq_%d_to_%d`, sales, lo, hi)
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("fill orders: %w", err)
		}
	}
	return nil
}
