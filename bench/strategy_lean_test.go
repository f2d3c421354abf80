package bench

// The lean variants of BenchmarkContention (strategy_test.go): each only
// checks that the one item has stock and decrements it, no per-user record,
// order record or outbox entry, so that lean against lean compares the
// strategies' locking alone. With nothing recorded, the round's check is the
// stock: b.N reservations committed, each having seen stock > 0, must leave
// it at exactly 0; a lost decrement leaves more, an oversell less.

import (
	"context"
	"database/sql"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
)

// leanItem is the lean row lock's item.
const leanItem = 1

func benchRowLockLean(b *testing.B) {
	db := testDatabase(b)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `REPLACE INTO items (id, stock) VALUES (?, ?)`, leanItem, b.N); err != nil {
		b.Fatal(err)
	}
	contend(b, func(ctx context.Context, _ int) (int, error) {
		return retryRow(func() error { return reserveRowLean(ctx, db) })
	})
	var left int64
	if err := db.QueryRowContext(ctx, `SELECT stock FROM items WHERE id = ?`, leanItem).Scan(&left); err != nil || left != 0 {
		b.Fatalf("stock left %d (%v), want 0", left, err)
	}
}

// reserveRowLean is SELECT … FOR UPDATE + UPDATE in one InnoDB transaction.
func reserveRowLean(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var stock int64
	if err := tx.QueryRowContext(ctx, `SELECT stock FROM items WHERE id = ? FOR UPDATE`, leanItem).Scan(&stock); err != nil {
		return err
	}
	if stock <= 0 {
		return errNoStock
	}
	if _, err := tx.ExecContext(ctx, `UPDATE items SET stock = stock - 1 WHERE id = ?`, leanItem); err != nil {
		return err
	}
	return tx.Commit()
}

// checkLeanStock fails the round unless the stock key is at 0.
func checkLeanStock(b *testing.B, rdb *redis.Client, key string) {
	left, err := rdb.Get(context.Background(), key).Int64()
	if err != nil || left != 0 {
		b.Fatalf("stock left %d (%v), want 0", left, err)
	}
}

func benchWatchLean(b *testing.B) {
	rdb, prefix := benchRedis(b)
	ctx := context.Background()
	s := newRedisSale(prefix, "watchlean")
	defer localstack.DropKeys(b, rdb, prefix+":{"+s.name+"}")
	if err := rdb.Set(ctx, s.stock, b.N, 0).Err(); err != nil {
		b.Fatal(err)
	}
	apc := contend(b, func(ctx context.Context, _ int) (int, error) {
		return retryWatch(func() error {
			return rdb.Watch(ctx, func(tx *redis.Tx) error {
				n, err := tx.Get(ctx, s.stock).Int64()
				if err != nil {
					return err
				}
				if n <= 0 {
					return errNoStock
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Decr(ctx, s.stock)
					return nil
				})
				return err
			}, s.stock)
		})
	})
	b.ReportMetric(apc, "aborts/commit")
	checkLeanStock(b, rdb, s.stock)
}

// leanScript is the least a script can do: check and decrement, atomically.
var leanScript = redis.NewScript(`local s = tonumber(redis.call('GET', KEYS[1])); if s > 0 then redis.call('DECR', KEYS[1]) return 1 end return 0`)

func benchLuaLean(b *testing.B) {
	rdb, prefix := benchRedis(b)
	ctx := context.Background()
	s := newRedisSale(prefix, "lualean")
	defer localstack.DropKeys(b, rdb, prefix+":{"+s.name+"}")
	if err := rdb.Set(ctx, s.stock, b.N, 0).Err(); err != nil {
		b.Fatal(err)
	}
	// Loaded before the clock starts, so that every call is one EVALSHA.
	if err := leanScript.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	keys := []string{s.stock}
	contend(b, func(ctx context.Context, _ int) (int, error) {
		ok, err := leanScript.EvalSha(ctx, rdb, keys).Int64()
		if err == nil && ok != 1 {
			err = errNoStock
		}
		return 0, err
	})
	checkLeanStock(b, rdb, s.stock)
}
