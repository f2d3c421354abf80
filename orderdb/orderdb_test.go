package orderdb_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
)

// TestWriteOrdersIdempotent guards Invariant 3: every 202 becomes exactly one
// MySQL row. An order written again (a redelivery, a relay's duplicate, a
// repeat inside one batch) adds no row and nothing to the ledger.
func TestWriteOrdersIdempotent(t *testing.T) {
	db := orderdbtest.Open(t)
	ctx := context.Background()
	a := orderdbtest.Orders("a", 10)
	b := orderdbtest.Orders("b", 4)
	unitsOf := func(os ...[]order.Order) (u int64) {
		for _, l := range os {
			for _, o := range l {
				u += int64(o.Quantity)
			}
		}
		return u
	}
	more := orderdbtest.Orders("a", 5)
	tests := []struct {
		name                 string
		batch                []order.Order
		inserted, duplicates int
		rowsA, unitsA, ordsA int64
	}{
		{"new orders", a, 10, 0, 10, unitsOf(a), 10},
		{"the same again", a, 0, 10, 10, unitsOf(a), 10},
		{"half old, half new", append(append([]order.Order{}, a[:5]...), more...), 5, 5, 15, unitsOf(a, more), 15},
		{"repeated inside one batch", []order.Order{a[0], a[0], more[0]}, 0, 3, 15, unitsOf(a, more), 15},
		{"two sales at once", append(append([]order.Order{}, b...), a[9]), 4, 1, 15, unitsOf(a, more), 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := orderdb.WriteOrders(ctx, db, tt.batch)
			if err != nil {
				t.Fatal(err)
			}
			if w.Inserted != tt.inserted || w.Duplicates != tt.duplicates {
				t.Fatalf("wrote %+v, want %d inserted, %d duplicates", w, tt.inserted, tt.duplicates)
			}
			rows, units, lu, lo := orderdbtest.Totals(t, db, "a")
			if rows != tt.rowsA || units != tt.unitsA || lu != units || lo != rows || lo != tt.ordsA {
				t.Fatalf("sale a: rows %d units %d, ledger %d units %d orders; want rows %d units %d", rows, units, lu, lo, tt.rowsA, tt.unitsA)
			}
		})
	}
	rows, units, lu, lo := orderdbtest.Totals(t, db, "b")
	if rows != 4 || units != unitsOf(b) || lu != units || lo != 4 {
		t.Fatalf("sale b: rows %d units %d, ledger %d/%d", rows, units, lu, lo)
	}
}

