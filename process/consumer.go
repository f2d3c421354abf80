package process

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/consumer"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/repair"
	"github.com/flashgate/flashgate/scripts"
)

// Consumer is a consumer process: RabbitMQ's orders to MySQL (Consumer),
// and the repairer that releases the sales held after a Redis restart once
// they are checked against MySQL, vouching for this consumer meanwhile.
type Consumer struct {
	DB       *sql.DB
	Redis    redis.UniversalClient
	Loader   *scripts.Loader
	Consumer *consumer.Consumer
	Repairer *repair.Repairer

	cfg *config.Config
	log *zap.Logger
}

// ConsumerDeps are what a consumer process is given rather than builds.
type ConsumerDeps struct {
	// Log is the process's logger; each part logs under its own name. Nil
	// is silent.
	Log *zap.Logger
}

// NewConsumer opens the database pool and builds the Redis client, the
// scripts, the consumer and then its repairer (which vouches for the
// consumer by name). It connects to nothing but MySQL's pool: Run does.
func NewConsumer(cfg *config.Config, d ConsumerDeps) (*Consumer, error) {
	log := d.Log
	if log == nil {
		log = zap.NewNop()
	}
	db, err := orderdb.Open(cfg.MySQL, log.Named("mysql"))
	if err != nil {
		return nil, err
	}
	keys := scripts.Keys{Prefix: cfg.Redis.KeyPrefix}
	p := &Consumer{DB: db, Redis: scripts.NewClient(scripts.ClientOptions(cfg.Redis)), cfg: cfg, log: log}
	p.Loader = scripts.New(p.Redis, cfg.Scripts.Dir, keys)
	p.Consumer, err = consumer.New(cfg, consumer.Deps{DB: db, Redis: p.Redis, Log: log.Named("consumer")})
	if err != nil {
		p.Close()
		return nil, err
	}
	p.Repairer, err = repair.New(repair.Config{Timeout: cfg.Redis.Timeout + 5*time.Second}, repair.Deps{
		Redis: p.Redis, DB: db, Loader: p.Loader, Keys: keys, Log: log.Named("repair"),
		Queue: func(ctx context.Context) (broker.Depth, error) {
			return broker.QueueDepth(ctx, cfg.AMQP, broker.InstanceName("repair"))
		},
		Name: p.Consumer.Name(), Settled: p.Consumer.Settled,
	})
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Run runs the consumer until ctx ends, then lets it finish the deliveries
// in hand; it returns the consumer's error. Beside it: the scripts' loading
// (the repairer's, in the background: Redis being down must not keep the
// consumer from writing MySQL), the repairer, and the metrics
// listener (consumer.metrics_addr), which outlives the consumer's drain.
func (p *Consumer) Run(ctx context.Context) error {
	// Loaded in the background from the start, and again on first use
	// until then. Loading at start keeps the folder's scripts of that
	// moment in use (a NOSCRIPT loads them again from memory), so a folder
	// broken later cannot stop this consumer's repairs.
	lctx, stopLoad := context.WithCancel(ctx)
	var lwg sync.WaitGroup
	defer func() {
		stopLoad()
		lwg.Wait()
	}()
	lwg.Go(func() {
		loadScripts(lctx, func(ctx context.Context) error {
			if p.Loader.Scripts() != nil {
				return nil // loaded on first use meanwhile
			}
			_, err := p.Loader.Load(ctx)
			return err
		}, p.log.Named("scripts"), "fix them (the consumer loads them again on its next use)")
	})

	// The repairer and the metrics listener stop after the consumer.
	after, stopAfter := context.WithCancel(context.Background())
	var awg sync.WaitGroup
	defer func() {
		stopAfter()
		awg.Wait()
	}()
	awg.Go(func() {
		if err := p.Repairer.Run(after); err != nil {
			p.log.Error("repairer stopped with an error", zap.Error(err))
		}
	})
	if addr := p.cfg.Consumer.MetricsAddr; addr != "" {
		awg.Go(func() {
			if err := p.Consumer.ServeMetrics(after, addr, p.Repairer.WriteMetrics); err != nil {
				p.log.Error("metrics listener", zap.Error(err))
			}
		})
	}
	p.log.Info("consumer starting", zap.String("queue", p.cfg.AMQP.Queue))
	err := p.Consumer.Run(ctx)
	s := p.Consumer.Stats()
	p.log.Info("consumer stopped", zap.Uint64("inserted", s.Inserted), zap.Uint64("duplicates", s.Duplicates),
		zap.Uint64("dead_lettered", s.DeadLettered), zap.Uint64("batches", s.Batches))
	return err
}

// Close closes the Redis client and the database pool. Call it after Run
// has returned.
func (p *Consumer) Close() error {
	rerr := p.Redis.Close()
	if err := p.DB.Close(); err != nil {
		return err
	}
	return rerr
}
