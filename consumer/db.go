package consumer

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
)

// OpenDB returns a connection pool for the order database. It forces the
// driver options the ledger's correctness depends on, whatever the DSN says:
// affected rows count changed rows only (ClientFoundRows off, so a duplicate
// insert counts 0), times are UTC, and no call hangs on a dead server. It
// does not connect; the first query does. log (may be nil) receives the
// driver's own messages at debug level.
func OpenDB(cfg config.MySQL, log *zap.Logger) (*sql.DB, error) {
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

// migrations are applied in order, each once; a new schema change is a new
// entry at the end, never an edit of an old one.
var migrations = []string{
	// 1: the orders other systems read, and the per-sale ledger the
	// consumer keeps in the same transaction. Ids are ASCII by the API's
	// rules; a binary collation keeps "U1" and "u1" apart, as Redis does.
	`CREATE TABLE IF NOT EXISTS orders (
		order_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		sale_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		user_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		quantity    INT NOT NULL,
		reserved_at DATETIME(3) NOT NULL,
		created_at  DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
		PRIMARY KEY (order_id),
		KEY orders_sale (sale_id)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	`CREATE TABLE IF NOT EXISTS sale_ledger (
		sale_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		units      BIGINT NOT NULL DEFAULT 0,
		orders     BIGINT NOT NULL DEFAULT 0,
		updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
		PRIMARY KEY (sale_id)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
}

// Migrate creates or upgrades the schema: it applies, in order, the
// migrations the database has not seen, recording each in schema_version.
// Any number of processes may call it at once: they serialise on a named
// lock. It blocks for a few round trips (longer while another process holds
// the lock, at most a minute) and returns the first error, wrapped; an error
// wrapping ErrSchemaNewer when the database has migrations this binary does
// not know.
func Migrate(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT(DATABASE(), '.flashgate.migrate'), 60)`).Scan(&got); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("migrate: another process holds the migration lock")
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(CONCAT(DATABASE(), '.flashgate.migrate'))`) //nolint:errcheck // the lock also ends with the connection

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INT NOT NULL PRIMARY KEY,
		applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
	) ENGINE=InnoDB`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var have int
	if err := conn.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&have); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("migrate: %w: the database is at version %d, this binary knows %d", ErrSchemaNewer, have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		// DDL commits implicitly in MySQL: each statement is idempotent
		// instead, so a crash between it and the version row is harmless.
		if _, err := conn.ExecContext(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate: version %d: %w", v, err)
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (?)`, v); err != nil {
			return fmt.Errorf("migrate: record version %d: %w", v, err)
		}
	}
	return nil
}

// SchemaVersion returns the number of migrations this binary knows.
func SchemaVersion() int { return len(migrations) }
