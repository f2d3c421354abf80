package localstack

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Database creates a scratch database (NewDatabase), drops it when the
// test ends, and returns its DSN. It fails the test when MariaDB cannot be
// reached. orderdbtest.Open is Database with the orders schema.
func Database(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dsn, drop, err := NewDatabase(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := drop(); err != nil {
			tb.Logf("%v", err)
		}
	})
	return dsn
}

// NewDatabase creates the database flashgate_test_<random> on MySQLDSN's
// server, with MySQLDSN's user, and returns its DSN and the function that
// drops it (bounded by 30 s). Database is the one a test wants; this is for
// a database that outlives one test, such as the one a benchmark's rounds
// share, dropped by the package's Main (AfterTests), or one of the bench
// suite's parts, which is not a test. It blocks until MariaDB answered,
// within ctx.
func NewDatabase(ctx context.Context) (dsn string, drop func() error, err error) {
	dc, err := mysql.ParseDSN(MySQLDSN)
	if err != nil {
		return "", nil, err
	}
	name := "flashgate_test_" + RandomHex(6)
	dc.DBName = ""
	admin, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		return "", nil, err
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		return "", nil, fmt.Errorf("MariaDB at %s: cannot create a test database (run `make up`): %w", dc.Addr, err)
	}
	drop = func() error {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
		return nil
	}
	dc.DBName = name
	return dc.FormatDSN(), drop, nil
}
