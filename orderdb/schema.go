package orderdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/go-sql-driver/mysql"
)

// ErrSchemaNewer is wrapped by Migrate's error when the database's schema is
// newer than this binary: an old binary must not write into it.
var ErrSchemaNewer = errors.New("schema newer than this binary")

// migration is one schema change: one DDL statement, which MySQL commits on
// its own. A statement that cannot say IF NOT EXISTS in MySQL (ALTER TABLE
// ... ADD COLUMN) lists the errors that mean it was already applied (by a
// run that crashed before recording its version), so that every migration
// is idempotent.
type migration struct {
	what string // for an operator: what it changes
	sql  string
	done []uint16 // MySQL error numbers meaning "already applied"
}

const (
	erDupFieldName = 1060 // ER_DUP_FIELDNAME: the column exists already
	erDupKeyName   = 1061 // ER_DUP_KEYNAME: the index exists already
	erCantDropKey  = 1091 // ER_CANT_DROP_FIELD_OR_KEY: the index is gone already
	erNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
)

// migrations are applied in order, each once; a new schema change is a new
// entry at the end, never an edit of an old one.
var migrations = []migration{
	// 1: the orders other systems read, and the per-sale ledger the
	// consumer keeps in the same transaction. Ids are ASCII by the API's
	// rules; a binary collation keeps "U1" and "u1" apart, as Redis does.
	{what: "orders table", sql: `CREATE TABLE IF NOT EXISTS orders (
		order_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		sale_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		user_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		quantity    INT NOT NULL,
		reserved_at DATETIME(3) NOT NULL,
		created_at  DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
		PRIMARY KEY (order_id),
		KEY orders_sale (sale_id)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`},
	{what: "sale_ledger table", sql: `CREATE TABLE IF NOT EXISTS sale_ledger (
		sale_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		units      BIGINT NOT NULL DEFAULT 0,
		orders     BIGINT NOT NULL DEFAULT 0,
		updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
		PRIMARY KEY (sale_id)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`},
	// 3: the order's state (package order's five) and payment deadline,
	// in place: one ALTER adds both columns or neither, and the rows
	// already there, written before payment windows, become confirmed
	// orders without deadline. An existing column means a run that
	// crashed after the ALTER: nothing left to do.
	{what: "orders.state and orders.pay_by (payment windows)", sql: `ALTER TABLE orders
		ADD COLUMN state VARCHAR(20) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'confirmed',
		ADD COLUMN pay_by DATETIME(3) NULL`, done: []uint16{erDupFieldName}},
	// 4: what repairing a rolled-back Redis from MySQL needs (package
	// repair): seq, the largest of the sale's event numbers among the
	// snapshots applied to the row (0: written before the count, or by a
	// relay older than it), and the reservation's Idempotency-Key (NULL:
	// none), so that a repaired Redis answers a replayed key with its
	// order again. Both or neither (MariaDB's DDL is atomic), instant on
	// MariaDB 10.3+ and MySQL 8.0+; a rerun fails on the first column,
	// which means it is done.
	{what: "orders.seq and orders.idempotency_key (repair after a Redis rollback)", sql: `ALTER TABLE orders
		ADD COLUMN seq BIGINT NOT NULL DEFAULT 0,
		ADD COLUMN idempotency_key VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL`,
		done: []uint16{erDupFieldName}},
	// 5: the index by which the repairer finds the events Redis forgot
	// (seq above Redis's own) without a scan of the sale. Its own
	// migration: an index is built online (writes go on) but is not
	// instant, and the columns above should not wait for it.
	{what: "index orders (sale_id, seq)", sql: `ALTER TABLE orders ADD KEY orders_sale_seq (sale_id, seq)`,
		done: []uint16{erDupKeyName}},
	// 6: a sale's ledger spread over up to ledgerSlots rows, summed when
	// read (Ledger): each transaction adds to one slot, so that consumers
	// writing the same sale at once do not queue on one row lock. The row
	// a sale has already becomes its slot 0, with its counts, and a writer
	// that does not know slots (an older binary still running) keeps
	// adding to slot 0, which the sum still counts. One ALTER adds the
	// column and the wider key or nothing; an existing column means a
	// run that crashed after it.
	{what: "sale_ledger.slot (a sale's ledger over several rows)", sql: `ALTER TABLE sale_ledger
		ADD COLUMN slot SMALLINT NOT NULL DEFAULT 0 AFTER sale_id,
		DROP PRIMARY KEY,
		ADD PRIMARY KEY (sale_id, slot)`, done: []uint16{erDupFieldName}},
	// 7: orders_sale (sale_id) is the left edge of orders_sale_seq
	// (sale_id, seq), which serves every read by sale as well: each insert
	// paid for a second secondary index that no query needed. Dropping an
	// index is instant (metadata only) on MariaDB 10.3+ and MySQL 8.0; a
	// rerun meets ER_CANT_DROP_FIELD_OR_KEY, which means it is done.
	{what: "drop index orders (sale_id), covered by orders (sale_id, seq)", sql: `ALTER TABLE orders DROP KEY orders_sale`,
		done: []uint16{erCantDropKey}},
}

// Migrate creates or upgrades the schema: it applies, in order, the
// migrations the database has not seen, recording each in schema_version.
// Any number of processes may call it at once: they serialise on a named
// lock. It blocks for a few round trips (longer while another process holds
// the lock, at most a minute) and returns the first error, wrapped; an error
// wrapping ErrSchemaNewer when the database has migrations this binary does
// not know.
func Migrate(ctx context.Context, db *sql.DB) error {
	return migrateTo(ctx, db, len(migrations))
}

// migrateTo is Migrate up to version target (tests build an older schema
// with it).
func migrateTo(ctx context.Context, db *sql.DB, target int) error {
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
	for v := have + 1; v <= target; v++ {
		// DDL commits implicitly in MySQL: each statement is idempotent
		// instead, so a crash between it and the version row is harmless.
		m := migrations[v-1]
		if _, err := conn.ExecContext(ctx, m.sql); err != nil {
			if me, ok := errors.AsType[*mysql.MySQLError](err); !ok || !slices.Contains(m.done, me.Number) {
				return fmt.Errorf("migrate: version %d: %w", v, err)
			}
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO schema_version (version) VALUES (?)`, v); err != nil {
			return fmt.Errorf("migrate: record version %d: %w", v, err)
		}
	}
	return nil
}

// SchemaVersion returns the number of migrations this binary knows.
func SchemaVersion() int { return len(migrations) }

// Migration describes migration v (1 to SchemaVersion) for an operator;
// "" for another v.
func Migration(v int) string {
	if v < 1 || v > len(migrations) {
		return ""
	}
	return migrations[v-1].what
}

// Version returns the schema version the database is at: 0 for a database
// never migrated. It blocks for one or two round trips and returns the
// driver's error, wrapped.
func Version(ctx context.Context, db *sql.DB) (int, error) {
	var v int
	err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&v)
	if me, ok := errors.AsType[*mysql.MySQLError](err); ok && me.Number == erNoSuchTable {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("schema version: %w", err)
	}
	return v, nil
}
