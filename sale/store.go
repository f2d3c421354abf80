// Package sale is a sale's state in Redis and every operation on it: a
// buyer's reservation (batched per sale, one atomic script call per batch),
// the admin changes (create, update, restock, lock), an order's pay, cancel
// and status, a sale's buckets and their placement on a cluster, the check
// that Redis fsyncs before it replies (zero-loss mode), the announcements of
// admin changes, and the per-sale figures of /metrics. The HTTP edge
// (package gateway) asks it in its own words; nothing here speaks HTTP.
//
// Words used throughout:
//
//   - A sale's state lives under keys that share one hash tag, the sale id
//     (scripts.Keys), so that one script call sees all of it atomically.
//   - A sale of several buckets (API.md "buckets") spreads its buyers over
//     K hash slots: bucket i is a sale of the same scripts under the id
//     "SALE#i.n" (buckets.go). A script call acts on one id: the sale's, or
//     one bucket's. Where a function takes either, its parameter is id.
//   - The home of a bucketed sale is the sale's own id: it keeps the
//     settings and the stock, and sells nothing itself. Its pool is the
//     units not yet handed to a bucket (stock − moved).
//   - A move hands units between the pool and a bucket in two script calls
//     on two slots (move.lua): a debit where the units leave, with a record,
//     and a credit where they arrive, applied once, which removes the
//     record (moves.go). A process that dies between the two leaves the
//     record, and the settling pass (Store.Run) applies the credit.
//   - A batch is the reservations of one sale (or bucket) that leave in one
//     script call (batcher.go).
package sale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/scripts"
)

// Options are a Store's settings beyond its clients. The zero value sends
// each buy alone, checks no durability and tells nobody of changes.
type Options struct {
	// Batch is how the reservations of one sale share script calls (Buy),
	// and the joins of its waiting room (Join).
	Batch Batching
	// JoinLinger is how long a batch of joins that is not full waits for
	// more, once the sale's joins come several to a call (the batcher's
	// Linger): joins are not latency-bound (a buyer polls every few
	// seconds), so fewer, larger calls are the better trade; a buy's batch
	// never lingers. 0 is DefaultJoinLinger; negative, none.
	JoinLinger time.Duration
	// Timeout bounds each Redis call of Buy (a reservation not sent within
	// it is answered ErrUnavailable) and of the background work of Run;
	// 0 is 2 s.
	Timeout time.Duration
	// ZeroLoss makes Buy refuse while any Redis primary may reply before
	// its write is on disk (redis.zero_loss; durability.go).
	ZeroLoss bool
	// Log receives what the background work of Run has to say; nil is
	// silent.
	Log *zap.Logger
	// Changed, when set, is told after a script call changed the meta hash
	// of id (a sale, or a bucket of one), and whether it wrote to id's
	// outbox. It must not block.
	Changed func(id string, outbox bool)
}

// OptionsFor is the Options that the settings give (batch.*,
// admission.max_in_flight, redis.timeout, redis.zero_loss); Log and Changed
// are the caller's to add.
func OptionsFor(cfg *config.Config) Options {
	return Options{
		Batch:    Batching{MaxSize: cfg.Batch.MaxSize, Calls: cfg.Batch.Calls, MaxInFlight: cfg.Admission.MaxInFlight},
		Timeout:  cfg.Redis.Timeout,
		ZeroLoss: cfg.Redis.ZeroLoss,
	}
}

// Batching is how reservations of one sale share script calls.
type Batching struct {
	MaxSize     int // reservations per script call; 0 or 1 turns batching off
	Calls       int // script calls of one sale in flight at once; 0 is 1
	MaxInFlight int // reservations in flight per sale beyond which buys are shed (ErrRateLimited); 0: no limit
	// Linger is how long a batch may wait for more once the last call of
	// its queue carried more than one: up to Linger after its first
	// arrived, or until it is as large as that call was. 0: never (a batch leaves as
	// soon as a call of the sale is free). A lone request after a quiet
	// spell leaves at once either way.
	Linger time.Duration
}

// DefaultJoinLinger is the joins' linger when Options.JoinLinger is 0.
const DefaultJoinLinger = time.Millisecond

