package bench

// The three reservation strategies of DESIGN.md, measured side by side under
// the same contention: 50 goroutines reserving one unit each, again and
// again, of ONE item whose stock is exactly b.N, until it is exhausted.
//
//	go test -run '^$' -bench Contention -benchtime 2s ./bench/
//
// Each strategy runs twice, so that every ratio compares one thing:
//
//   - full (rowlock, watch, lua): each reservation does, atomically, the work
//     of the real reserve script: check the stock and the buyer's per-user
//     limit, decrement the stock, add the buyer's units to the per-user
//     record, write an order record (order id -> user, quantity) and append
//     an outbox entry for the relay;
//   - lean (rowlock-lean, watch-lean, lua-lean, in strategy_lean_test.go):
//     only check the one item's stock and decrement it.
//
// The full ones run first: bench/suite finds each ratio in the first line
// that matches BenchmarkContention/<name>, and <name>-lean matches too.
//
// Each reports committed reservations/s, the p99 latency of one reservation
// (retries included) in µs, and, for WATCH/MULTI, aborted transactions per
// committed one. After each round the item must be at 0 after b.N committed
// reservations, and a full variant must also hold exactly b.N units in its
// per-user records, nobody over the limit, b.N order records and b.N outbox
// entries: an oversell, a lost unit or a lost record fails the benchmark.
//
// The row lock runs in MariaDB (InnoDB) in a database of its own,
// flashgate_test_bench_<random>, dropped afterwards; Redis keys carry a
// random prefix and are deleted afterwards. The Lua strategy is the real
// reserve script, loaded by scripts.Loader and called through sale.Store
// one reservation per call (no batching), on a sale made by the real admin
// script. Even against the full row lock and WATCH it still does a little
// more (recognising a retried order id, the sale's start, end and lock, the
// event seq in meta and entry), so the full comparison leans against it.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/scripts"
)

// contenders is the number of buyers fighting over the one item.
const contenders = 50

// perUserLimit is the limit of the full variants. Each ticket is a buyer of
// its own ("u"+ticket) buying one unit, as in a flash sale where each buyer
// comes once and may buy one: every reservation still reads the buyer's
// record and checks it against the limit, nobody can reach it unless a
// strategy loses or shares a record, and the round's check then sees every
// record at exactly 1. (A few buyers with a limit of b.N would instead make
// the per-user records as hot as the item, which no flash sale has.)
const perUserLimit = 1

// roundTimeout bounds one b.N round, whatever a server does.
const roundTimeout = 5 * time.Minute

var (
	errNoStock   = errors.New("no stock left (the stock was b.N: a unit was lost or oversold)")
	errOverLimit = errors.New("buyer at the per-user limit (every buyer is new: a record was lost or shared)")
)

// round numbers the rounds of every variant, for Redis keys of their own.
var contentionRound atomic.Int64

