// Package repair gives a Redis that came back without its last writes what
// MySQL knows of them, before its sales sell again.
//
// Redis with appendfsync everysec may lose up to a second of writes when its
// machine crashes, and a replica promoted by a failover lags its primary;
// meanwhile the orders of those writes may have reached MySQL already. Redis
// would then sell their units again and replay their idempotency keys into
// new orders. The scripts package holds every sale whose Redis history
// (its replication id) changed since it was last checked (the hold script,
// and the same check in every script that decides on a sale): a held sale
// refuses buyers with 503 until a Repairer has released it.
//
// A Repairer runs in every consumer process. It watches the Held set; when
// sales are held it first waits until the orders queue is drained (an order
// forgotten by Redis but still on its way to MySQL would otherwise be missed),
// then, per sale, reads the orders whose latest event MySQL holds is newer
// than Redis's event count (meta seq; every outbox entry carries its number,
// and MySQL keeps the largest per order) and applies them with the repair
// script: their records, units, buyers' units, pending payments and
// idempotency keys, atomically with buyers. The last call releases the sale.
// Then, off the buyers' clock, it marks created again (the order view's
// status) the orders MySQL holds with an event since the sale's last
// repair, whose consumers' marks the restart may have lost (sale.go,
// remarks).
// Any number of Repairers may work at once: the script changes nothing on a
// sale no longer held.
package repair

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/scripts"
)

// Defaults of Config's zero fields.
const (
	// DefaultPoll is how often the Held set is read.
	DefaultPoll = 100 * time.Millisecond
	// DefaultPassEvery is how often a hold pass runs, to find a sale held by
	// a process that died before it could list the sale in the Held set.
	DefaultPassEvery = time.Minute
	// DefaultFenceWait bounds one fence: past it the queue is looked at
	// again, from a new moment.
	DefaultFenceWait = 30 * time.Second
)

// Config tunes a Repairer; zero fields take the defaults.
type Config struct {
	Poll, PassEvery, FenceWait time.Duration
	// Timeout bounds each Redis and MySQL call (default 5 s).
	Timeout time.Duration
}

// Deps are what a Repairer works with.
type Deps struct {
	Redis  redis.UniversalClient
	DB     *sql.DB
	Loader *scripts.Loader
	Keys   scripts.Keys
	// Queue returns the orders queue's messages ready and its number of
	// consumers (AMQP passive declare). The Repairer asks it only while
	// sales are held.
	Queue func(ctx context.Context) (broker.Depth, error)
	// Name is this process's consumer's name among the witnesses; Settled
	// is that consumer's Settled (package consumer). Without Settled the
	// Repairer witnesses for no consumer (a process that consumes nothing).
	Name    string
	Settled func(now time.Time) (through, failed time.Time)
	Log     *zap.Logger
}

// Stats counts what a Repairer did.
type Stats struct {
	Repaired uint64 // sales released after their orders were given back
	Released uint64 // sales released that had lost nothing MySQL holds
	Restored uint64 // orders whose state in Redis a repair changed (restored or moved on)
	Remarked uint64 // orders Redis kept that a repair marked created again (see restore)
	Raised   uint64 // units of stock raised to cover what MySQL holds as sold
	Errors   uint64
}

// Repairer releases held sales; see the package doc.
type Repairer struct {
	cfg Config
	d   Deps

	repaired, released, restored, remarked, raised, errs atomic.Uint64
	waiting                                              time.Time // the last "waiting" log, for its rate
}

