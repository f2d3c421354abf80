// Package orderdb is the MySQL orders database: the connection settings its
// correctness depends on, the schema and its migrations, and the one writer
// of orders and of the per-sale ledger. The consumer writes through it; the
// repairer of a rolled-back Redis reads a sale's latest events from it
// (MaxSeq, After); the migrate and reconcile commands and the tests open it.
//
// The schema is two tables. orders holds one row per accepted order, keyed
// by order_id, with its state (package order) and payment deadline, so that
// writing an order again changes at most its state, and never a final one,
// and with the largest event number (seq) of the sale written to it and
// the reservation's idempotency key, so that a Redis that lost its last
// writes can be given them back; sale_ledger holds each sale's units and
// orders ever accepted, whatever their state, kept in the same transaction
// as the rows it counts, so that it always agrees with them. A sale's
// ledger is a few rows (slots), each transaction adding to one, so that
// concurrent consumers of one hot sale do not wait for each other's ledger
// row; Ledger reads the sum.
package orderdb

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
)

// Open returns a connection pool for the order database. It forces the
// driver options the ledger's correctness depends on, whatever the DSN says:
// affected rows count changed rows only (ClientFoundRows off, so a duplicate
// insert counts 0), times are UTC, and no call hangs on a dead server. It
// does not connect (the first query does), so it blocks on nothing and fails
// only on a DSN it cannot parse. log (may be nil) receives the driver's own
// messages at debug level. The pool is safe for concurrent use.
func Open(cfg config.MySQL, log *zap.Logger) (*sql.DB, error) {
	dc, err := mysql.ParseDSN(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("mysql dsn: %w", err)
	}
	dc.ClientFoundRows = false
	dc.ParseTime = true
	dc.InterpolateParams = true // one round trip per statement instead of three
	dc.Loc = time.UTC
	if dc.Params == nil {
		dc.Params = map[string]string{}
	}
	dc.Params["time_zone"] = "'+00:00'"
	if dc.Timeout == 0 {
		dc.Timeout = 5 * time.Second
	}
	if dc.ReadTimeout == 0 {
		dc.ReadTimeout = time.Minute
	}
	if dc.WriteTimeout == 0 {
		dc.WriteTimeout = 30 * time.Second
	}
	if log != nil {
		dc.Logger = driverLog{log}
	}
	conn, err := mysql.NewConnector(dc)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(cfg.MaxConns)
	db.SetMaxIdleConns(cfg.MaxConns)
	db.SetConnMaxLifetime(5 * time.Minute)
	db.SetConnMaxIdleTime(time.Minute)
	return db, nil
}

type driverLog struct{ log *zap.Logger }

func (l driverLog) Print(v ...any) { l.log.Debug("mysql driver", zap.String("msg", fmt.Sprint(v...))) }