// Store is a sale's state in Redis and the operations on it. Create it with
// New; Run does its background work. It is safe for concurrent use.
type Store struct {
	rdb     redis.UniversalClient
	loader  *scripts.Loader
	keys    scripts.Keys
	log     *zap.Logger
	timeout time.Duration
	// buckets holds the *bucketSet of every sale of several buckets met
	// (buckets.go), by sale id: fixed at creation, so never stale.
	buckets sync.Map
	// settleAge is the age of a half-done move that the settling pass
	// finishes (moves.go).
	settleAge time.Duration
	changed   func(id string, outbox bool)

	batch   *batcher[Reservation, Result]
	joins   *batcher[string, Place]
	ids     *orderIDs
	durable *durability // nil: zero-loss mode is off
	sampler *sampler
	metrics *metrics.Set
}

// New returns a Store on the given client and loader, for the sales under
// keys. It fails only when a client is missing or the order id key cannot
// be drawn.
func New(rdb redis.UniversalClient, loader *scripts.Loader, keys scripts.Keys, o Options) (*Store, error) {
	if rdb == nil || loader == nil {
		return nil, errors.New("sale: Redis and Loader are required")
	}
	ids, err := newOrderIDs()
	if err != nil {
		return nil, fmt.Errorf("sale: order ids: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s := &Store{rdb: rdb, loader: loader, keys: keys, log: o.Log, timeout: o.Timeout, settleAge: settleAge,
		ids: ids, metrics: metrics.NewSet()}
	s.sampler = newSampler(rdb, keys, o.Timeout)
	s.changed = func(id string, outbox bool) {
		s.sampler.touch(id)
		if o.Changed != nil {
			o.Changed(id, outbox)
		}
	}
	buys, joins := o.Batch, o.Batch
	buys.Linger = 0
	switch joins.Linger = o.JoinLinger; {
	case o.JoinLinger == 0:
		joins.Linger = DefaultJoinLinger
	case o.JoinLinger < 0:
		joins.Linger = 0
	}
	s.batch = newBatcher(s.Reserve, buys, o.Timeout, s.metrics, "reserve", "reservations")
	s.joins = newBatcher(s.join, joins, o.Timeout, s.metrics, "queue", "joins")
	if o.ZeroLoss {
		s.durable = newDurability(rdb, o.Log, o.Timeout, s.metrics)
	}
	return s, nil
}

// changedOn tells changed.
func (s *Store) changedOn(id string, outbox bool) { s.changed(id, outbox) }

// Touch tells the store that id (a sale, or a bucket of one) changed by a
// script call made elsewhere in the process (an expiry), so that its
// figures in /metrics are read again at the next scrape. It does no I/O.
func (s *Store) Touch(id string) { s.sampler.touch(id) }

// Durable reports whether a buy may be promised now: always, but in
// zero-loss mode only while every Redis primary was last seen to fsync
// before it replies. It does no I/O.
func (s *Store) Durable() bool { return s.durable == nil || s.durable.ok() }

// NotDurable is, in zero-loss mode while a primary is not (or not yet
// known to be) durable, why not, without addresses; ok is false otherwise.
func (s *Store) NotDurable() (reason string, ok bool) {
	if s.durable == nil {
		return "", false
	}
	return s.durable.notReady()
}

// Run does the store's background work until ctx is done: the settling of
// half-done moves of bucketed sales every second, the hold pass after a
// change of Redis primary (scripts.Loader.Watch), and in zero-loss mode
// the check of every primary's persistence, at once and every second. It
// blocks; Redis failures are logged and tried again, so it has no error of
// its own: it returns nil once ctx is done and its work has stopped.
func (s *Store) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if s.durable != nil {
		wg.Go(func() { s.durable.run(ctx) })
	}
	wg.Go(func() { _ = s.loader.Watch(ctx, 0, s.log.Named("hold")) })
	t := time.NewTicker(settleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.settle(ctx)
		}
	}
}

// WriteMetrics writes the store's series: its reservations and script
// calls, the sizes of its batches, zero-loss mode's verdict, and the sales'
// totals and per-sale figures (metrics.go), read from Redis within the
// Timeout.
func (s *Store) WriteMetrics(w io.Writer) {
	s.metrics.WritePrometheus(w)
	s.sampler.write(w)
}

// Ping runs a script, so that it checks the script path and not only the
// connection.
func (s *Store) Ping(ctx context.Context) error {
	err := s.loader.Ping(ctx, []string{s.keys.Meta("_ready"), s.keys.Users("_ready"), s.keys.Outbox("_ready")}, "ping", s.keys.Events(), "_ready")
	if err != nil {
		return fmt.Errorf("ping: %w: %w", ErrUnavailable, err)
	}
	return nil
}
