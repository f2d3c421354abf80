package relay

import (
	"context"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/flashgate/flashgate/internal/localstack"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/scripts"
)

// TestMain runs the tests under the fault lock (shared: they use
// RabbitMQ or MariaDB, and stop neither) and fails the package when a
// goroutine outlives them: every client, session and server a test starts
// must be stopped and waited for by its cleanup.
func TestMain(m *testing.M) {
	metrics.ExposeMetadata(true) // HELP and TYPE lines, as the binary's main sets
	localstack.Main(m, localstack.UsesServices())
}

// env is one test's private corner of the shared services
// (localstack.Isolated: its own Redis key prefix, exchange and queues, all
// removed when it ends), with a Redis client (of the cluster, when the
// tests run on one) and a channel for inspecting the queues.
type env struct {
	t    *testing.T
	cfg  *config.Config
	rdb  redis.UniversalClient
	keys scripts.Keys
	ch   *amqp.Channel
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := localstack.Isolated(t)
	cfg.Relay.ClaimAfter = 500 * time.Millisecond
	cfg.Relay.Poll = 20 * time.Millisecond
	cfg.Shutdown.Timeout = 5 * time.Second
	rdb := localstack.NewRedis(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := localstack.Ping(ctx, rdb); err != nil {
		_ = rdb.Close()
		t.Fatal(err)
	}
	s, err := broker.Open(ctx, cfg.AMQP, "relay test")
	if err != nil {
		_ = rdb.Close()
		t.Fatalf("RabbitMQ at %s does not answer (run `make up`): %v", cfg.AMQP.URL, err)
	}
	// Runs before Isolated's cleanup, which drops the keys and topology.
	t.Cleanup(func() {
		_ = s.Close()
		_ = rdb.Close()
	})
	return &env{t: t, cfg: cfg, rdb: rdb, keys: scripts.Keys{Prefix: cfg.Redis.KeyPrefix}, ch: s.Channel}
}
