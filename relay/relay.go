// Package relay moves accepted orders from the Redis outbox streams to
// RabbitMQ: the outbox relay that runs inside every gateway.
//
// Each sale's outbox stream is read through one consumer group shared by
// every relay, so any number of relays (one per gateway) can serve the same
// sales at once, each entry going to one of them. An entry is the orders
// one reserve call accepted, or one change of an order's state (package
// order, FromStreamEntry). The orders of one read, of one sale or many,
// travel in messages of up to relay.message_orders orders each (one order's
// JSON object, or an array of several), so that RabbitMQ and the consumers
// pay per message, not per order. A message is persistent, with its first
// order's id as message id and that order's stream entry id as correlation
// id, published on a channel in confirm mode with many confirms
// outstanding, and mandatory, so an unroutable message comes back. Only
// once RabbitMQ has confirmed every message holding an entry's orders is
// the entry acknowledged and deleted from its stream (one script call per
// sale, Loader.Remove of package scripts, which also counts the sale's orders in its
// outbox down). A nack, a return or a lost connection leaves the entry pending: the
// relay publishes it again, and entries left pending by a relay that died are
// claimed by another after relay.claim_after (XAUTOCLAIM).
//
// Delivery to RabbitMQ is therefore at least once: a confirm lost with the
// connection, or a claim of an entry whose relay was only slow, publishes an
// order twice (a nacked or lost message is published again whole). The
// consumer makes duplicates harmless.
//
// The relay's work grows with the orders written, not with the sales that
// exist nor with those that sold lately. The gateway tells it which
// outboxes it wrote (Wrote); those are read at once, and again at once
// while a read comes back full, and then cost nothing until the next
// notice: no outbox is polled for lack of news. A consumer group is
// created when an outbox is first read (the read says there is none). What the notices miss (a
// dead gateway's entries, another process's writes, what is there at
// start, a notice lost with a restart) a scan of the registry of sales
// finds: one walk at start as fast as Redis answers, then one walk every
// Deps.ScanEvery, a slice a second (a registry of up to 50 sales is walked
// every second); an outbox it finds with entries is read at once. Only
// outboxes with news are looked at (length, oldest entry) every second:
// those seen with entries, those whose read failed, and those whose
// entries the relay has held, or owed a read, for a second (RabbitMQ away
// or slow: the backlog the metrics show); one seen with more entries than
// the relay holds is read again, and one seen with entries is claimed from
// (entries pending longer than relay.claim_after). So a missed notice costs
// latency, up to ScanEvery, never an order. An idle relay costs Redis about
// one XLEN per sale per ScanEvery, however many sales sold lately, and a
// scrape of its metrics none (they show what it knows).
//
// The parts, one file each: the notices (notice.go: Wrote), the sales
// worked on (sales.go: which are active, hot, known to have entries), the
// look at them (look.go), the scan of the registry (scan.go), the outbox
// (outbox.go: what is read, held, claimed and removed), the publisher
// (publisher.go: the confirm channel, what is in flight and what waits for
// another publish), the session loop and its timed jobs, which drive the
// others over one RabbitMQ session and pause between sessions
// (session.go), and the metrics (metrics.go).
package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// Group is the consumer group every relay reads the outbox streams with.
const Group = "flashgate-relay"

const (
	// redisCall bounds one Redis call of the relay. The relay is not on
	// the buy path, so it may wait longer than a buyer would.
	redisCall = 2 * time.Second
	// refreshEvery is how often the outboxes due for a look (lookDue) are
	// looked at, how long the relay holds an outbox's entries or owes it
	// a read before it looks at it, and the longest step of the scan of
	// the registry.
	refreshEvery = time.Second
	// activeFor is how long an outbox stays active (shown in Stats and
	// the metrics, kept with its consumer group known) after its last
	// notice or the last time it was seen with entries. Being active
	// costs no Redis call: only its memory, bounded by the outboxes
	// written to within activeFor.
	activeFor = 10 * time.Second
	// scanEvery is Deps.ScanEvery's default: one walk of the registry.
	scanEvery = time.Minute
	// closeGrace is added to the drain deadline before a connection stuck
	// in a write (a broker that blocks publishers) is closed under it.
	closeGrace = time.Second
)