func BenchmarkContention(b *testing.B) {
	b.Run("rowlock", benchRowLock)
	b.Run("watch", benchWatch)
	b.Run("lua", benchLua)
	b.Run("rowlock-lean", benchRowLockLean)
	b.Run("watch-lean", benchWatchLean)
	b.Run("lua-lean", benchLuaLean)
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

// buyer is the user and order id of a ticket.
func buyer(ticket int) (user, order string) {
	id := strconv.Itoa(ticket)
	return "u" + id, "o" + id
}

// --- (a) row lock: one InnoDB transaction per reservation, the item row
// locked by SELECT … FOR UPDATE from the first statement to the commit.

// rowItem is the item of the full row lock; the lean one has item 1.
const rowItem = 2

// rowTables are the full row lock's per-user record, order records and
// transactional outbox (the relay would read and delete its rows).
var rowTables = []string{
	`CREATE TABLE IF NOT EXISTS strategy_holders (
		item_id INT NOT NULL,
		user_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		units   INT NOT NULL,
		PRIMARY KEY (item_id, user_id)) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS strategy_orders (
		order_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
		item_id     INT NOT NULL,
		user_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		quantity    INT NOT NULL,
		reserved_at BIGINT NOT NULL) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS strategy_outbox (
		seq         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
		order_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		item_id     INT NOT NULL,
		user_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		quantity    INT NOT NULL,
		reserved_at BIGINT NOT NULL,
		state       VARCHAR(16) CHARACTER SET ascii NOT NULL) ENGINE=InnoDB`,
}

func benchRowLock(b *testing.B) {
	db := testDatabase(b)
	ctx := context.Background()
	for _, q := range rowTables {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	for _, q := range []string{`TRUNCATE strategy_holders`, `TRUNCATE strategy_orders`, `TRUNCATE strategy_outbox`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `REPLACE INTO items (id, stock) VALUES (?, ?)`, rowItem, b.N); err != nil {
		b.Fatal(err)
	}
	contend(b, func(ctx context.Context, ticket int) (int, error) {
		user, order := buyer(ticket)
		return retryRow(func() error { return reserveRowFull(ctx, db, user, order) })
	})
	var left, holders, units, maxUnits, orders, ordered, outbox int64
	err := db.QueryRowContext(ctx, `SELECT stock FROM items WHERE id = ?`, rowItem).Scan(&left)
	if err == nil {
		err = db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(units), 0), COALESCE(MAX(units), 0) FROM strategy_holders WHERE item_id = ?`,
			rowItem).Scan(&holders, &units, &maxUnits)
	}
	if err == nil {
		err = db.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM strategy_orders WHERE item_id = ?`,
			rowItem).Scan(&orders, &ordered)
	}
	if err == nil {
		err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM strategy_outbox WHERE item_id = ?`, rowItem).Scan(&outbox)
	}
	n := int64(b.N)
	if err != nil || left != 0 || holders != n || units != n || maxUnits > perUserLimit || orders != n || ordered != n || outbox != n {
		b.Fatalf("after the round (%v): stock %d, %d buyers holding %d units (most %d), %d orders of %d units, %d outbox rows; "+
			"want stock 0, b.N = %d of each, most %d",
			err, left, holders, units, maxUnits, orders, ordered, outbox, n, perUserLimit)
	}
}

// retryRow runs a row-lock transaction until it is not rolled back by a
// deadlock or a lock wait timeout, and returns how many times it was.
func retryRow(reserve func() error) (int, error) {
	for aborts := 0; ; aborts++ {
		err := reserve()
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) {
			continue
		}
		return aborts, err
	}
}

// reserveRowFull is the full reservation in one transaction. Every statement
// is a round trip made while the item row is locked: that, not the SQL, is
// what the strategy costs, and a client-side transaction cannot avoid it.
func reserveRowFull(ctx context.Context, db *sql.DB, user, order string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var stock int64
	if err := tx.QueryRowContext(ctx, `SELECT stock FROM items WHERE id = ? FOR UPDATE`, rowItem).Scan(&stock); err != nil {
		return err
	}
	if stock <= 0 {
		return errNoStock
	}
	var held int64
	err = tx.QueryRowContext(ctx, `SELECT units FROM strategy_holders WHERE item_id = ? AND user_id = ? FOR UPDATE`,
		rowItem, user).Scan(&held)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if held+1 > perUserLimit {
		return errOverLimit
	}
	now := time.Now().UnixMilli()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO strategy_holders (item_id, user_id, units) VALUES (?, ?, 1) ON DUPLICATE KEY UPDATE units = units + 1`,
			[]any{rowItem, user}},
		{`UPDATE items SET stock = stock - 1 WHERE id = ?`, []any{rowItem}},
		{`INSERT INTO strategy_orders (order_id, item_id, user_id, quantity, reserved_at) VALUES (?, ?, ?, 1, ?)`,
			[]any{order, rowItem, user, now}},
		{`INSERT INTO strategy_outbox (order_id, item_id, user_id, quantity, reserved_at, state) VALUES (?, ?, ?, 1, ?, 'confirmed')`,
			[]any{order, rowItem, user, now}},
	} {
		if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// --- (b) Redis WATCH/MULTI/EXEC, optimistic: retry when another buyer won.

// redisSale are the keys of one round's sale, in one hash slot as the real
// script's are.
type redisSale struct {
	name, stock, users, orders, outbox string
}

func newRedisSale(prefix, kind string) redisSale {
	name := kind + strconv.FormatInt(contentionRound.Add(1), 10)
	slot := prefix + ":{" + name + "}"
	return redisSale{name: name, stock: slot + ":stock", users: slot + ":users", orders: slot + ":orders", outbox: slot + ":outbox"}
}

func benchWatch(b *testing.B) {
	rdb, prefix := benchRedis(b)
	ctx := context.Background()
	s := newRedisSale(prefix, "watch")
	defer localstack.DropKeys(b, rdb, prefix+":{"+s.name+"}")
	if err := rdb.Set(ctx, s.stock, b.N, 0).Err(); err != nil {
		b.Fatal(err)
	}
	apc := contend(b, func(ctx context.Context, ticket int) (int, error) {
		user, order := buyer(ticket)
		return retryWatch(func() error { return reserveWatchFull(ctx, rdb, s, user, order) })
	})
	b.ReportMetric(apc, "aborts/commit")
	if err := checkRedisSale(ctx, rdb, s, int64(b.N)); err != nil {
		b.Fatal(err)
	}
}

// retryWatch runs a WATCH transaction until EXEC commits it, and returns
// how many times EXEC aborted it.
func retryWatch(reserve func() error) (int, error) {
	for aborts := 0; ; aborts++ {
		err := reserve()
		if errors.Is(err, redis.TxFailedErr) {
			continue
		}
		return aborts, err
	}
}

// reserveWatchFull is the full reservation: WATCH the stock and the users
// hash (WATCH takes keys, not fields), read both in one round trip, then
// MULTI … EXEC the four writes. Any commit by another buyer changes the
// stock, so it aborts this one.
func reserveWatchFull(ctx context.Context, rdb *redis.Client, s redisSale, user, order string) error {
	return rdb.Watch(ctx, func(tx *redis.Tx) error {
		var stock, held *redis.StringCmd
		_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			stock, held = p.Get(ctx, s.stock), p.HGet(ctx, s.users, user)
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		n, err := stock.Int64()
		if err != nil {
			return err
		}
		if n <= 0 {
			return errNoStock
		}
		h, err := held.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		if h+1 > perUserLimit {
			return errOverLimit
		}
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Decr(ctx, s.stock)
			p.HIncrBy(ctx, s.users, user, 1)
			// The reserve script's record form (scripts/record.go): confirmed, no pay_by.
			p.HSet(ctx, s.orders, order, "q:C:0:"+now+":1:"+user)
			p.XAdd(ctx, &redis.XAddArgs{Stream: s.outbox, Values: []any{"order_id", order, "sale_id", s.name,
				"user_id", user, "quantity", 1, "reserved_at", now, "state", "confirmed", "pay_by", 0}})
			return nil
		})
		return err
	}, s.stock, s.users)
}

