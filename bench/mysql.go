package bench

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/flashgate/flashgate/orderdb/salerows"
)

// orderDB reads the orders table of API.md, which the consumer fills.
type orderDB struct {
	db *sql.DB
}

// openOrderDB connects and checks, before any load is sent, that the orders
// table can be read.
func openOrderDB(ctx context.Context, dsn string) (*orderDB, error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("bench: mysql: %w", err)
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 30 * time.Second
	}
	conn, err := mysql.NewConnector(c)
	if err != nil {
		return nil, fmt.Errorf("bench: mysql: %w", err)
	}
	d := &orderDB{db: sql.OpenDB(conn)}
	d.db.SetMaxOpenConns(2)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, _, err := d.counts(pctx, ""); err != nil {
		d.close()
		return nil, fmt.Errorf("bench: mysql at %s: %w (is the schema migrated? --no-mysql skips the MySQL checks)", c.Addr, err)
	}
	return d, nil
}

func (d *orderDB) close() { d.db.Close() }

// counts returns the sale's rows and units.
func (d *orderDB) counts(ctx context.Context, sale string) (rows, units int64, err error) {
	return salerows.Count(ctx, d.db, sale)
}

// waitFor polls until the sale has at least orders rows and units units in
// MySQL, or wait has passed (then ok is false). after is the time from start
// to the poll that saw them all.
func (d *orderDB) waitFor(ctx context.Context, sale string, orders, units int64, start time.Time, wait time.Duration) (after time.Duration, ok bool, err error) {
	deadline := time.Now().Add(wait)
	for {
		rows, u, err := d.counts(ctx, sale)
		if err != nil {
			return 0, false, err
		}
		if rows >= orders && u >= units {
			return time.Since(start), true, nil
		}
		if !time.Now().Before(deadline) {
			return 0, false, nil
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// figures fills the MySQL part of f; accepted holds the 202s' order ids.
func (d *orderDB) figures(ctx context.Context, sale string, limit int64, accepted map[string]struct{}, f *Figures) error {
	rows, err := salerows.Read(ctx, d.db, sale)
	if err != nil {
		return err
	}
	byID, units, _ := salerows.Owners(rows)
	f.MySQLRows, f.MySQLDistinct, f.MySQLUnits, f.MySQLUsersOverLimit = int64(len(rows)), int64(len(byID)), 0, 0
	for _, r := range rows {
		f.MySQLUnits += r.Quantity
	}
	for _, n := range units {
		if n > limit {
			f.MySQLUsersOverLimit++
		}
	}
	seen := make(map[string]struct{}, len(accepted))
	f.ExtraInMySQL = 0
	for _, r := range rows {
		if _, ok := accepted[r.OrderID]; ok {
			seen[r.OrderID] = struct{}{}
		} else {
			f.ExtraInMySQL++
		}
	}
	f.MissingInMySQL = int64(len(accepted) - len(seen))
	return nil
}
