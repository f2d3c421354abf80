package localstack

import (
	"testing"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
)

// Isolated returns config's defaults pointed at the tests' services
// (RedisAddrs, AMQPURL, MySQLDSN) with a corner of them that no other test
// uses: a Redis key prefix and an exchange and queues of its own. When the
// test ends, its keys and its topology (queues, dead-letter queue,
// exchanges) are deleted. The MySQL database is the shared one: call
// Database for a scratch database.
func Isolated(tb testing.TB) *config.Config {
	tb.Helper()
	cfg := config.Default()
	id := RandomHex(5)
	cfg.Redis.Addrs = append([]string(nil), RedisAddrs...)
	cfg.Redis.KeyPrefix = "t" + id
	cfg.AMQP.URL = AMQPURL
	cfg.AMQP.Exchange = "test.orders." + id
	cfg.AMQP.Queue = "test.orders." + id
	cfg.MySQL.DSN = MySQLDSN
	tb.Cleanup(func() {
		DropTopology(tb, cfg.AMQP.URL, []string{cfg.AMQP.Queue, broker.DeadLetter(cfg.AMQP.Queue)},
			[]string{cfg.AMQP.Exchange, broker.DeadLetter(cfg.AMQP.Exchange)})
		rdb := NewRedis(nil)
		DropKeys(tb, rdb, cfg.Redis.KeyPrefix)
		_ = rdb.Close()
	})
	return cfg
}
