package bench

// The three reservation strategies of DESIGN.md, measured side by side under
// the same contention: 50 goroutines reserving one unit each, again and
// again, of ONE item whose stock is exactly b.N, until it is exhausted.
//
//	go test -run '^$' -bench Contention -benchtime 3s ./bench/
//
// Each reports committed reservations/s, the p99 latency of one reservation
// (retries included) in µs, and, for WATCH/MULTI, aborted transactions per
// committed one. After each round the item must be at 0 with b.N units
// recorded: an oversell or a lost unit fails the benchmark.
//
// The row lock runs in MariaDB (InnoDB) in a database of its own,
// flashgate_test_bench_<random>, dropped afterwards; Redis keys carry a
// random prefix and are deleted afterwards. The Lua strategy is the real
// reserve script, loaded by scripts.Loader and called through gateway.Store
// one reservation per call (no batching), on a sale made by the real admin
// script: it does more per call (per-user limit, outbox entry, order
// record) than the other two, so the comparison leans against it.

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// contenders is the number of buyers fighting over the one item.
const contenders = 50

// roundTimeout bounds one b.N round, whatever a server does.
const roundTimeout = 5 * time.Minute

var errNoStock = errors.New("no stock left (the stock was b.N: a unit was lost or oversold)")

func BenchmarkContention(b *testing.B) {
	b.Run("rowlock", benchRowLock)
	b.Run("watch", benchWatch)
	b.Run("lua", benchLua)
}

// contend runs b.N reservations on contenders goroutines, each taking the
// next ticket and calling reserve until it commits, and reports the
// metrics. reserve returns how many times it had to retry (aborts).
func contend(b *testing.B, reserve func(ctx context.Context, ticket int) (aborts int, err error)) (abortsPerCommit float64) {
	ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
	defer cancel()
	var (
		next    atomic.Int64
		aborts  atomic.Int64
		hists   = make([]Histogram, contenders)
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	b.ResetTimer()
	start := time.Now()
	for g := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				a, err := reserve(ctx, int(i))
				if err != nil {
					errOnce.Do(func() { first = err; cancel() })
					return
				}
				hists[g].Record(time.Since(t0))
				aborts.Add(int64(a))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if first != nil {
		b.Fatalf("reserve: %v", first)
	}
	var all Histogram
	for i := range hists {
		all.Merge(&hists[i])
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "reservations/s")
	b.ReportMetric(float64(all.Quantile(0.99))/float64(time.Microsecond), "p99-µs")
	return float64(aborts.Load()) / float64(b.N)
}

// --- (a) row lock: SELECT … FOR UPDATE + UPDATE in one InnoDB transaction.

func benchRowLock(b *testing.B) {
	db, _ := testDatabase(b)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `REPLACE INTO items (id, stock) VALUES (1, ?)`, b.N); err != nil {
		b.Fatal(err)
	}
	contend(b, func(ctx context.Context, _ int) (int, error) {
		for aborts := 0; ; aborts++ {
			err := reserveRow(ctx, db)
			var me *mysql.MySQLError
			if errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) {
				continue // deadlock or lock wait timeout: the transaction was rolled back
			}
			return aborts, err
		}
	})
	var left int64
	if err := db.QueryRowContext(ctx, `SELECT stock FROM items WHERE id = 1`).Scan(&left); err != nil || left != 0 {
		b.Fatalf("stock left %d (%v), want 0", left, err)
	}
}

func reserveRow(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var stock int64
	if err := tx.QueryRowContext(ctx, `SELECT stock FROM items WHERE id = ? FOR UPDATE`, 1).Scan(&stock); err != nil {
		return err
	}
	if stock <= 0 {
		return errNoStock
	}
	if _, err := tx.ExecContext(ctx, `UPDATE items SET stock = stock - 1 WHERE id = ?`, 1); err != nil {
		return err
	}
	return tx.Commit()
}

// --- (b) Redis WATCH/MULTI/EXEC, optimistic: retry when another buyer won.

func benchWatch(b *testing.B) {
	rdb, prefix := benchRedis(b)
	ctx := context.Background()
	stockKey, usersKey := prefix+":{item}:stock", prefix+":{item}:users"
	if err := rdb.Set(ctx, stockKey, b.N, 0).Err(); err != nil {
		b.Fatal(err)
	}
	rdb.Del(ctx, usersKey)
	apc := contend(b, func(ctx context.Context, ticket int) (int, error) {
		user := "u" + strconv.Itoa(ticket)
		for aborts := 0; ; aborts++ {
			err := rdb.Watch(ctx, func(tx *redis.Tx) error {
				n, err := tx.Get(ctx, stockKey).Int64()
				if err != nil {
					return err
				}
				if n <= 0 {
					return errNoStock
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.DecrBy(ctx, stockKey, 1)
					p.HIncrBy(ctx, usersKey, user, 1)
					return nil
				})
				return err
			}, stockKey)
			if errors.Is(err, redis.TxFailedErr) {
				continue
			}
			return aborts, err
		}
	})
	b.ReportMetric(apc, "aborts/commit")
	left, err := rdb.Get(ctx, stockKey).Int64()
	if err != nil || left != 0 || rdb.HLen(ctx, usersKey).Val() != int64(b.N) {
		b.Fatalf("stock left %d (%v), buyers %d; want 0 and %d", left, err, rdb.HLen(ctx, usersKey).Val(), b.N)
	}
}

// --- (c) the Lua script: one EVALSHA of the real reserve script per buyer,
// through the gateway's Store (without its batcher), on a sale made by the
// real admin script.

var luaRound atomic.Int64

func benchLua(b *testing.B) {
	rdb, prefix := benchRedis(b)
	ctx := context.Background()
	loader := scripts.New(rdb, "", scripts.Keys{Prefix: prefix})
	if _, err := loader.Load(ctx); err != nil {
		b.Fatal(err)
	}
	store := gateway.NewStore(rdb, loader, scripts.Keys{Prefix: prefix})
	sale := "item" + strconv.FormatInt(luaRound.Add(1), 10) // a fresh sale each round
	stock, limit := int64(b.N), int64(1)
	if _, _, err := store.Upsert(ctx, sale, gateway.SaleUpdate{Stock: &stock, Limit: &limit}); err != nil {
		b.Fatalf("create sale: %v", err)
	}
	defer localstack.DropKeys(b, rdb, prefix+":{"+sale+"}")
	contend(b, func(ctx context.Context, ticket int) (int, error) {
		id := strconv.Itoa(ticket)
		rs := [1]gateway.Reservation{{OrderID: "o" + id, UserID: "u" + id, Quantity: 1}}
		var out [1]gateway.Result
		if err := store.Reserve(ctx, sale, rs[:], out[:]); err != nil {
			return 0, err
		}
		return 0, out[0].Err
	})
	v, err := store.Sale(ctx, sale)
	if err != nil || v.Sold != stock || v.Remaining() != 0 {
		b.Fatalf("sale after the round: %+v (%v), want %d sold", v, err, stock)
	}
}
