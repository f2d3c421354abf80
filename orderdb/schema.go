package orderdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrSchemaNewer is wrapped by Migrate's error when the database's schema is
// newer than this binary: an old binary must not write into it.
var ErrSchemaNewer = errors.New("schema newer than this binary")

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
