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
	dbDSN  string
	dbErr  error
)

// testDatabase returns a pool on a database of this process's own,
// flashgate_test_bench_<random>, with the tables `items` (the strategy
// benchmarks' one item) and `orders` (the columns of API.md), and its DSN.
// The database is created at the first call and dropped at exit.
func testDatabase(tb testing.TB) (*sql.DB, string) {
	tb.Helper()
	dbOnce.Do(func() {
		c, err := mysql.ParseDSN(localstack.MySQLDSN)
		if err != nil {
			dbErr = err
			return
		}
		name := "flashgate_test_bench_" + localstack.RandomHex(4)
		c.DBName = ""
		c.InterpolateParams = true // one round trip per statement, no prepare
		c.Timeout = 5 * time.Second
		server, err := openDSN(c)
		if err != nil {
			dbErr = err
			return
		}
		defer server.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := server.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			dbErr = fmt.Errorf("create database %s (the flashgate user needs CREATE on flashgate\\_test%%): %w", name, err)
			return
		}
		c.DBName = name
		db, err := openDSN(c)
		for _, q := range []string{
			`CREATE TABLE items (id INT PRIMARY KEY, stock BIGINT NOT NULL) ENGINE=InnoDB`,
			`CREATE TABLE orders (
				order_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
				sale_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
				user_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
				quantity INT NOT NULL,
				KEY orders_sale (sale_id)) ENGINE=InnoDB`,
		} {
			if err == nil {
				_, err = db.ExecContext(ctx, q)
			}
		}
		if err != nil {
			dbErr = err
			dropDatabase(c, name)
			return
		}
		var flush string
		if db.QueryRowContext(ctx, `SELECT @@innodb_flush_log_at_trx_commit`).Scan(&flush) == nil {
			fmt.Fprintf(os.Stderr, "scratch database %s, innodb_flush_log_at_trx_commit=%s\n", name, flush)
		}
		db.SetMaxOpenConns(contenders)
		db.SetMaxIdleConns(contenders)
		dbConn, dbDSN = db, c.FormatDSN()
		atExit = append(atExit, func() {
			db.Close()
			dropDatabase(c, name)
		})
	})
	if dbErr != nil {
		unavailable(tb, "MariaDB: %v (run `make up`)", dbErr)
	}
	return dbConn, dbDSN
}

func openDSN(c *mysql.Config) (*sql.DB, error) {
	conn, err := mysql.NewConnector(c)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func dropDatabase(c *mysql.Config, name string) {
	c = c.Clone()
	c.DBName = ""
	db, err := openDSN(c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "drop database %s: %v\n", name, err)
		return
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
		fmt.Fprintf(os.Stderr, "drop database %s: %v\n", name, err)
	}
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
