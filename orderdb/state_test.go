package orderdb_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// snapshot is o in state, with pay_by ms (0: none).
func snapshot(o order.Order, state string, payBy int64) order.Order {
	o.State = state
	o.PayBy = time.Time{}
	if payBy != 0 {
		o.PayBy = time.UnixMilli(payBy).UTC()
	}
	return o
}

// TestWriteOrdersStates guards Invariants 3 and 8 in MySQL: every order is
// one row, counted once in the ledger, whichever of its snapshots arrives
// first; a row takes the state of each later snapshot until it is final
// (paid, cancelled, expired), and then keeps it whatever arrives, a
// redelivered older snapshot included. Each row is a sequence of
// WriteOrders calls, one batch each, on one fresh order.
func TestWriteOrdersStates(t *testing.T) {
	const deadline = 1735689720123
	type step struct {
		state string
		payBy int64
		// what this write must report
		inserted, updated int
	}
	P, C := order.StatePendingPayment, order.StateConfirmed
	tests := []struct {
		name      string
		steps     []step
		wantState string
		wantPayBy int64
	}{
		{"pending, then paid", []step{{P, deadline, 1, 0}, {order.StatePaid, deadline, 0, 1}}, order.StatePaid, deadline},
		{"paid before its order, then the order", []step{{order.StatePaid, deadline, 1, 0}, {P, deadline, 0, 0}}, order.StatePaid, deadline},
		{"expired before its order", []step{{order.StateExpired, deadline, 1, 0}, {P, deadline, 0, 0}}, order.StateExpired, deadline},
		{"pending redelivered after paid", []step{{P, deadline, 1, 0}, {order.StatePaid, deadline, 0, 1}, {P, deadline, 0, 0}}, order.StatePaid, deadline},
		{"confirmed, then cancelled", []step{{C, 0, 1, 0}, {order.StateCancelled, 0, 0, 1}}, order.StateCancelled, 0},
		{"confirmed redelivered after cancelled", []step{{C, 0, 1, 0}, {order.StateCancelled, 0, 0, 1}, {C, 0, 0, 0}}, order.StateCancelled, 0},
		{"pending, then cancelled", []step{{P, deadline, 1, 0}, {order.StateCancelled, deadline, 0, 1}}, order.StateCancelled, deadline},
		{"the same snapshot twice", []step{{P, deadline, 1, 0}, {P, deadline, 0, 0}}, P, deadline},
		{"a snapshot's pay_by is taken with its state", []step{{P, deadline, 1, 0}, {order.StatePaid, deadline + 5, 0, 1}, {order.StatePaid, deadline + 9, 0, 0}}, order.StatePaid, deadline + 5},
		{"a final snapshot without pay_by keeps the deadline", []step{{P, deadline, 1, 0}, {order.StateExpired, 0, 0, 1}}, order.StateExpired, deadline},
	}
	// Every final state stays, whatever comes after it.
	for _, final := range []string{order.StatePaid, order.StateCancelled, order.StateExpired} {
		steps := []step{{P, deadline, 1, 0}, {final, deadline, 0, 1}}
		for _, later := range []string{C, P, order.StatePaid, order.StateCancelled, order.StateExpired} {
			steps = append(steps, step{later, deadline + 1, 0, 0})
		}
		tests = append(tests, struct {
			name      string
			steps     []step
			wantState string
			wantPayBy int64
		}{final + " stays", steps, final, deadline})
	}

	db := orderdbtest.Open(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := orderdbtest.Orders("s", 1)[0]
			for i, st := range tt.steps {
				w, err := orderdb.WriteOrders(ctx, db, []order.Order{snapshot(o, st.state, st.payBy)})
				if err != nil {
					t.Fatal(err)
				}
				if w.Inserted != st.inserted || w.Duplicates != 1-st.inserted || w.Updated != st.updated {
					t.Fatalf("step %d (%s): wrote %+v, want %d inserted, %d updated", i, st.state, w, st.inserted, st.updated)
				}
			}
			state, payBy := orderdbtest.State(t, db, o.OrderID)
			var want time.Time
			if tt.wantPayBy != 0 {
				want = time.UnixMilli(tt.wantPayBy).UTC()
			}
			if state != tt.wantState || !payBy.Equal(want) {
				t.Fatalf("row: state %q pay_by %v; want %q %v", state, payBy, tt.wantState, want)
			}
		})
	}
	// Every order above is one row, counted once.
	rows, units, lu, lo := orderdbtest.Totals(t, db, "s")
	if rows != int64(len(tests)) || lo != rows || lu != units {
		t.Fatalf("%d rows (%d units), ledger %d orders / %d units; want %d rows, counted once", rows, units, lo, lu, len(tests))
	}
}

