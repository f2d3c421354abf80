package localstack

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
)

// Where the tests find the services: the local stack's, which are config's
// defaults (TestDefaultsAreTheLocalStack holds them to
// deploy/local/stack.env), unless FLASHGATE_REDIS_ADDRS (its first
// address), FLASHGATE_AMQP_URL or FLASHGATE_MYSQL_DSN point elsewhere.
// Read once, when the test binary starts; not to be changed.
var (
	RedisAddr = strings.TrimSpace(strings.Split(override("FLASHGATE_REDIS_ADDRS", config.Default().Redis.Addrs[0]), ",")[0])
	AMQPURL   = override("FLASHGATE_AMQP_URL", config.Default().AMQP.URL)
	MySQLDSN  = override("FLASHGATE_MYSQL_DSN", config.Default().MySQL.DSN)
)

func override(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// RandomHex returns n random bytes in hex, for names no other test uses.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Database creates the database flashgate_test_<random> on MySQLDSN's
// server with its user, drops it when the test ends, and returns its DSN.
// It fails the test when MariaDB cannot be reached.
func Database(tb testing.TB) string {
	tb.Helper()
	dc, err := mysql.ParseDSN(MySQLDSN)
	if err != nil {
		tb.Fatal(err)
	}
	name := "flashgate_test_" + RandomHex(6)
	dc.DBName = ""
	admin, err := sql.Open("mysql", dc.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		tb.Fatalf("MariaDB at %s: cannot create a test database (run `make up`): %v", dc.Addr, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			tb.Logf("drop %s: %v", name, err)
		}
		admin.Close()
	})
	dc.DBName = name
	return dc.FormatDSN()
}

// DeleteKeys deletes every key of rdb under prefix (prefix + ":*"), a
// thousand at a time. It blocks until done or ctx ends and returns the
// first error of Redis.
func DeleteKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}

// DropKeys is DeleteKeys for a test's cleanup: bounded by ten seconds, an
// error only logged.
func DropKeys(tb testing.TB, rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := DeleteKeys(ctx, rdb, prefix); err != nil {
		tb.Logf("drop keys of %s: %v", prefix, err)
	}
}

// DropTopology deletes queues, then exchanges, on a connection of its own
// (a fault test may have closed the test's). Each delete gets its own
// channel, since a failed one closes its channel.
func DropTopology(tb testing.TB, url string, queues, exchanges []string) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		tb.Logf("drop topology: %v", err)
		return
	}
	defer conn.Close()
	del := func(f func(ch *amqp.Channel) error) {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		_ = f(ch)
	}
	for _, q := range queues {
		del(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
	}
	for _, x := range exchanges {
		del(func(ch *amqp.Channel) error { return ch.ExchangeDelete(x, false, false) })
	}
}