// checkRedisSale returns an error unless a full Redis round left the stock
// key (when s has one) at 0, n units in the per-user records with nobody
// over the limit, n order records and n outbox entries.
func checkRedisSale(ctx context.Context, rdb *redis.Client, s redisSale, n int64) error {
	left := int64(0)
	if s.stock != "" {
		var err error
		if left, err = rdb.Get(ctx, s.stock).Int64(); err != nil {
			return fmt.Errorf("stock: %w", err)
		}
	}
	held, err := rdb.HVals(ctx, s.users).Result()
	if err != nil {
		return fmt.Errorf("users: %w", err)
	}
	var units, most int64
	for _, v := range held {
		u, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("users: %q: %w", v, err)
		}
		units, most = units+u, max(most, u)
	}
	orders, err := rdb.HLen(ctx, s.orders).Result()
	if err != nil {
		return fmt.Errorf("orders: %w", err)
	}
	outbox, err := rdb.XLen(ctx, s.outbox).Result()
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if left != 0 || units != n || most > perUserLimit || orders != n || outbox != n {
		return fmt.Errorf("after the round: stock %d, %d buyers holding %d units (most %d), %d orders, %d outbox entries; "+
			"want stock 0, n = %d units, orders and entries, most %d",
			left, len(held), units, most, orders, outbox, n, perUserLimit)
	}
	return nil
}

// --- (c) the Lua script: one EVALSHA of the real reserve script per buyer,
// through the gateway's Store (without its batcher), on a sale made by the
// real admin script.

func benchLua(b *testing.B) {
	rdb, prefix := benchRedis(b)
	ctx := context.Background()
	loader := scripts.New(rdb, "", scripts.Keys{Prefix: prefix})
	if _, err := loader.Load(ctx); err != nil {
		b.Fatal(err)
	}
	keys := scripts.Keys{Prefix: prefix}
	store, err := sale.New(rdb, loader, keys, sale.Options{})
	if err != nil {
		b.Fatal(err)
	}
	id := "item" + strconv.FormatInt(contentionRound.Add(1), 10) // a fresh sale each round
	stock, limit := int64(b.N), int64(perUserLimit)
	if _, _, err := store.Upsert(ctx, id, sale.Update{Stock: &stock, Limit: &limit}); err != nil {
		b.Fatalf("create sale: %v", err)
	}
	defer localstack.DropKeys(b, rdb, prefix+":{"+id+"}")
	contend(b, func(ctx context.Context, ticket int) (int, error) {
		user, order := buyer(ticket)
		rs := [1]sale.Reservation{{OrderID: order, UserID: user, Quantity: 1}}
		var out [1]sale.Result
		if err := store.Reserve(ctx, id, rs[:], out[:]); err != nil {
			return 0, err
		}
		return 0, out[0].Err
	})
	v, err := store.Sale(ctx, id)
	if err != nil || v.Sold != stock || v.Remaining() != 0 {
		b.Fatalf("sale after the round: %+v (%v), want %d sold", v, err, stock)
	}
	// One lane (no buckets): the sale's own keys hold the records. Its stock
	// is in meta, checked above through Sale.
	s := redisSale{name: id, users: keys.Users(id), orders: keys.Orders(id), outbox: keys.Outbox(id)}
	if err := checkRedisSale(ctx, rdb, s, stock); err != nil {
		b.Fatal(err)
	}
}