// TestWriteOrdersStatesInOneBatch guards Invariants 3 and 8 where several
// snapshots of one order arrive in one batch (the relay forwards an order
// and its payment close together): one row, counted once, in the state
// writing them one by one would leave — the first final one, else the last.
func TestWriteOrdersStatesInOneBatch(t *testing.T) {
	db := orderdbtest.Open(t)
	ctx := context.Background()
	P, C := order.StatePendingPayment, order.StateConfirmed
	tests := []struct {
		name   string
		states []string
		want   string
	}{
		{"pending, paid, pending again", []string{P, order.StatePaid, P}, order.StatePaid},
		{"paid first", []string{order.StatePaid, P}, order.StatePaid},
		{"the first final wins", []string{P, order.StateExpired, order.StatePaid}, order.StateExpired},
		{"confirmed, cancelled", []string{C, order.StateCancelled, C}, order.StateCancelled},
		{"only live snapshots: the last", []string{P, P}, P},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := orderdbtest.Orders("b", 1)[0]
			other := orderdbtest.Orders("b", 1)[0] // a new order beside it
			batch := []order.Order{other}
			for _, s := range tt.states {
				batch = append(batch, snapshot(o, s, 1735689720123))
			}
			w, err := orderdb.WriteOrders(ctx, db, batch)
			if err != nil {
				t.Fatal(err)
			}
			if w.Inserted != 2 || w.Duplicates != len(tt.states)-1 {
				t.Fatalf("wrote %+v, want 2 inserted, %d duplicates", w, len(tt.states)-1)
			}
			if state, _ := orderdbtest.State(t, db, o.OrderID); state != tt.want {
				t.Fatalf("state %q, want %q", state, tt.want)
			}
			// Again, as a redelivery: nothing changes.
			if w, err = orderdb.WriteOrders(ctx, db, batch); err != nil || w.Inserted != 0 || w.Updated != 0 {
				t.Fatalf("redelivered: %+v, %v; want nothing inserted or updated", w, err)
			}
			if state, _ := orderdbtest.State(t, db, o.OrderID); state != tt.want {
				t.Fatalf("after the redelivery: state %q, want %q", state, tt.want)
			}
		})
	}
	rows, units, lu, lo := orderdbtest.Totals(t, db, "b")
	if rows != 2*int64(len(tests)) || lo != rows || lu != units {
		t.Fatalf("%d rows (%d units), ledger %d orders / %d units", rows, units, lo, lu)
	}
}

