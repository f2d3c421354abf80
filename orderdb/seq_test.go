package orderdb_test

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
	"testing"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// event is a snapshot of o in state with the sale's event number seq and
// the idempotency key key ("": none), pay_by the usual deadline.
func event(o order.Order, state string, seq int64, key string) order.Order {
	o = snapshot(o, state, 1735689720123)
	o.Seq, o.IdemKey = seq, key
	return o
}

// noEmptyKeys fails the test when a row of sale holds an empty idempotency
// key: no key is NULL, so that the repairer restores no key "".
func noEmptyKeys(t *testing.T, db *sql.DB, sale string) {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM orders WHERE sale_id = ? AND idempotency_key = ''`, sale).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("sale %s: %d rows hold the key '' instead of NULL", sale, n)
	}
}

// TestWriteOrdersSeq guards what the repair of a rolled-back Redis reads
// from MySQL: a row holds the largest seq of the snapshots written to it,
// whatever order they arrive in (a redelivered older one does not lower
// it, a final row keeps its state but its seq rises), and the reservation's
// idempotency key once one snapshot brought it, never replaced. A change of
// seq or key alone counts as an update. Each row is a sequence of
// WriteOrders calls, one batch each, on one fresh order.
func TestWriteOrdersSeq(t *testing.T) {
	type step struct {
		state    string
		seq      int64
		key      string
		inserted int // what this write must report
		updated  int
	}
	P, C := order.StatePendingPayment, order.StateConfirmed
	paid, expired := order.StatePaid, order.StateExpired
	tests := []struct {
		name     string
		steps    []step
		state    string
		seq      int64
		key      string
		wantNull bool // the key column is NULL
	}{
		{"a reservation's seq and key", []step{{P, 3, "k-1", 1, 0}}, P, 3, "k-1", false},
		{"no key is NULL", []step{{C, 4, "", 1, 0}}, C, 4, "", true},
		{"a later state raises seq and keeps the key", []step{{P, 3, "k", 1, 0}, {paid, 7, "", 0, 1}}, paid, 7, "k", false},
		{"a redelivered older snapshot does not lower seq",
			[]step{{P, 3, "k", 1, 0}, {paid, 7, "", 0, 1}, {P, 3, "k", 0, 0}}, paid, 7, "k", false},
		{"a final row keeps its state, its seq rises", []step{{paid, 5, "", 1, 0}, {expired, 8, "", 0, 1}}, paid, 8, "", true},
		{"a change of seq alone is an update", []step{{P, 3, "k", 1, 0}, {P, 6, "k", 0, 1}}, P, 6, "k", false},
		{"the key arrives after the final state", []step{{paid, 9, "", 1, 0}, {P, 4, "k", 0, 1}}, paid, 9, "k", false},
		{"a key is never replaced", []step{{P, 3, "k1", 1, 0}, {P, 3, "k2", 0, 0}}, P, 3, "k1", false},
		{"seq 0 (a relay older than the count) lowers nothing", []step{{P, 5, "k", 1, 0}, {paid, 0, "", 0, 1}}, paid, 5, "k", false},
		{"the same snapshot twice", []step{{P, 3, "k", 1, 0}, {P, 3, "k", 0, 0}}, P, 3, "k", false},
		{"no seq at all", []step{{C, 0, "", 1, 0}, {order.StateCancelled, 0, "", 0, 1}}, order.StateCancelled, 0, "", true},
	}
	db := orderdbtest.Open(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := orderdbtest.Orders("q", 1)[0]
			for i, st := range tt.steps {
				w, err := orderdb.WriteOrders(ctx, db, []order.Order{event(o, st.state, st.seq, st.key)})
				if err != nil {
					t.Fatal(err)
				}
				if w.Inserted != st.inserted || w.Duplicates != 1-st.inserted || w.Updated != st.updated {
					t.Fatalf("step %d (%s, seq %d): wrote %+v, want %d inserted, %d updated", i, st.state, st.seq, w, st.inserted, st.updated)
				}
			}
			got := orderdbtest.Row(t, db, o.OrderID)
			if got.State != tt.state || got.Seq != tt.seq || got.IdemKey != tt.key {
				t.Fatalf("row: state %q seq %d key %q; want %q %d %q", got.State, got.Seq, got.IdemKey, tt.state, tt.seq, tt.key)
			}
			var null bool
			if err := db.QueryRow(`SELECT idempotency_key IS NULL FROM orders WHERE order_id = ?`, o.OrderID).Scan(&null); err != nil {
				t.Fatal(err)
			}
			if null != tt.wantNull {
				t.Fatalf("key NULL: %v, want %v", null, tt.wantNull)
			}
		})
	}
	noEmptyKeys(t, db, "q")
	if rows, units, lu, lo := orderdbtest.Totals(t, db, "q"); rows != int64(len(tests)) || lo != rows || lu != units {
		t.Fatalf("%d rows (%d units), ledger %d orders / %d units; want %d rows, counted once", rows, units, lo, lu, len(tests))
	}
}

// TestWriteOrdersSeqInOneBatch: several snapshots of one order in one batch
// leave the row what writing them one by one would: the state of the first
// final one (else the last), the largest seq of them all, and the key one
// of them carries; whether the row is new or already there.
func TestWriteOrdersSeqInOneBatch(t *testing.T) {
	type snap struct {
		state string
		seq   int64
		key   string
	}
	P, C := order.StatePendingPayment, order.StateConfirmed
	paid := order.StatePaid
	tests := []struct {
		name    string
		before  []snap // written first, in a batch of their own
		batch   []snap
		updated int // of the batch's write
		want    snap
	}{
		{"pending, paid, pending again", nil, []snap{{P, 3, "k"}, {paid, 7, ""}, {P, 3, "k"}}, 0, snap{paid, 7, "k"}},
		{"paid before its reservation", nil, []snap{{paid, 7, ""}, {P, 3, "k"}}, 0, snap{paid, 7, "k"}},
		{"the first final wins, the largest seq stays", nil, []snap{{P, 3, "k"}, {order.StateExpired, 6, ""}, {paid, 9, ""}}, 0,
			snap{order.StateExpired, 9, "k"}},
		{"live only: the last state, the largest seq", nil, []snap{{P, 5, "k"}, {C, 4, ""}}, 0, snap{C, 5, "k"}},
		{"no key anywhere", nil, []snap{{C, 2, ""}, {order.StateCancelled, 4, ""}}, 0, snap{order.StateCancelled, 4, ""}},
		{"an existing row takes the largest", []snap{{P, 3, "k"}}, []snap{{paid, 8, ""}, {P, 3, "k"}}, 1, snap{paid, 8, "k"}},
		{"an existing row takes the key", []snap{{paid, 8, ""}}, []snap{{P, 3, "k"}, {paid, 8, ""}}, 1, snap{paid, 8, "k"}},
		{"an existing row with a larger seq keeps it", []snap{{paid, 9, "k"}}, []snap{{P, 3, "k"}, {paid, 8, ""}}, 0, snap{paid, 9, "k"}},
	}
	db := orderdbtest.Open(t)
	ctx := context.Background()
	write := func(t *testing.T, o order.Order, snaps []snap) orderdb.Written {
		t.Helper()
		other := orderdbtest.Orders("b", 1)[0] // a new order beside it
		batch := []order.Order{event(other, P, 1, "")}
		for _, s := range snaps {
			batch = append(batch, event(o, s.state, s.seq, s.key))
		}
		w, err := orderdb.WriteOrders(ctx, db, batch)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := orderdbtest.Orders("b", 1)[0]
			inserted := 2
			if tt.before != nil {
				write(t, o, tt.before)
				inserted = 1
			}
			if w := write(t, o, tt.batch); w.Inserted != inserted || w.Duplicates != len(tt.batch)+1-inserted || w.Updated != tt.updated {
				t.Fatalf("wrote %+v, want %d inserted, %d duplicates, %d updated", w, inserted, len(tt.batch)+1-inserted, tt.updated)
			}
			got := orderdbtest.Row(t, db, o.OrderID)
			if (snap{got.State, got.Seq, got.IdemKey}) != tt.want {
				t.Fatalf("row %+v, want %+v", snap{got.State, got.Seq, got.IdemKey}, tt.want)
			}
		})
	}
	noEmptyKeys(t, db, "b")
}

// TestWriteOrdersStatements pins the cost of the usual batch: new orders
// take their seq and key in their inserts, one per (sale, quantity), and
// the ledger's; only a batch that meets existing rows runs one more
// statement.
func TestWriteOrdersStatements(t *testing.T) {
	db := orderdbtest.Open(t)
	db.SetMaxOpenConns(1) // one session, whose counter is read below
	ctx := context.Background()
	inserts := func() (n int64) {
		t.Helper()
		var name string
		if err := db.QueryRowContext(ctx, `SHOW SESSION STATUS LIKE 'Com_insert'`).Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	batch := orderdbtest.Orders("n", 9) // quantities 1, 2 and 3: three groups
	for i := range batch {
		batch[i].Seq, batch[i].IdemKey = int64(i+1), "k"+batch[i].OrderID
	}
	before := inserts()
	if w, err := orderdb.WriteOrders(ctx, db, batch); err != nil || w.Inserted != 9 {
		t.Fatalf("WriteOrders = %+v, %v", w, err)
	}
	if n := inserts() - before; n != 3+1 {
		t.Fatalf("a batch of new orders ran %d INSERTs, want 4: one per quantity and the ledger's", n)
	}
	for _, o := range batch {
		if got := orderdbtest.Row(t, db, o.OrderID); got != o {
			t.Fatalf("row %+v, want %+v", got, o)
		}
	}
	before = inserts()
	if w, err := orderdb.WriteOrders(ctx, db, batch); err != nil || w.Duplicates != 9 || w.Updated != 0 {
		t.Fatalf("redelivered: %+v, %v", w, err)
	}
	if n := inserts() - before; n != 3+1 {
		t.Fatalf("a redelivered batch ran %d INSERTs, want 4: one per quantity and the update", n)
	}
}

// TestAfter: the repairer reads a sale's rows after a cursor (seq,
// order_id) page by page, and gets every row with a seq above the one it
// starts from exactly once, in order, every field as written, however
// many rows share a seq and whatever the page size; the rows of other
// sales never.
func TestAfter(t *testing.T) {
	db := orderdbtest.Open(t)
	ctx := context.Background()
	seqs := []int64{0, 0, 1, 2, 2, 2, 3, 5, 5, 5, 5, 8, 9, 9}
	mine := orderdbtest.Orders("p", len(seqs))
	others := orderdbtest.Orders("p2", len(seqs))
	for i, s := range seqs {
		mine[i].Seq, others[i].Seq = s, s
		if i%2 == 0 {
			mine[i] = event(mine[i], order.StatePendingPayment, s, "key "+mine[i].OrderID)
		}
	}
	if _, err := orderdb.WriteOrders(ctx, db, append(append([]order.Order{}, mine...), others...)); err != nil {
		t.Fatal(err)
	}
	sorted := slices.Clone(mine)
	slices.SortFunc(sorted, func(a, b order.Order) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.OrderID, b.OrderID))
	})

	for _, from := range []int64{-1, 0, 1, 2, 4, 5, 9} {
		var want []order.Order
		for _, o := range sorted {
			if o.Seq > from {
				want = append(want, o)
			}
		}
		for _, limit := range []int{1, 2, 3, 4, 100} {
			var got []order.Order
			seq, id := from, ""
			for range len(seqs) + 2 { // bounded: a page that makes no progress fails below
				page, err := orderdb.After(ctx, db, "p", seq, id, limit)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit {
					t.Fatalf("from %d, limit %d: a page of %d", from, limit, len(page))
				}
				got = append(got, page...)
				if len(page) < limit {
					break
				}
				seq, id = page[len(page)-1].Seq, page[len(page)-1].OrderID
			}
			if !slices.Equal(got, want) {
				t.Fatalf("from seq %d, pages of %d:\n got  %v\n want %v", from, limit, got, want)
			}
		}
	}

	// A cursor inside a run of equal seqs: the rest of the run, then on.
	at := slices.IndexFunc(sorted, func(o order.Order) bool { return o.Seq == 5 }) + 1
	page, err := orderdb.After(ctx, db, "p", 5, sorted[at].OrderID, 100)
	if err != nil || !slices.Equal(page, sorted[at+1:]) {
		t.Fatalf("after (5, %s): %v, %v; want %v", sorted[at].OrderID, page, err, sorted[at+1:])
	}
	if page, err := orderdb.After(ctx, db, "none", -1, "", 10); err != nil || len(page) != 0 {
		t.Fatalf("a sale without rows: %v, %v", page, err)
	}
	if _, err := orderdb.After(ctx, db, "p", 0, "", 0); err == nil {
		t.Fatal("After with limit 0: no error")
	}
}

// TestMaxSeq: the last event of a sale MySQL holds, 0 for a sale without
// rows; other sales' rows do not count, and an older snapshot lowers
// nothing.
func TestMaxSeq(t *testing.T) {
	db := orderdbtest.Open(t)
	ctx := context.Background()
	maxSeq := func(sale string) int64 {
		t.Helper()
		s, err := orderdb.MaxSeq(ctx, db, sale)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := maxSeq("x"); s != 0 {
		t.Fatalf("MaxSeq of a sale without rows = %d, want 0", s)
	}
	x := orderdbtest.Orders("x", 3)
	x[0].Seq, x[1].Seq, x[2].Seq = 3, 9, 4
	y := orderdbtest.Orders("y", 1)
	y[0].Seq = 20
	if _, err := orderdb.WriteOrders(ctx, db, append(x, y...)); err != nil {
		t.Fatal(err)
	}
	if s := maxSeq("x"); s != 9 {
		t.Fatalf("MaxSeq = %d, want 9", s)
	}
	steps := []struct {
		name string
		o    order.Order
		want int64
	}{
		{"a change of state", event(x[0], order.StateCancelled, 12, ""), 12},
		{"an older snapshot redelivered", event(x[1], order.StateConfirmed, 9, ""), 12},
	}
	for _, st := range steps {
		if _, err := orderdb.WriteOrders(ctx, db, []order.Order{st.o}); err != nil {
			t.Fatal(err)
		}
		if s := maxSeq("x"); s != st.want {
			t.Fatalf("after %s: MaxSeq = %d, want %d", st.name, s, st.want)
		}
	}
}

// TestMigrateAddsSeqInPlace: a database at version 3 (states, no seq), with
// orders and a ledger in it, is upgraded in place: every row keeps its data,
// with seq 0 and no key (NULL); the index the repairer reads is there; and
// the old rows take the seq and key of later snapshots, the ledger
// untouched.
func TestMigrateAddsSeqInPlace(t *testing.T) {
	db := openAt(t, 3)
	ctx := context.Background()
	old := orderdbtest.Orders("m", 20)
	var units int64
	for i := range old {
		if i%2 == 0 {
			old[i] = snapshot(old[i], order.StatePendingPayment, 1735689720123)
		}
		o := old[i]
		var payBy any
		if !o.PayBy.IsZero() {
			payBy = o.PayBy
		}
		if _, err := db.Exec(`INSERT INTO orders (order_id, sale_id, user_id, quantity, reserved_at, state, pay_by) VALUES (?,?,?,?,?,?,?)`,
			o.OrderID, o.SaleID, o.UserID, o.Quantity, o.ReservedAt, o.State, payBy); err != nil {
			t.Fatal(err)
		}
		units += int64(o.Quantity)
	}
	if _, err := db.Exec(`INSERT INTO sale_ledger (sale_id, units, orders) VALUES ('m', ?, ?)`, units, len(old)); err != nil {
		t.Fatal(err)
	}
	if v, err := orderdb.Version(ctx, db); err != nil || v != 3 {
		t.Fatalf("Version before the upgrade = %d, %v; want 3", v, err)
	}

	if err := orderdb.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if v, err := orderdb.Version(ctx, db); err != nil || v != orderdb.SchemaVersion() {
		t.Fatalf("Version after the upgrade = %d, %v; want %d", v, err, orderdb.SchemaVersion())
	}
	for _, o := range old {
		if got := orderdbtest.Row(t, db, o.OrderID); got != o { // o has seq 0, no key
			t.Fatalf("after the upgrade: %+v, want %+v", got, o)
		}
	}
	var keys int
	if err := db.QueryRow(`SELECT COUNT(*) FROM orders WHERE idempotency_key IS NOT NULL`).Scan(&keys); err != nil || keys != 0 {
		t.Fatalf("%d rows with a key after the upgrade (%v), want 0", keys, err)
	}
	var index string
	if err := db.QueryRow(`SELECT GROUP_CONCAT(column_name ORDER BY seq_in_index) FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'orders' AND index_name = 'orders_sale_seq'`).Scan(&index); err != nil || index != "sale_id,seq" {
		t.Fatalf("index orders_sale_seq on %q (%v), want sale_id,seq", index, err)
	}
	// Every index an insert pays for, and no other: orders_sale (sale_id)
	// went in version 7, orders_sale_seq serving its reads.
	var indexes string
	if err := db.QueryRow(`SELECT GROUP_CONCAT(DISTINCT index_name ORDER BY index_name = 'PRIMARY' DESC, index_name) FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'orders'`).Scan(&indexes); err != nil || indexes != "PRIMARY,orders_sale_seq" {
		t.Fatalf("indexes of orders after the upgrade: %q (%v), want PRIMARY,orders_sale_seq", indexes, err)
	}
	if s, err := orderdb.MaxSeq(ctx, db, "m"); err != nil || s != 0 {
		t.Fatalf("MaxSeq after the upgrade = %d, %v; want 0", s, err)
	}

	w, err := orderdb.WriteOrders(ctx, db, []order.Order{
		event(old[0], order.StatePaid, 12, ""),
		event(old[1], order.StateConfirmed, 3, "k1"),
		old[2], // as before the upgrade: no seq, no key
	})
	if err != nil || w.Inserted != 0 || w.Duplicates != 3 || w.Updated != 2 {
		t.Fatalf("snapshots of old orders: %+v, %v; want 3 duplicates, 2 updated", w, err)
	}
	if got := orderdbtest.Row(t, db, old[0].OrderID); got.State != order.StatePaid || got.Seq != 12 || got.IdemKey != "" {
		t.Fatalf("old order paid: %+v", got)
	}
	if got := orderdbtest.Row(t, db, old[1].OrderID); got.Seq != 3 || got.IdemKey != "k1" {
		t.Fatalf("old order given seq and key: %+v", got)
	}
	if s, err := orderdb.MaxSeq(ctx, db, "m"); err != nil || s != 12 {
		t.Fatalf("MaxSeq = %d, %v; want 12", s, err)
	}
	if rows, _, lu, lo := orderdbtest.Totals(t, db, "m"); rows != 20 || lu != units || lo != 20 {
		t.Fatalf("after the snapshots: %d rows, ledger %d/%d", rows, lu, lo)
	}
}
