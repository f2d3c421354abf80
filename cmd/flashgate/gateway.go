package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/expiry"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/relay"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/scripts"
)

func runGateway(ctx context.Context, args []string, _ io.Writer) error {
	cfg, log, err := startService("gateway", args)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush of stderr

	rdb := newRedis(cfg)
	defer rdb.Close()
	loader := scripts.New(rdb, cfg.Scripts.Dir, scripts.Keys{Prefix: cfg.Redis.KeyPrefix})
	loader.SetReplicas(cfg.Redis.MinReplicas)
	reload := gateway.AuditedReload(log.Named("scripts"), loader)

	keys := scripts.Keys{Prefix: cfg.Redis.KeyPrefix}

	// The outbox relay and the payment sweeper run inside the gateway
	// process, on its Redis client; the relay is stopped after the HTTP
	// server (below). Every script call that wrote to an outbox tells the
	// relay, which reads the outboxes written to rather than every sale's.
	rl, err := relay.New(cfg, relay.Deps{Redis: rdb, Log: log.Named("relay")})
	if err != nil {
		return err
	}
	so := sale.OptionsFor(cfg)
	so.Log = log.Named("sale")
	so.Changed = func(id string, outbox bool) {
		if outbox {
			rl.Wrote(id)
		}
	}
	sales, err := sale.New(rdb, loader, keys, so)
	if err != nil {
		return err
	}
	sweeper := expiry.New(rdb, loader, keys, expiry.Deps{Log: log.Named("expiry"), Timeout: cfg.Redis.Timeout,
		Wrote: func(id string) {
			rl.Wrote(id)
			sales.Touch(id)
		}})
	srv, err := gateway.New(cfg, gateway.Deps{Log: log.Named("gateway"), Sales: sales, Loader: loader, Reload: reload,
		Metrics: func(w io.Writer) {
			sales.WriteMetrics(w)
			sweeper.WriteMetrics(w)
			rl.WriteMetrics(w)
			metrics.WriteProcessMetrics(w)
		}})
	if err != nil {
		return err
	}
	defer srv.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()

	// The sales' background work (settling bucket moves, zero-loss mode's
	// check) and the sweeper run while the gateway does, draining included.
	wg.Go(func() { sales.Run(bg) })
	wg.Go(func() { sweeper.Run(bg) })

	// Redis may not be up yet: keep trying to load the scripts; /readyz says
	// 503 and buys say 503 until it works. Scripts that do not compile are
	// not retried: only a fix and a reload can help.
	wg.Go(func() {
		loadScripts(bg, func(ctx context.Context) error { _, err := reload(ctx, "start"); return err },
			log.Named("scripts").With(zap.String("dir", cfg.Scripts.Dir)), "fix them and reload (SIGHUP)")
	})

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	wg.Go(func() {
		for {
			select {
			case <-bg.Done():
				return
			case <-hup:
				rctx, cancel := context.WithTimeout(bg, 5*time.Second)
				_, err := reload(rctx, "SIGHUP")
				cancel()
				if err != nil {
					log.Error("script reload on SIGHUP failed; the previous set stays", zap.Error(err))
				}
			}
		}
	})

	// The relay runs until the HTTP server has stopped taking buys, then
	// waits for the confirms it has outstanding (bounded), so that the last
	// orders leave with this process rather than wait for another's claim.
	relayCtx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan error, 1)
	go func() { relayDone <- rl.Run(relayCtx) }()
	err = srv.Run(ctx)
	stopRelay()
	if rerr := <-relayDone; rerr != nil {
		log.Error("relay stopped with an error", zap.Error(rerr))
	}
	return err
}