// Deps are the relay's collaborators.
type Deps struct {
	Redis redis.UniversalClient // required; shared with the gateway is fine
	Log   *zap.Logger           // nil: no logs
	// Name is this relay's consumer name in the groups; it must differ
	// between live relays. Empty: broker.InstanceName("relay").
	Name string
	// Drain bounds the wait for outstanding confirms after Run's ctx ends.
	// Zero: half of shutdown.timeout, at most 5s.
	Drain time.Duration
	// ScanEvery is how long one walk of the registry of sales takes after
	// the first, at start (shorter where that pace would look at fewer
	// than 50 sales a second): about the longest an outbox with entries
	// nobody told this relay of (Wrote) waits to be found. Zero: a minute.
	ScanEvery time.Duration
}

// Stats are the relay's counters since start, for metrics.
type Stats struct {
	Messages   uint64 // messages sent, retries included
	Published  uint64 // entries sent in them (orders and changes of state), retries included
	Confirmed  uint64 // entries acknowledged by RabbitMQ
	Removed    uint64 // confirmed entries acknowledged and deleted in Redis
	Nacked     uint64 // entries refused by RabbitMQ (kept for retry)
	Returned   uint64 // entries returned unroutable (kept for retry)
	Lost       uint64 // entries in flight when the channel or connection closed (kept for retry)
	Claimed    uint64 // pending entries taken over with XAUTOCLAIM
	Malformed  uint64 // entries that are not orders (left in the stream, never published)
	Reconnects uint64 // RabbitMQ sessions opened after the first
	Errors     uint64 // failed Redis calls and failed RabbitMQ connection attempts
	InFlight   int    // published, not yet confirmed
	Tracked    int    // entries held in memory: in flight, awaiting retry or awaiting XACK
	Connected  bool   // a RabbitMQ session is open
	Scans      uint64 // walks of the whole registry of sales completed, the one at start included
	// Sales are the outboxes the relay knows with entries (looked at
	// every second while they have some; found by the scan within
	// Deps.ScanEvery when nobody told this relay of them; an outbox it was
	// told of, once its entries have waited a second) or active
	// (notified, or seen with entries, within the last 10s), in sale id
	// order. Entries read and removed within a second are never counted
	// here: the outbox shows at 0.
	Sales []SaleStats
}

// SaleStats is the state of one outbox (a sale's, or a bucket's
// "SALE#i.n"), as the relay last looked at it.
type SaleStats struct {
	Sale      string
	Pending   int64         // entries in the outbox: accepted, not yet confirmed by RabbitMQ
	OldestAge time.Duration // age of the oldest of them now; 0 when none, or not looked at since it had entries
}

// Relay is the outbox relay. Run it once; Stats and WriteMetrics are safe
// for concurrent use.
type Relay struct {
	name  string
	drain time.Duration
	log   *zap.Logger

	started atomic.Bool
	loop    broker.Loop

	notes *notices // Wrote's, taken by Run's goroutine

	// Each part owns its state, Run's goroutine but for their counters.
	ss        *sales
	ob        *outbox
	pub       *publisher
	lk        *looker
	sc        *scanner
	activeFor time.Duration        // activeFor; tests shorten it before Run
	last      atomic.Pointer[view] // what the relay knows, for Stats and WriteMetrics; nil while Run is not running

	// The session loop's timed jobs and its scratch, owned by Run's
	// goroutine.
	look, scan, read, claim, remove job
	claimEvery                      time.Duration
	linger                          time.Duration // relay.linger: the wait after a read that found entries
	lookOK, scanOK                  bool          // the last look and scan step succeeded
	noted                           []string      // notices taken
}

