package localstack

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
)

// Isolated returns the local stack's default settings with a corner of the
// shared services that no other test uses: a Redis key prefix and an
// exchange and queues of its own (FLASHGATE_AMQP_URL, when set, points at
// another broker). When the test ends, its keys and its topology (queues,
// dead-letter queue, exchanges) are deleted. MySQL is left alone: call
// Database for a scratch database.
func Isolated(tb testing.TB) *config.Config {
	tb.Helper()
	cfg := config.Default()
	id := RandomHex(5)
	cfg.Redis.KeyPrefix = "t" + id
	cfg.AMQP.Exchange = "test.orders." + id
	cfg.AMQP.Queue = "test.orders." + id
	if u := os.Getenv("FLASHGATE_AMQP_URL"); u != "" {
		cfg.AMQP.URL = u
	}
	tb.Cleanup(func() {
		DropTopology(tb, cfg.AMQP.URL, []string{cfg.AMQP.Queue, broker.DeadLetter(cfg.AMQP.Queue)},
			[]string{cfg.AMQP.Exchange, broker.DeadLetter(cfg.AMQP.Exchange)})
		rdb := redis.NewClient(&redis.Options{Addr: cfg.Redis.Addrs[0]})
		DropKeys(tb, rdb, cfg.Redis.KeyPrefix)
		_ = rdb.Close()
	})
	return cfg
}