// TestWriteOrdersConcurrent guards Invariants 3 and 10 (one row per order,
// whatever the number of consumers): writers race on overlapping batches,
// as duplicates on the broker and redeliveries make consumers do.
func TestWriteOrdersConcurrent(t *testing.T) {
	db := orderdbtest.Open(t)
	all := orderdbtest.Orders("s", 2000)
	var want int64
	for _, o := range all {
		want += int64(o.Quantity)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			mine := append([]order.Order(nil), all...)
			r.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			for i := 0; i < len(mine); i += 100 {
				for {
					_, err := orderdb.WriteOrders(context.Background(), db, mine[i:i+100])
					if err == nil {
						break
					}
					// A deadlock (ER_LOCK_DEADLOCK) is an ordinary,
					// retried failure.
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
	rows, units, lu, lo := orderdbtest.Totals(t, db, "s")
	if rows != 2000 || units != want || lu != want || lo != 2000 {
		t.Fatalf("rows %d units %d ledger %d/%d; want 2000 rows, %d units", rows, units, lu, lo, want)
	}
}

// TestWriteOrdersFourWritersOneSale guards Invariant 3 with the ledger
// spread over slots: four writers of one sale at once, on batches that
// overlap (each order is written by two writers), insert every order once,
// count each once in the writers' totals, and leave a ledger, summed over
// its slots, equal to the rows.
func TestWriteOrdersFourWritersOneSale(t *testing.T) {
	db := orderdbtest.Open(t)
	all := orderdbtest.Orders("one", 1200)
	var want int64
	for _, o := range all {
		want += int64(o.Quantity)
	}
	const writers = 4
	var inserted, duplicates atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			// Writer w writes quarters w and w+1: every order twice.
			var mine []order.Order
			for _, q := range []int{w, (w + 1) % writers} {
				mine = append(mine, all[q*len(all)/writers:(q+1)*len(all)/writers]...)
			}
			r := rand.New(rand.NewPCG(uint64(w), 2))
			r.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			for i := 0; i < len(mine); i += 50 {
				for {
					n, err := orderdb.WriteOrders(context.Background(), db, mine[i:min(i+50, len(mine))])
					if err == nil {
						inserted.Add(int64(n.Inserted))
						duplicates.Add(int64(n.Duplicates))
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
	if inserted.Load() != int64(len(all)) || duplicates.Load() != int64(len(all)) {
		t.Errorf("writers counted %d inserted, %d duplicates; want %d of each", inserted.Load(), duplicates.Load(), len(all))
	}
	rows, units, lu, lo := orderdbtest.Totals(t, db, "one")
	if rows != int64(len(all)) || units != want || lu != want || lo != rows {
		t.Fatalf("rows %d units %d, ledger %d units / %d orders; want %d rows, %d units, and the ledger equal", rows, units, lu, lo, len(all), want)
	}
	var slots int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sale_ledger WHERE sale_id = 'one'`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	// 48 transactions, each on a random slot of 32: all on one slot
	// would take odds of 32^-47.
	if slots < 2 || slots > orderdb.LedgerSlots {
		t.Errorf("the sale's ledger has %d rows, want 2 to %d", slots, orderdb.LedgerSlots)
	}
}

// TestWriteOrdersDoNotQueueOnTheLedger: while one writer of a sale holds
// its transaction open after its ledger statement (as a consumer does for
// the round trip to COMMIT), a second writer of the same sale commits
// without waiting for it. With one ledger row per sale the second one
// waited for the first one's row lock, until innodb_lock_wait_timeout.
func TestWriteOrdersDoNotQueueOnTheLedger(t *testing.T) {
	db := orderdbtest.OpenWith(t, map[string]string{"innodb_lock_wait_timeout": "1"})
	ctx := context.Background()
	first, second := orderdbtest.Orders("hot", 5), orderdbtest.Orders("hot", 7)
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := orderdb.WriteOrdersHolding(ctx, db, first, func() {
			close(held)
			<-release
		})
		done <- err
	}()
	stop := sync.OnceFunc(func() { close(release) })
	defer stop()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("first writer: %v", err)
	}
	w, err := orderdb.WriteOrders(ctx, db, second)
	if err != nil {
		t.Fatalf("second writer of the sale, while the first one's transaction is open: %v", err)
	}
	if w.Inserted != len(second) {
		t.Fatalf("second writer: %+v, want %d inserted", w, len(second))
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("first writer: %v", err)
	}
	var want int64
	for _, o := range append(first, second...) {
		want += int64(o.Quantity)
	}
	if rows, units, lu, lo := orderdbtest.Totals(t, db, "hot"); rows != 12 || units != want || lu != want || lo != 12 {
		t.Fatalf("rows %d units %d, ledger %d/%d; want 12 rows, %d units", rows, units, lu, lo, want)
	}
}

// TestIsDataError tells apart what MySQL refuses as data (no retry can fix
// it: the consumer dead-letters the order) from every other failure (the
// consumer retries).
func TestIsDataError(t *testing.T) {
	db := orderdbtest.Open(t)
	if _, err := db.Exec(`ALTER TABLE orders MODIFY quantity TINYINT NOT NULL`); err != nil {
		t.Fatal(err)
	}
	big := orderdbtest.Orders("s", 1)
	big[0].Quantity = 200 // out of TINYINT's range
	_, refused := orderdb.WriteOrders(context.Background(), db, big)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, cancelled := orderdb.WriteOrders(ctx, db, orderdbtest.Orders("s", 1))
	if refused == nil || cancelled == nil {
		t.Fatalf("WriteOrders: %v, %v; want both to fail", refused, cancelled)
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"out of range", refused, true},
		{"wrapped again", fmt.Errorf("batch: %w", refused), true},
		{"cancelled", cancelled, false},
		{"a deadlock", &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}, false},
		{"no error", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := orderdb.IsDataError(tt.err); got != tt.want {
				t.Fatalf("IsDataError(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
	if rows, _, _, _ := orderdbtest.Totals(t, db, "s"); rows != 0 {
		t.Fatalf("%d rows after two failed writes", rows)
	}
}

func TestMigrateConcurrently(t *testing.T) {
	db := orderdbtest.Open(t) // migrated once already
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs <- orderdb.Migrate(ctx, db)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var v, n int
	if err := db.QueryRow(`SELECT MAX(version), COUNT(*) FROM schema_version`).Scan(&v, &n); err != nil {
		t.Fatal(err)
	}
	if v != orderdb.SchemaVersion() || n != orderdb.SchemaVersion() {
		t.Fatalf("schema_version max %d, %d rows; want %d", v, n, orderdb.SchemaVersion())
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	db := orderdbtest.Open(t)
	if _, err := db.Exec(`INSERT INTO schema_version (version) VALUES (?)`, orderdb.SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if err := orderdb.Migrate(context.Background(), db); !errors.Is(err, orderdb.ErrSchemaNewer) {
		t.Fatalf("Migrate = %v, want ErrSchemaNewer", err)
	}
}

// The rows' values are written as SQL literals (write.go): a value that
// holds a quote, a backslash or a byte outside printable ASCII reads back
// byte for byte, with and without NO_BACKSLASH_ESCAPES, and ends nothing
// it should not. The ids here are not ones the gateway makes (API.md's
// ids hold none of these), but a consumer takes what a message holds.
func TestWriteOrdersLiterals(t *testing.T) {
	for _, mode := range []string{"", "NO_BACKSLASH_ESCAPES"} {
		t.Run("sql_mode="+mode, func(t *testing.T) {
			db := orderdbtest.OpenWith(t, map[string]string{"sql_mode": "'" + mode + "'"})
			ctx := context.Background()
			at := time.UnixMilli(1796311105727).UTC()
			hostile := []order.Order{
				{OrderID: "lit-" + localstack.RandomHex(4), SaleID: "lit'sale", UserID: `o'brien\`, Quantity: 2, ReservedAt: at,
					State: order.StatePendingPayment, PayBy: at.Add(time.Minute), Seq: 7, IdemKey: `k'); DROP TABLE orders; -- \'`},
				{OrderID: "lit-" + localstack.RandomHex(4), SaleID: "lit'sale", UserID: "tab\there", Quantity: 1, ReservedAt: at.Add(time.Millisecond),
					State: order.StateConfirmed, Seq: 8, IdemKey: "\\\\x00"},
			}
			w, err := orderdb.WriteOrders(ctx, db, hostile)
			if err != nil || w.Inserted != 2 {
				t.Fatalf("WriteOrders = %+v, %v; want 2 inserted", w, err)
			}
			for _, want := range hostile {
				if got := orderdbtest.Row(t, db, want.OrderID); got != want {
					t.Errorf("row %s:\n got %+v\nwant %+v", want.OrderID, got, want)
				}
			}
			// Again, as a redelivery with a later state: the update
			// statement names the same literals.
			hostile[0].State, hostile[0].Seq = order.StatePaid, 9
			if w, err := orderdb.WriteOrders(ctx, db, hostile[:1]); err != nil || w.Updated != 1 {
				t.Fatalf("WriteOrders again = %+v, %v; want 1 updated", w, err)
			}
			if got := orderdbtest.Row(t, db, hostile[0].OrderID); got != hostile[0] {
				t.Errorf("row after the update:\n got %+v\nwant %+v", got, hostile[0])
			}
			if rows, units, lu, lo := orderdbtest.Totals(t, db, "lit'sale"); rows != 2 || units != 3 || lu != 3 || lo != 2 {
				t.Errorf("sale lit'sale: %d rows, %d units, ledger %d units %d orders; want 2, 3, 3, 2", rows, units, lu, lo)
			}
		})
	}
}

// BenchmarkWriteOrders writes batches of 256 new orders of one sale with
// payment windows and Idempotency-Keys (every column set), as a consumer's
// batch is, and reports the Go side's allocations and CPU per order (the
// process's own, beside MariaDB's). Compare two trees with
//
//	go test -run '^$' -bench WriteOrders -count 6 ./orderdb/
func BenchmarkWriteOrders(b *testing.B) {
	db := orderdbtest.Open(b)
	ctx := context.Background()
	const size = 256
	batch := make([]order.Order, size)
	n := 0
	var cpu time.Duration
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		at := time.UnixMilli(time.Now().UnixMilli()).UTC()
		for i := range batch {
			n++
			batch[i] = order.Order{OrderID: fmt.Sprintf("bw-%s-%d", localstack.RandomHex(4), n), SaleID: "bench-write",
				UserID: fmt.Sprintf("u%d", n), Quantity: 1, ReservedAt: at, State: order.StatePendingPayment,
				PayBy: at.Add(10 * time.Minute), Seq: int64(n), IdemKey: fmt.Sprintf("key-%d", n)}
		}
		b.StartTimer()
		cpu0 := processCPU(b)
		if w, err := orderdb.WriteOrders(ctx, db, batch); err != nil || w.Inserted != size {
			b.Fatalf("WriteOrders = %+v, %v", w, err)
		}
		cpu += processCPU(b) - cpu0
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/order")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "go-cpu-µs/order")
}

// processCPU is this process's CPU time so far, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