// TestWriteOrdersStatesConcurrent guards Invariants 3, 8 and 10 with many
// consumers: writers race on overlapping batches that hold every order's
// pending snapshot and its final one, in random orders. Every order ends
// one row in its final state, the inserts the writers report add up to one
// per order, and the ledger agrees.
func TestWriteOrdersStatesConcurrent(t *testing.T) {
	db := orderdbtest.Open(t)
	base := orderdbtest.Orders("c", 600)
	finals := []string{order.StatePaid, order.StateCancelled, order.StateExpired}
	var all []order.Order
	var want int64
	for i, o := range base {
		all = append(all, snapshot(o, order.StatePendingPayment, 1735689720123), snapshot(o, finals[i%3], 1735689720123))
		want += int64(o.Quantity)
	}
	var inserted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 2))
			mine := append([]order.Order(nil), all...)
			r.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			for i := 0; i < len(mine); i += 100 {
				for {
					wr, err := orderdb.WriteOrders(context.Background(), db, mine[i:i+100])
					if err == nil {
						inserted.Add(int64(wr.Inserted))
						break
					}
					if me, ok := errors.AsType[*mysql.MySQLError](err); !ok || me.Number != 1213 {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if inserted.Load() != int64(len(base)) {
		t.Fatalf("writers report %d inserts for %d orders", inserted.Load(), len(base))
	}
	rows, units, lu, lo := orderdbtest.Totals(t, db, "c")
	if rows != int64(len(base)) || units != want || lu != want || lo != rows {
		t.Fatalf("rows %d units %d ledger %d/%d; want %d rows, %d units", rows, units, lu, lo, len(base), want)
	}
	got := map[string]string{}
	rs, err := db.Query(`SELECT order_id, state FROM orders WHERE sale_id = 'c'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var id, state string
		if err := rs.Scan(&id, &state); err != nil {
			t.Fatal(err)
		}
		got[id] = state
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	for i, o := range base {
		if got[o.OrderID] != finals[i%3] {
			t.Fatalf("order %s: state %q, want %q", o.OrderID, got[o.OrderID], finals[i%3])
		}
	}
}

// openAt returns a pool on a fresh database of the test's own, migrated to
// version v only (0: not at all).
func openAt(t *testing.T, v int) *sql.DB {
	t.Helper()
	cfg := config.Default()
	cfg.MySQL.DSN = localstack.Database(t)
	db, err := orderdb.Open(cfg.MySQL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if v == 0 {
		return db
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := orderdb.MigrateTo(ctx, db, v); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestMigrateAddsStatesInPlace guards Invariant 3 across the upgrade to
// payment windows: a database at the schema before it (version 2), with
// orders and a ledger in it, is upgraded in place. Every row keeps its data
// and becomes a confirmed order without deadline, the ledger is untouched,
// and the upgraded table takes state snapshots of its old orders.
func TestMigrateAddsStatesInPlace(t *testing.T) {
	db := openAt(t, 2)
	ctx := context.Background()
	old := orderdbtest.Orders("m", 20)
	for _, o := range old {
		if _, err := db.Exec(`INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at) VALUES (?,?,?,?,?)`,
			o.OrderID, o.SaleID, o.UserID, o.Quantity, o.ReservedAt); err != nil {
			t.Fatal(err)
		}
	}
	var units int64
	for _, o := range old {
		units += int64(o.Quantity)
	}
	if _, err := db.Exec(`INSERT INTO sale_ledger (sale_id, units, orders) VALUES ('m', ?, ?)`, units, len(old)); err != nil {
		t.Fatal(err)
	}
	if v, err := orderdb.Version(ctx, db); err != nil || v != 2 {
		t.Fatalf("Version before the upgrade = %d, %v; want 2", v, err)
	}

	if err := orderdb.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil || v != orderdb.SchemaVersion() {
		t.Fatalf("schema at %d (%v), want %d", v, err, orderdb.SchemaVersion())
	}
	for _, o := range old {
		var user, state string
		var qty int
		var at time.Time
		var payBy sql.NullTime
		err := db.QueryRow(`SELECT user_id, quantity, reserved_at, state, pay_by FROM orders WHERE order_id = ?`, o.OrderID).
			Scan(&user, &qty, &at, &state, &payBy)
		if err != nil {
			t.Fatal(err)
		}
		if user != o.UserID || qty != o.Quantity || !at.Equal(o.ReservedAt) || state != order.StateConfirmed || payBy.Valid {
			t.Fatalf("order %s after the upgrade: %s %d %v %q %v; want %s %d %v confirmed, no pay_by",
				o.OrderID, user, qty, at, state, payBy, o.UserID, o.Quantity, o.ReservedAt)
		}
	}
	if rows, u, lu, lo := orderdbtest.Totals(t, db, "m"); rows != 20 || u != units || lu != units || lo != 20 {
		t.Fatalf("after the upgrade: %d rows %d units, ledger %d/%d", rows, u, lu, lo)
	}

	// The old orders take states; redelivered, they count nothing.
	w, err := orderdb.WriteOrders(ctx, db, []order.Order{snapshot(old[0], order.StateCancelled, 0), old[1]})
	if err != nil || w.Inserted != 0 || w.Duplicates != 2 || w.Updated != 1 {
		t.Fatalf("snapshots of old orders: %+v, %v; want 2 duplicates, 1 updated", w, err)
	}
	if state, _ := orderdbtest.State(t, db, old[0].OrderID); state != order.StateCancelled {
		t.Fatalf("old order cancelled: state %q", state)
	}
	if rows, _, lu, lo := orderdbtest.Totals(t, db, "m"); rows != 20 || lu != units || lo != 20 {
		t.Fatalf("after the snapshots: %d rows, ledger %d/%d", rows, lu, lo)
	}
}

// TestVersion: a database never migrated is at version 0, one migrated at
// SchemaVersion; every migration has a description for the migrate
// command.
func TestVersion(t *testing.T) {
	db := openAt(t, 0)
	if v, err := orderdb.Version(context.Background(), db); err != nil || v != 0 {
		t.Fatalf("Version of a fresh database = %d, %v; want 0", v, err)
	}
	if err := orderdb.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	if v, err := orderdb.Version(context.Background(), db); err != nil || v != orderdb.SchemaVersion() {
		t.Fatalf("Version = %d, %v; want %d", v, err, orderdb.SchemaVersion())
	}
	for v := 1; v <= orderdb.SchemaVersion(); v++ {
		if orderdb.Migration(v) == "" {
			t.Errorf("migration %d has no description", v)
		}
	}
	if orderdb.Migration(0) != "" || orderdb.Migration(orderdb.SchemaVersion()+1) != "" {
		t.Error("Migration describes a version that does not exist")
	}
}

// TestMigrateResumesAfterACrash: a migrate that crashed after its ALTER
// TABLE, before recording the version, leaves the columns there without
// the version row; the next migrate completes instead of failing on the
// existing columns.
func TestMigrateResumesAfterACrash(t *testing.T) {
	db := orderdbtest.Open(t)
	if _, err := db.Exec(`DELETE FROM schema_version WHERE version = ?`, orderdb.SchemaVersion()); err != nil {
		t.Fatal(err)
	}
	if err := orderdb.Migrate(context.Background(), db); err != nil {
		t.Fatalf("Migrate after a crash: %v", err)
	}
	var v int
	if err := db.QueryRow(`SELECT MAX(version) FROM schema_version`).Scan(&v); err != nil || v != orderdb.SchemaVersion() {
		t.Fatalf("schema at %d (%v), want %d", v, err, orderdb.SchemaVersion())
	}
}

// TestMigrateSpreadsTheLedger guards Invariant 3 across the upgrade to a
// ledger over slots: a database at version 3, whose sale has its one
// ledger row, is upgraded in place; the sale's ledger keeps its counts,
// new writes add to them, and so does a writer that knows no slots (a
// consumer of the previous version, still running during a rolling
// upgrade), whose statement lands in slot 0.
func TestMigrateSpreadsTheLedger(t *testing.T) {
	db := openAt(t, 3)
	ctx := context.Background()
	old := orderdbtest.Orders("m", 30)
	if _, err := orderdb.WriteOrders(ctx, db, old); err == nil {
		t.Fatal("WriteOrders on a version 3 schema: want an error (no slot column)")
	}
	var units int64
	for _, o := range old {
		units += int64(o.Quantity)
		if _, err := db.Exec(`INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at) VALUES (?,?,?,?,?)`,
			o.OrderID, o.SaleID, o.UserID, o.Quantity, o.ReservedAt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO sale_ledger (sale_id, units, orders) VALUES ('m', ?, ?)`, units, len(old)); err != nil {
		t.Fatal(err)
	}

	if err := orderdb.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if rows, u, lu, lo := orderdbtest.Totals(t, db, "m"); rows != 30 || u != units || lu != units || lo != 30 {
		t.Fatalf("after the upgrade: %d rows %d units, ledger %d/%d", rows, u, lu, lo)
	}
	more := orderdbtest.Orders("m", 10)
	for i := 0; i < len(more); i += 2 {
		if _, err := orderdb.WriteOrders(ctx, db, more[i:i+2]); err != nil {
			t.Fatal(err)
		}
	}
	// The previous version's ledger statement, for one order of its own.
	extra := orderdbtest.Orders("m", 1)[0]
	extra.Quantity = 3
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at) VALUES (?,?,?,?,?)`,
		extra.OrderID, extra.SaleID, extra.UserID, extra.Quantity, extra.ReservedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO sale_ledger (sale_id, units, orders) VALUES ('m', 3, 1)
		ON DUPLICATE KEY UPDATE units = units + VALUES(units), orders = orders + VALUES(orders)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, o := range more {
		units += int64(o.Quantity)
	}
	units += 3
	if rows, u, lu, lo := orderdbtest.Totals(t, db, "m"); rows != 41 || u != units || lu != units || lo != 41 {
		t.Fatalf("after new writes: %d rows %d units, ledger %d/%d; want 41 rows, %d units", rows, u, lu, lo, units)
	}
}