// New validates the settings and returns a relay. It connects to nothing
// until Run.
func New(cfg *config.Config, deps Deps) (*Relay, error) {
	if deps.Redis == nil {
		return nil, errors.New("relay: no Redis client")
	}
	if cfg.Relay.Batch < 1 || cfg.Relay.MaxInFlight < 1 || cfg.Relay.MessageOrders < 1 || cfg.Relay.ClaimAfter <= 0 || cfg.Relay.Poll <= 0 || cfg.Relay.Linger < 0 {
		return nil, fmt.Errorf("relay: bad settings %+v", cfg.Relay)
	}
	if cfg.AMQP.URL == "" || cfg.AMQP.Exchange == "" || cfg.AMQP.Queue == "" {
		return nil, errors.New("relay: AMQP URL, exchange and queue are required")
	}
	log := deps.Log
	if log == nil {
		log = zap.NewNop()
	}
	name := deps.Name
	if name == "" {
		name = broker.InstanceName("relay")
	}
	drain := deps.Drain
	if drain <= 0 {
		drain = min(5*time.Second, cfg.Shutdown.Timeout/2)
	}
	every := deps.ScanEvery
	if every <= 0 {
		every = scanEvery
	}
	keys := scripts.Keys{Prefix: cfg.Redis.KeyPrefix}
	ss := newSales(activeFor)
	r := &Relay{
		name:       name,
		drain:      drain,
		log:        log,
		notes:      newNotices(),
		ss:         ss,
		ob:         newOutbox(deps.Redis, keys, log, name, cfg.Relay, ss),
		lk:         &looker{rdb: deps.Redis, keys: keys},
		sc:         &scanner{rdb: deps.Redis, keys: keys, every: every, floor: scanFloor},
		activeFor:  activeFor,
		scan:       job{bo: retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}},
		read:       job{bo: retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}},
		remove:     job{bo: retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}},
		claimEvery: max(cfg.Relay.ClaimAfter/2, cfg.Relay.Poll),
		linger:     cfg.Relay.Linger,
	}
	r.pub = newPublisher(cfg.AMQP.Exchange, cfg.Relay.MaxInFlight, cfg.Relay.MessageOrders, r.ob.confirmed)
	r.loop = broker.Loop{
		AMQP:  cfg.AMQP,
		Name:  "flashgate relay " + name,
		Log:   log,
		Lost:  "entries in flight will be published again",
		Pause: r.pause,
	}
	return r, nil
}

// Name returns the relay's consumer name in the outbox groups.
func (r *Relay) Name() string { return r.name }

// Stats returns the counters and what the relay last knew of the outboxes.
// It is safe for concurrent use and does no I/O.
func (r *Relay) Stats() Stats {
	p, o := &r.pub.n, &r.ob.n
	s := Stats{
		Messages:   p.messages.Load(),
		Published:  p.published.Load(),
		Confirmed:  p.confirmed.Load(),
		Removed:    o.removed.Load(),
		Nacked:     p.nacked.Load(),
		Returned:   p.returned.Load(),
		Lost:       p.lost.Load(),
		Claimed:    o.claimed.Load(),
		Malformed:  o.malformed.Load(),
		Reconnects: r.loop.Reconnects(),
		Errors:     o.errs.Load() + r.lk.errs.Load() + r.sc.errs.Load() + r.loop.Failures(),
		InFlight:   int(p.inFlight.Load()),
		Tracked:    int(o.held.Load()),
		Connected:  r.loop.Connected(),
		Scans:      r.sc.walks.Load(),
	}
	if v := r.last.Load(); v != nil {
		now := time.Now()
		for _, k := range v.sales {
			if k.shown(now, r.activeFor) {
				s.Sales = append(s.Sales, SaleStats{Sale: k.sale, Pending: k.pending, OldestAge: k.age(now)})
			}
		}
	}
	return s
}

// Run relays until ctx ends. It connects to RabbitMQ and reconnects with
// backoff for as long as it takes; Redis errors are retried too. When ctx
// ends it stops reading, waits (at most Deps.Drain) for the confirms of what
// is in flight, acknowledges those in Redis and closes its connection;
// whatever is not confirmed by then stays pending in Redis for another relay
// (or the next start) to claim. It returns nil after a shutdown; it returns
// an error only when called twice.
func (r *Relay) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	r.ss.activeFor = r.activeFor
	r.loop.Run(ctx, r.serve)
	// Confirmed entries that could not be removed yet: one last try.
	r.removeConfirmed(ctx, true)
	r.last.Store(nil) // what it knew goes stale from now on
	return nil
}
