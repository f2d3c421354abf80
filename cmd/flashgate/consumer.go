package main

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/consumer"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/repair"
	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// runConsumer is `flashgate consumer`: RabbitMQ → MySQL until SIGTERM, then
// finish the deliveries in hand and exit 0.
func runConsumer(ctx context.Context, args []string, _ io.Writer) error {
	cfg, log, err := startService("consumer", args)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush of stderr

	db, err := orderdb.Open(cfg.MySQL, log.Named("mysql"))
	if err != nil {
		return err
	}
	defer db.Close()
	rdb := newRedis(cfg)
	defer rdb.Close()
	var rp *repair.Repairer // set before the consumer runs
	// Loaded in the background from the start, and again on first use
	// until then: marking orders created is best effort, and Redis being
	// down must not keep the consumer from writing MySQL. Loading at start
	// keeps the folder's scripts of that moment in use (a NOSCRIPT loads
	// them again from memory), so a folder broken later cannot stop this
	// consumer's repairs.
	loader := scripts.New(rdb, cfg.Scripts.Dir, scripts.Keys{Prefix: cfg.Redis.KeyPrefix})
	lctx, stopLoad := context.WithCancel(ctx)
	var lwg sync.WaitGroup
	defer func() {
		stopLoad()
		lwg.Wait()
	}()
	lwg.Go(func() {
		loadScripts(lctx, func(ctx context.Context) error {
			if loader.Scripts() != nil {
				return nil // loaded on first use meanwhile
			}
			_, err := loader.Load(ctx)
			return err
		}, log.Named("scripts"), "fix them (the consumer loads them again on its next use)")
	})

	c, err := consumer.New(cfg, consumer.Deps{DB: db, Redis: rdb, Loader: loader, Log: log.Named("consumer"),
		Metrics: func(w io.Writer) { rp.WriteMetrics(w) }})
	if err != nil {
		return err
	}
	// The repairer releases the sales held after a Redis restart once they
	// are checked against MySQL, vouching for this consumer meanwhile; it
	// stops with the consumer.
	rp, err = repair.New(repair.Config{Timeout: cfg.Redis.Timeout + 5*time.Second}, repair.Deps{
		Redis: rdb, DB: db, Loader: loader, Keys: scripts.Keys{Prefix: cfg.Redis.KeyPrefix}, Log: log.Named("repair"),
		Queue: func(ctx context.Context) (broker.Depth, error) {
			return broker.QueueDepth(ctx, cfg.AMQP, broker.InstanceName("repair"))
		},
		Name: c.Name(), Settled: c.Settled,
	})
	if err != nil {
		return err
	}
	rctx, stopRepair := context.WithCancel(context.Background())
	rdone := make(chan error, 1)
	go func() { rdone <- rp.Run(rctx) }()
	defer func() {
		stopRepair()
		<-rdone
	}()
	if addr := cfg.Consumer.MetricsAddr; addr != "" {
		// It outlives Run: /healthz and /metrics keep answering while the
		// consumer finishes the deliveries in hand.
		mctx, stopMetrics := context.WithCancel(context.Background())
		mdone := make(chan error, 1)
		go func() { mdone <- c.ServeMetrics(mctx, addr) }()
		defer func() {
			stopMetrics()
			if err := <-mdone; err != nil {
				log.Error("metrics listener", zap.Error(err))
			}
		}()
	}
	log.Info("consumer starting", zap.String("queue", cfg.AMQP.Queue))
	err = c.Run(ctx)
	s := c.Stats()
	log.Info("consumer stopped", zap.Uint64("inserted", s.Inserted), zap.Uint64("duplicates", s.Duplicates),
		zap.Uint64("dead_lettered", s.DeadLettered), zap.Uint64("batches", s.Batches))
	return err
}

// loadScripts runs load, each try bounded by 5 s, until it succeeds, ctx
// ends, or the scripts do not compile (logged with hint: only a fix can
// help). Redis may not be up yet: failures are logged and tried again with
// backoff. It blocks until then; the gateway and the consumer run it at
// start.
func loadScripts(ctx context.Context, load func(ctx context.Context) error, log *zap.Logger, hint string) {
	err := retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		func(ctx context.Context) error {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			err := load(lctx)
			if errors.Is(err, scripts.ErrCompile) {
				return retry.Stop(err)
			}
			return err
		},
		func(err error, next time.Duration) {
			log.Warn("cannot load scripts yet; retrying", zap.Error(err), zap.Duration("in", next))
		})
	if errors.Is(err, scripts.ErrCompile) {
		log.Error("scripts do not compile; "+hint, zap.Error(err))
	}
}
