package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/flashgate/flashgate/deploy/localstack"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/scripts"
)

func TestMain(m *testing.M) { os.Exit(localstack.Run(m, false)) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// env is one test's private corner of the shared services: its own Redis
// key prefix and its own exchange and queues, all removed when it ends.
type env struct {
	t    *testing.T
	cfg  *config.Config
	rdb  *redis.Client
	keys scripts.Keys
	ch   *amqp.Channel // for inspecting the queues
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := config.Default()
	id := randHex(5)
	cfg.Redis.KeyPrefix = "t" + id
	cfg.AMQP.Exchange = "test.orders." + id
	cfg.AMQP.Queue = "test.orders." + id
	cfg.Relay.ClaimAfter = 500 * time.Millisecond
	cfg.Relay.Poll = 20 * time.Millisecond
	cfg.Shutdown.Timeout = 5 * time.Second
	if u := os.Getenv("FLASHGATE_AMQP_URL"); u != "" {
		cfg.AMQP.URL = u
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.Redis.Addrs[0]})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (run `make up`): %v", cfg.Redis.Addrs[0], err)
	}
	s, err := broker.Open(ctx, cfg.AMQP, "relay test")
	if err != nil {
		t.Fatalf("RabbitMQ at %s does not answer (run `make up`): %v", cfg.AMQP.URL, err)
	}
	e := &env{t: t, cfg: cfg, rdb: rdb, keys: scripts.Keys{Prefix: cfg.Redis.KeyPrefix}, ch: s.Channel}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A fault test may have closed this session: use a new one.
		if c, err := broker.Dial(ctx, cfg.AMQP.URL, "relay test cleanup"); err == nil {
			if ch, err := c.Channel(); err == nil {
				_, _ = ch.QueueDelete(cfg.AMQP.Queue, false, false, false)
				_, _ = ch.QueueDelete(broker.DeadLetter(cfg.AMQP.Queue), false, false, false)
				_ = ch.ExchangeDelete(cfg.AMQP.Exchange, false, false)
				_ = ch.ExchangeDelete(broker.DeadLetter(cfg.AMQP.Exchange), false, false)
			}
			_ = c.Close()
		}
		_ = s.Close()
		var cursor uint64
		for {
			keys, next, err := rdb.Scan(ctx, cursor, cfg.Redis.KeyPrefix+":*", 1000).Result()
			if err != nil {
				break
			}
			if len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		_ = rdb.Close()
	})
	return e
}
