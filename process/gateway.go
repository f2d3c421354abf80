package process

import (
	"context"
	"io"
	"os"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/expiry"
	"github.com/flashgate/flashgate/relay"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/scripts"
)

// Gateway is a gateway process around its HTTP edge: the Redis client, the
// scripts, the sales, the payment sweeper and the outbox relay, linked once
// here. The edge (gateway.Server) is built on Sales, Loader, Reload and
// WriteMetrics, and served by Run.
type Gateway struct {
	Redis   redis.UniversalClient
	Loader  *scripts.Loader
	Sales   *sale.Store
	Sweeper *expiry.Sweeper
	// Relay is nil when the process runs none (GatewayDeps.NoRelay).
	Relay *relay.Relay

	cfg       *config.Config
	log       *zap.Logger
	hangup    <-chan os.Signal
	ownsRedis bool
}

// GatewayDeps are what a gateway process is given rather than builds.
type GatewayDeps struct {
	// Log is the process's logger; each part logs under its own name. Nil
	// is silent.
	Log *zap.Logger
	// Redis, when set, is used instead of a client built from the settings,
	// and is left open by Close.
	Redis redis.UniversalClient
	// NoRelay runs no relay: the outboxes stay for the caller to read (the
	// tests of the edge).
	NoRelay bool
	// Hangup, when set, reloads the scripts folder on every value (the
	// process's SIGHUP).
	Hangup <-chan os.Signal
}

// NewGateway builds a gateway process's parts in the order they depend on
// each other: the client and the scripts, the relay, the sales (which tell
// the relay of every outbox write), the sweeper (which tells the relay and
// the sales of every expiry). It connects to nothing: Run does.
func NewGateway(cfg *config.Config, d GatewayDeps) (*Gateway, error) {
	log := d.Log
	if log == nil {
		log = zap.NewNop()
	}
	g := &Gateway{Redis: d.Redis, cfg: cfg, log: log, hangup: d.Hangup}
	if g.Redis == nil {
		g.Redis, g.ownsRedis = scripts.NewClient(scripts.ClientOptions(cfg.Redis)), true
	}
	keys := scripts.Keys{Prefix: cfg.Redis.KeyPrefix}
	g.Loader = scripts.New(g.Redis, cfg.Scripts.Dir, keys)
	g.Loader.SetReplicas(cfg.Redis.MinReplicas)

	// Every script call that wrote to an outbox tells the relay, which reads
	// the outboxes written to rather than every sale's.
	wrote := func(string) {}
	if !d.NoRelay {
		rl, err := relay.New(cfg, relay.Deps{Redis: g.Redis, Log: log.Named("relay")})
		if err != nil {
			g.Close()
			return nil, err
		}
		g.Relay, wrote = rl, rl.Wrote
	}
	so := sale.OptionsFor(cfg)
	so.Log = log.Named("sale")
	so.Changed = func(id string, outbox bool) {
		if outbox {
			wrote(id)
		}
	}
	sales, err := sale.New(g.Redis, g.Loader, keys, so)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.Sales = sales
	g.Sweeper = expiry.New(g.Redis, g.Loader, keys, expiry.Deps{Log: log.Named("expiry"), Timeout: cfg.Redis.Timeout,
		Wrote: func(id string) {
			wrote(id)
			sales.Touch(id)
		}})
	return g, nil
}

// Reload loads the scripts folder again and makes it the set in use, with
// an audit line naming who asked (the edge's POST /admin/v1/scripts/reload,
// SIGHUP, the start). On an error the previous set stays.
func (g *Gateway) Reload(ctx context.Context, who string) ([]scripts.Script, error) {
	log := g.log.Named("scripts")
	old := g.Loader.Scripts()
	list, err := g.Loader.Load(ctx)
	if err != nil {
		log.Warn("audit", zap.String("action", "scripts.reload"), zap.String("who", who), zap.Error(err))
		return nil, err
	}
	log.Info("audit", zap.String("action", "scripts.reload"), zap.String("who", who),
		zap.Any("old", shas(old)), zap.Any("new", shas(list)))
	return list, nil
}

func shas(list []scripts.Script) map[string]string {
	m := make(map[string]string, len(list))
	for _, s := range list {
		m[s.Name] = s.SHA
	}
	return m
}

// WriteMetrics writes the series of the parts behind the edge (sales,
// sweeper, relay) and of the Go runtime and the process, for the edge's
// GET /metrics after its own.
func (g *Gateway) WriteMetrics(w io.Writer) {
	g.Sales.WriteMetrics(w)
	g.Sweeper.WriteMetrics(w)
	if g.Relay != nil {
		g.Relay.WriteMetrics(w)
	}
	metrics.WriteProcessMetrics(w)
}

// Edge is the HTTP edge a gateway process serves (gateway.Server): Run
// serves until ctx ends, then drains and returns; Reload reads again what
// the edge reads from files (the scripts through Gateway.Reload, a shop's
// page template), for a hangup.
type Edge interface {
	Run(ctx context.Context) error
	Reload(ctx context.Context, who string) ([]scripts.Script, error)
}

// Run runs the process until ctx ends and edge has drained: the sales'
// background work and the sweeper, the scripts' loading unless the caller
// loaded them (retried until Redis answers; /readyz and buys say 503
// meanwhile), the reloads on
// Hangup, the relay, and edge. The relay runs until edge has stopped taking
// buys, then waits for the confirms it has outstanding (bounded), so that
// the last orders leave with this process rather than wait for another's
// claim. It returns edge's error.
func (g *Gateway) Run(ctx context.Context, edge Edge) error {
	bgCtx, stopBG := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	defer func() {
		stopBG()
		bg.Wait()
	}()
	part := func(name string, run func(context.Context) error) {
		bg.Go(func() {
			if err := run(bgCtx); err != nil {
				g.log.Error(name+" stopped with an error", zap.Error(err))
			}
		})
	}
	part("sales", g.Sales.Run)
	part("sweeper", g.Sweeper.Run)
	bg.Go(func() {
		loadScripts(bgCtx, func(ctx context.Context) error {
			if g.Loader.Scripts() != nil {
				return nil // loaded by the caller before Run
			}
			_, err := g.Reload(ctx, "start")
			return err
		}, g.log.Named("scripts").With(zap.String("dir", g.cfg.Scripts.Dir)), "fix them and reload (SIGHUP)")
	})
	if g.hangup != nil {
		bg.Go(func() { g.reloadOnHangup(bgCtx, edge) })
	}

	relayCtx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan error, 1)
	if g.Relay != nil {
		go func() { relayDone <- g.Relay.Run(relayCtx) }()
	} else {
		relayDone <- nil
	}
	err := edge.Run(ctx)
	stopRelay()
	if rerr := <-relayDone; rerr != nil {
		g.log.Error("relay stopped with an error", zap.Error(rerr))
	}
	return err
}

func (g *Gateway) reloadOnHangup(ctx context.Context, edge Edge) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.hangup:
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := edge.Reload(rctx, "SIGHUP")
			cancel()
			if err != nil {
				g.log.Error("script reload on SIGHUP failed; the previous scripts and page stay", zap.Error(err))
			}
		}
	}
}

// Close closes the Redis client the process built (not one given in
// GatewayDeps). Call it after Run has returned.
func (g *Gateway) Close() error {
	if g.ownsRedis && g.Redis != nil {
		return g.Redis.Close()
	}
	return nil
}