// New returns a Repairer; Run starts it.
func New(cfg Config, d Deps) (*Repairer, error) {
	if d.Redis == nil || d.DB == nil || d.Loader == nil || d.Queue == nil {
		return nil, errors.New("repair: Redis, DB, Loader and Queue are required")
	}
	if d.Settled != nil && d.Name == "" {
		return nil, errors.New("repair: a witness needs its consumer's Name")
	}
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.PassEvery <= 0 {
		cfg.PassEvery = DefaultPassEvery
	}
	if cfg.FenceWait <= 0 {
		cfg.FenceWait = DefaultFenceWait
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Repairer{cfg: cfg, d: d}, nil
}

// Stats returns the counters since start.
func (r *Repairer) Stats() Stats {
	return Stats{Repaired: r.repaired.Load(), Released: r.released.Load(), Restored: r.restored.Load(),
		Remarked: r.remarked.Load(), Raised: r.raised.Load(), Errors: r.errs.Load()}
}

// WriteMetrics writes the Repairer's counters in Prometheus text format.
func (r *Repairer) WriteMetrics(w io.Writer) {
	s := r.Stats()
	metrics.WriteCounterUint64(w, "flashgate_repair_sales_total", s.Repaired)
	metrics.WriteCounterUint64(w, "flashgate_repair_released_sales_total", s.Released)
	metrics.WriteCounterUint64(w, "flashgate_repair_orders_total", s.Restored)
	metrics.WriteCounterUint64(w, "flashgate_repair_marked_orders_total", s.Remarked)
	metrics.WriteCounterUint64(w, "flashgate_repair_stock_raised_units_total", s.Raised)
	metrics.WriteCounterUint64(w, "flashgate_repair_errors_total", s.Errors)
}

// Run works until ctx ends, then returns nil. A failure is counted, logged
// once until it works again, and tried again at the next poll; nothing it
// does is lost by stopping it at any instant (a sale stays held until a
// last call releases it).
func (r *Repairer) Run(ctx context.Context) error {
	tick := time.NewTicker(r.cfg.Poll)
	defer tick.Stop()
	lastPass := time.Now()
	var failing, passFailing bool
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if time.Since(lastPass) >= r.cfg.PassEvery {
			lastPass = time.Now()
			pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
			_, err := r.d.Loader.HoldPass(pctx)
			cancel()
			passFailing = r.failed(ctx, err, passFailing, "hold pass")
		}
		failing = r.failed(ctx, r.Once(ctx), failing, "repair of held sales")
	}
}

// failed counts a failed step and logs the first failure of a run of them,
// and the step's recovery, rather than every poll (every 100 ms while
// Redis or MySQL is down); it returns whether the step is failing now.
func (r *Repairer) failed(ctx context.Context, err error, wasFailing bool, step string) bool {
	switch {
	case ctx.Err() != nil:
		return wasFailing
	case err != nil:
		r.errs.Add(1)
		if !wasFailing {
			r.d.Log.Warn(step+" failed; trying again at each poll (said once until it works)", zap.Error(err))
		}
		return true
	case wasFailing:
		r.d.Log.Info(step + " works again")
	}
	return false
}

// Once repairs the sales held now, once every order on its way to MySQL
// when they were held has arrived (fence). It blocks while sales are held
// until the fence has passed (at most FenceWait, then it returns nil to be
// called again) and the sales are repaired. A sale whose repair fails is
// left held for the next call, and the others are repaired: Once returns
// the first such error, after trying them all.
func (r *Repairer) Once(ctx context.Context) error {
	held, err := r.held(ctx)
	if err != nil || len(held) == 0 {
		return err
	}
	passed, err := r.fence(ctx)
	if err != nil || !passed {
		return err
	}
	return r.sales(ctx, held)
}

func (r *Repairer) held(ctx context.Context) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	held, err := r.d.Redis.SMembers(cctx, r.d.Keys.Held()).Result()
	if err != nil {
		return nil, fmt.Errorf("repair: read held sales: %w", err)
	}
	// The buckets of a sale of several (ids "SALE#i.n") before the homes:
	// a home's repair counts what its buckets hold once they are repaired.
	slices.SortFunc(held, func(a, b string) int {
		la, lb := strings.Contains(a, "#"), strings.Contains(b, "#")
		if la != lb {
			if la {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return held, nil
}
