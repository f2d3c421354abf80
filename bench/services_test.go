package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
)

// The real services of `make up`, shared by the tests and benchmarks of
// this package: one scratch MariaDB database and one Redis key prefix per
// test binary, removed by TestMain when it ends.

// atExit holds what TestMain undoes, last first, after every test and
// benchmark ran.
var atExit []func()

// TestMain: these tests use MariaDB (UsesServices: they wait while a fault
// test has it stopped); what they share is removed after them. fasthttp's
// own goroutines, which its design leaves running for a while after their
// last use, are no leak: of the gateway of run_test.go, the clock of the
// Date header (one per process, never stopped) and a stopped server's
// idle-worker cleaner (it sleeps out MaxIdleWorkerDuration, 10 s, before it
// sees the stop); of the load's client, a HostClient's idle-connection
// cleaner (it sleeps out MaxIdleConnDuration before it sees that no
// connection is left) and the dialer's DNS cache cleaner (until the cache
// expires).
func TestMain(m *testing.M) {
	localstack.Main(m, localstack.UsesServices(),
		localstack.AfterTests(func() {
			for _, f := range slices.Backward(atExit) {
				f()
			}
		}),
		localstack.IgnoreGoroutine("github.com/valyala/fasthttp.updateServerDate.func1"),
		localstack.IgnoreGoroutine("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		localstack.IgnoreGoroutine("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		localstack.IgnoreGoroutine("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"))
}

// unavailable fails a test, or skips a benchmark, when a service is missing.
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if _, ok := tb.(*testing.B); ok {
		tb.Skipf(format, args...)
	}
	tb.Fatalf(format, args...)
}

var (
	dbOnce sync.Once
	dbConn *sql.DB
	dbErr  error
)

// testDatabase returns a pool on a scratch database of this process's own
// (localstack.NewDatabase), shared by the rounds of the strategy
// benchmarks, with their one table `items`, each statement one round trip
// (no prepare). The database is created at the first call and dropped by
// TestMain. The tests of the orders table take a database of their own
// with the real schema (orderdbtest).
func testDatabase(tb testing.TB) *sql.DB {
	tb.Helper()
	dbOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dsn, drop, err := localstack.NewDatabase(ctx)
		if err != nil {
			dbErr = err
			return
		}
		atExit = append(atExit, func() {
			if err := drop(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		})
		c, err := mysql.ParseDSN(dsn)
		if err != nil {
			dbErr = err
			return
		}
		c.InterpolateParams = true // one round trip per statement, no prepare
		c.Timeout = 5 * time.Second
		conn, err := mysql.NewConnector(c)
		if err != nil {
			dbErr = err
			return
		}
		db := sql.OpenDB(conn)
		atExit = append(atExit, func() { db.Close() })
		if _, err := db.ExecContext(ctx, `CREATE TABLE items (id INT PRIMARY KEY, stock BIGINT NOT NULL) ENGINE=InnoDB`); err != nil {
			dbErr = err
			return
		}
		var flush string
		if db.QueryRowContext(ctx, `SELECT @@innodb_flush_log_at_trx_commit`).Scan(&flush) == nil {
			fmt.Fprintf(os.Stderr, "scratch database %s, innodb_flush_log_at_trx_commit=%s\n", c.DBName, flush)
		}
		db.SetMaxOpenConns(contenders)
		db.SetMaxIdleConns(contenders)
		dbConn = db
	})
	if dbErr != nil {
		unavailable(tb, "MariaDB: %v (run `make up`)", dbErr)
	}
	return dbConn
}

var (
	redisOnce   sync.Once
	redisClient *redis.Client
	redisPrefix string
	redisErr    error
)

// benchRedis returns a client with a connection for each contender and
// the random key prefix of this process; the keys are deleted at exit.
func benchRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	redisOnce.Do(func() {
		rdb := redis.NewClient(&redis.Options{Addr: localstack.RedisAddr, PoolSize: contenders + 4, MinIdleConns: contenders,
			DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if redisErr = rdb.Ping(ctx).Err(); redisErr != nil {
			rdb.Close()
			return
		}
		redisClient, redisPrefix = rdb, "bs"+localstack.RandomHex(6)
		atExit = append(atExit, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := localstack.DeleteKeys(ctx, rdb, redisPrefix); err != nil {
				fmt.Fprintf(os.Stderr, "delete keys %s:*: %v\n", redisPrefix, err)
			}
			rdb.Close()
		})
	})
	if redisErr != nil {
		unavailable(tb, "Redis at %s: %v (run `make up`)", localstack.RedisAddr, redisErr)
	}
	return redisClient, redisPrefix
}
