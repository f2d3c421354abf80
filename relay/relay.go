// Package relay moves accepted orders from the Redis outbox streams to
// RabbitMQ: the outbox relay that runs inside every gateway.
//
// Each sale's outbox stream is read through one consumer group shared by
// every relay, so any number of relays (one per gateway) can serve the same
// sales at once, each entry going to one of them. An entry is published as a
// persistent message with the order id as message id, on a channel in
// confirm mode with many confirms outstanding, and mandatory, so an
// unroutable message comes back. Only once RabbitMQ has confirmed it is the
// entry acknowledged and deleted from the stream (XACK and XDEL in one
// MULTI). A nack, a return or a lost connection leaves the entry pending: the
// relay publishes it again, and entries left pending by a relay that died are
// claimed by another after relay.claim_after (XAUTOCLAIM).
//
// Delivery to RabbitMQ is therefore at least once: a confirm lost with the
// connection, or a claim of an entry whose relay was only slow, publishes an
// order twice. The consumer makes duplicates harmless.
package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// Group is the consumer group every relay reads the outbox streams with.
const Group = "flashgate-relay"

const (
	// redisCall bounds one Redis call of the relay. The relay is not on
	// the buy path, so it may wait longer than a buyer would.
	redisCall = 2 * time.Second
	// refreshEvery is how often the set of sales and the length of every
	// outbox are re-read.
	refreshEvery = time.Second
	// activeFor is how long a sale whose outbox had entries stays polled
	// every relay.poll. Quieter sales are looked at every refreshEvery
	// only, so that a Redis holding thousands of past sales is not polled
	// thousands of times per poll.
	activeFor = time.Minute
	// closeGrace is added to the drain deadline before a connection stuck
	// in a write (a broker that blocks publishers) is closed under it.
	closeGrace = time.Second
)

// Deps are the relay's collaborators.
type Deps struct {
	Redis redis.UniversalClient // required; shared with the gateway is fine
	Log   *zap.Logger           // nil: no logs
	// Name is this relay's consumer name in the groups; it must differ
	// between live relays. Empty: host-pid-random.
	Name string
	// Drain bounds the wait for outstanding confirms after Run's ctx ends.
	// Zero: half of shutdown.timeout, at most 5s.
	Drain time.Duration
}

// Stats are the relay's counters since start, for metrics.
type Stats struct {
	Published  uint64 // messages sent, retries included
	Confirmed  uint64 // acknowledged by RabbitMQ
	Removed    uint64 // confirmed entries acknowledged and deleted in Redis
	Nacked     uint64 // refused by RabbitMQ (kept for retry)
	Returned   uint64 // unroutable (kept for retry)
	Lost       uint64 // in flight when the channel or connection closed (kept for retry)
	Claimed    uint64 // pending entries taken over with XAUTOCLAIM
	Malformed  uint64 // entries that are not orders (left in the stream, never published)
	Reconnects uint64 // RabbitMQ sessions opened after the first
	Errors     uint64 // failed Redis calls and failed RabbitMQ connection attempts
	InFlight   int    // published, not yet confirmed
	Tracked    int    // entries held in memory: in flight, awaiting retry or awaiting XACK
	Connected  bool   // a RabbitMQ session is open
	Sales      []SaleStats
}

// SaleStats is the state of one sale's outbox, as last sampled (every
// second).
type SaleStats struct {
	Sale      string
	Pending   int64         // entries in the outbox: accepted, not yet confirmed by RabbitMQ
	OldestAge time.Duration // age of the oldest of them; 0 when none
}

// Relay is the outbox relay. Run it once; Stats is safe for concurrent use.
type Relay struct {
	cfg   config.Relay
	amqp  config.AMQP
	rdb   redis.UniversalClient
	keys  scripts.Keys
	log   *zap.Logger
	name  string
	drain time.Duration

	started atomic.Bool

	published, confirmed, removed, nacked, returned, lost atomic.Uint64
	claimed, malformed, reconnects, errs                  atomic.Uint64
	inFlight, tracked                                     atomic.Int64
	connected                                             atomic.Bool
	saleStats                                             atomic.Pointer[[]SaleStats]

	// Owned by Run's goroutine.
	st state
}

// entry is one outbox entry held by the relay.
type entry struct {
	sale, id string // the sale and the stream entry id
	orderID  string
	body     []byte
	tag      uint64    // delivery tag while in flight
	due      time.Time // earliest retry
}

// state is everything Run's goroutine keeps between loop turns.
type state struct {
	sales     []string             // every sale known, from the Sales set
	ready     map[string]bool      // consumer group known to exist
	active    map[string]time.Time // last time the sale's outbox had entries
	backlog   map[string]int64     // outbox length at the last sample
	claimFrom map[string]string    // XAUTOCLAIM cursor per sale
	tracked   map[string]struct{}  // sale + "\x00" + id of every entry held
	retry     []*entry             // FIFO of entries to publish again
	acks      map[string][]string  // sale → ids confirmed, to XACK+XDEL
	rot       int                  // rotating start among sales for fairness
	nextRead  time.Time
	nextClaim time.Time
	nextSales time.Time
	nextAck   time.Time
	readBO    retry.Backoff
	ackBO     retry.Backoff
	retryBO   retry.Backoff
}

// New validates the settings and returns a relay. It connects to nothing
// until Run.
func New(cfg *config.Config, deps Deps) (*Relay, error) {
	if deps.Redis == nil {
		return nil, errors.New("relay: no Redis client")
	}
	if cfg.Relay.Batch < 1 || cfg.Relay.MaxInFlight < 1 || cfg.Relay.ClaimAfter <= 0 || cfg.Relay.Poll <= 0 {
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
		name = defaultName()
	}
	drain := deps.Drain
	if drain <= 0 {
		drain = min(5*time.Second, cfg.Shutdown.Timeout/2)
	}
	r := &Relay{
		cfg:   cfg.Relay,
		amqp:  cfg.AMQP,
		rdb:   deps.Redis,
		keys:  scripts.Keys{Prefix: cfg.Redis.KeyPrefix},
		log:   log,
		name:  name,
		drain: drain,
	}
	r.st = state{
		ready:     map[string]bool{},
		active:    map[string]time.Time{},
		backlog:   map[string]int64{},
		claimFrom: map[string]string{},
		tracked:   map[string]struct{}{},
		acks:      map[string][]string{},
		readBO:    retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second},
		ackBO:     retry.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second},
		retryBO:   retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
	}
	return r, nil
}

func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(uint64(time.Now().UnixNano())&0xffffff, 36)
}

// Name returns the relay's consumer name in the outbox groups.
func (r *Relay) Name() string { return r.name }

// Stats returns the counters and the last sample of the outboxes. It is safe
// for concurrent use and does no I/O.
func (r *Relay) Stats() Stats {
	s := Stats{
		Published:  r.published.Load(),
		Confirmed:  r.confirmed.Load(),
		Removed:    r.removed.Load(),
		Nacked:     r.nacked.Load(),
		Returned:   r.returned.Load(),
		Lost:       r.lost.Load(),
		Claimed:    r.claimed.Load(),
		Malformed:  r.malformed.Load(),
		Reconnects: r.reconnects.Load(),
		Errors:     r.errs.Load(),
		InFlight:   int(r.inFlight.Load()),
		Tracked:    int(r.tracked.Load()),
		Connected:  r.connected.Load(),
	}
	if p := r.saleStats.Load(); p != nil {
		s.Sales = append([]SaleStats(nil), (*p)...)
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
	bo := retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	sessions := 0
	for ctx.Err() == nil {
		s, err := broker.Open(ctx, r.amqp, "flashgate relay "+r.name)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			r.errs.Add(1)
			d := bo.Next()
			r.log.Warn("cannot connect to RabbitMQ; outbox entries wait in Redis", zap.Error(err), zap.Duration("retry_in", d))
			r.pause(ctx, d)
			continue
		}
		if s.Warning != "" {
			r.log.Warn(s.Warning)
		}
		if sessions++; sessions > 1 {
			r.reconnects.Add(1)
			r.log.Info("reconnected to RabbitMQ")
		}
		r.connected.Store(true)
		err = r.session(ctx, s, &bo)
		r.connected.Store(false)
		_ = s.Close()
		if ctx.Err() != nil {
			break
		}
		d := bo.Next()
		r.log.Warn("RabbitMQ session ended; entries in flight will be published again", zap.Error(err), zap.Duration("retry_in", d))
		r.pause(ctx, d)
	}
	// Confirmed entries that could not be removed yet: one last try.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisCall)
	r.flushAcks(fctx, true)
	cancel()
	return nil
}

// pause waits d between connection attempts, or until ctx ends. Meanwhile
// it keeps the figures of Stats fresh (an outage is when they matter) and
// removes entries confirmed before the connection was lost.
func (r *Relay) pause(ctx context.Context, d time.Duration) {
	end := time.Now().Add(d)
	for {
		now := time.Now()
		if !now.Before(r.st.nextSales) {
			r.refresh(ctx)
			r.st.nextSales = now.Add(refreshEvery)
		}
		if len(r.st.acks) > 0 && !now.Before(r.st.nextAck) {
			r.flushAcks(ctx, false)
		}
		left := time.Until(end)
		if left <= 0 {
			return
		}
		if !retry.Sleep(ctx, min(left, max(time.Until(r.st.nextSales), time.Millisecond))) {
			return
		}
	}
}

// publisher is one confirm-mode channel and its in-flight publishes, in
// delivery-tag order (RabbitMQ confirms may come out of order; the library
// hands them to us in order).
type publisher struct {
	s        *broker.Session
	ch       *amqp.Channel
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
	inflight []*entry
	returned map[string]int // order id → returns not yet matched with their confirm
}

// session relays on one RabbitMQ session until it breaks or ctx ends.
func (r *Relay) session(ctx context.Context, s *broker.Session, bo *retry.Backoff) (err error) {
	ch := s.Channel
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("relay: confirm mode: %w", err)
	}
	// Buffers as large as what can be outstanding, so the library's reader
	// never blocks on us (which would stall confirms and heartbeats).
	p := &publisher{
		s:        s,
		ch:       ch,
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, r.cfg.MaxInFlight)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, r.cfg.MaxInFlight)),
		returned: map[string]int{},
	}
	defer r.abandon(p)

	// A publish blocked in a write (RabbitMQ blocks publishers under a
	// memory or disk alarm) cannot see ctx: close the connection under it
	// once the drain deadline has passed.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(r.drain + closeGrace)
		defer t.Stop()
		select {
		case <-stop:
		case <-t.C:
			_ = s.Close()
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()

	st := &r.st
	for {
		if err := r.takeConfirms(p, bo); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return r.drainSession(ctx, p, bo)
		}
		now := time.Now()
		if len(st.acks) > 0 && !now.Before(st.nextAck) {
			r.flushAcks(ctx, false)
		}
		if !now.Before(st.nextSales) {
			r.refresh(ctx)
			st.nextSales = now.Add(refreshEvery)
		}
		if !now.Before(st.nextClaim) {
			r.claim(ctx)
			st.nextClaim = now.Add(max(r.cfg.ClaimAfter/2, r.cfg.Poll))
		}
		worked := false
		n, err := r.publishRetries(p, now)
		if err != nil {
			return err
		}
		worked = n > 0
		if !now.Before(st.nextRead) && len(st.tracked) < r.cfg.MaxInFlight {
			batch, err := r.readNew(ctx)
			if err != nil {
				st.nextRead = now.Add(st.readBO.Next())
				r.errs.Add(1)
				r.log.Warn("cannot read the outbox", zap.Error(err))
			} else {
				st.readBO.Reset()
				if len(batch) == 0 {
					st.nextRead = now.Add(r.cfg.Poll)
				}
				for i, e := range batch {
					if err := r.publish(p, e); err != nil {
						st.retry = append(st.retry, batch[i:]...)
						return err
					}
				}
				worked = worked || len(batch) > 0
			}
		}
		if worked {
			continue
		}
		if err := r.wait(ctx, p, bo); err != nil {
			return err
		}
	}
}

// wait blocks until a confirm arrives, the session ends, ctx ends or the
// next timed job is due.
func (r *Relay) wait(ctx context.Context, p *publisher, bo *retry.Backoff) error {
	st := &r.st
	next := minTime(st.nextSales, st.nextClaim)
	if len(st.tracked) < r.cfg.MaxInFlight {
		next = minTime(next, st.nextRead)
	}
	if len(st.acks) > 0 {
		next = minTime(next, st.nextAck)
	}
	if len(st.retry) > 0 && len(p.inflight) < r.cfg.MaxInFlight {
		next = minTime(next, st.retry[0].due)
	}
	d := time.Until(next)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case c, ok := <-p.confirms:
		if !ok {
			return r.sessionErr(p)
		}
		return r.onConfirm(p, c, bo)
	case <-p.s.Done():
		return r.sessionErr(p)
	case <-ctx.Done():
	case <-t.C:
	}
	return nil
}

// drainSession waits for the confirms of what is in flight, bounded by
// r.drain, then acknowledges the confirmed entries in Redis.
func (r *Relay) drainSession(ctx context.Context, p *publisher, bo *retry.Backoff) error {
	deadline := time.NewTimer(r.drain)
	defer deadline.Stop()
	var err error
wait:
	for len(p.inflight) > 0 {
		select {
		case c, ok := <-p.confirms:
			if !ok {
				err = r.sessionErr(p)
				break wait
			}
			if err = r.onConfirm(p, c, bo); err != nil {
				break wait
			}
		case <-p.s.Done():
			err = r.sessionErr(p)
			break wait
		case <-deadline.C:
			r.log.Warn("shutdown: confirms still outstanding at the drain deadline; their entries stay pending for another relay",
				zap.Int("in_flight", len(p.inflight)), zap.Duration("drain", r.drain))
			break wait
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisCall)
	r.flushAcks(fctx, true)
	cancel()
	return err
}

func (r *Relay) sessionErr(p *publisher) error {
	select {
	case <-p.s.Done():
		if err := p.s.Err(); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
	default:
	}
	return errors.New("relay: channel closed")
}

// takeConfirms handles every confirm already received, without blocking.
func (r *Relay) takeConfirms(p *publisher, bo *retry.Backoff) error {
	for {
		select {
		case c, ok := <-p.confirms:
			if !ok {
				return r.sessionErr(p)
			}
			if err := r.onConfirm(p, c, bo); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// onConfirm settles the oldest publish in flight. RabbitMQ sends the
// basic.return of an unroutable mandatory message before its basic.ack, and
// the library hands them over in that order, so every return of this
// publish is already in p.returns.
func (r *Relay) onConfirm(p *publisher, c amqp.Confirmation, bo *retry.Backoff) error {
returns:
	for {
		select {
		case ret := <-p.returns:
			p.returned[ret.MessageId]++
		default:
			break returns
		}
	}
	if len(p.inflight) == 0 || p.inflight[0].tag != c.DeliveryTag {
		// Never expected. Start over on a new channel: everything in
		// flight is published again, which is safe.
		want := uint64(0)
		if len(p.inflight) > 0 {
			want = p.inflight[0].tag
		}
		return fmt.Errorf("relay: confirm for delivery tag %d, expected %d", c.DeliveryTag, want)
	}
	e := p.inflight[0]
	p.inflight[0] = nil
	p.inflight = p.inflight[1:]
	r.inFlight.Store(int64(len(p.inflight)))
	st := &r.st
	switch {
	case !c.Ack:
		r.nacked.Add(1)
		r.retryLater(e)
	case p.returned[e.orderID] > 0:
		if p.returned[e.orderID]--; p.returned[e.orderID] == 0 {
			delete(p.returned, e.orderID)
		}
		r.returned.Add(1)
		r.retryLater(e)
	default:
		r.confirmed.Add(1)
		st.acks[e.sale] = append(st.acks[e.sale], e.id)
		st.retryBO.Reset()
		bo.Reset()
	}
	return nil
}

// retryLater queues e for another publish after a growing delay, so that a
// broker that keeps refusing (a missing binding) is not hammered.
func (r *Relay) retryLater(e *entry) {
	e.due = time.Now().Add(r.st.retryBO.Next())
	r.st.retry = append(r.st.retry, e)
}

// abandon moves what was in flight on a closed session back to the retry
// queue: those messages may or may not have reached RabbitMQ.
func (r *Relay) abandon(p *publisher) {
	if len(p.inflight) == 0 {
		return
	}
	r.lost.Add(uint64(len(p.inflight)))
	now := time.Now()
	for _, e := range p.inflight {
		e.due = now
	}
	// Before the others: they are older.
	retry := make([]*entry, 0, len(p.inflight)+len(r.st.retry))
	retry = append(retry, p.inflight...)
	r.st.retry = append(retry, r.st.retry...)
	p.inflight = nil
	r.inFlight.Store(0)
}

// publishRetries publishes the retry entries that are due, oldest first,
// while the in-flight window has room.
func (r *Relay) publishRetries(p *publisher, now time.Time) (int, error) {
	st := &r.st
	n := 0
	for len(st.retry) > 0 && len(p.inflight) < r.cfg.MaxInFlight {
		e := st.retry[0]
		if e.due.After(now) {
			break
		}
		st.retry[0] = nil
		st.retry = st.retry[1:]
		if err := r.publish(p, e); err != nil {
			st.retry = append([]*entry{e}, st.retry...)
			return n, err
		}
		n++
	}
	if len(st.retry) == 0 {
		st.retry = nil // let the backing array go
	}
	return n, nil
}

// publish sends one entry. An error means the channel is unusable.
func (r *Relay) publish(p *publisher, e *entry) error {
	e.tag = p.ch.GetNextPublishSeqNo()
	err := p.ch.Publish(r.amqp.Exchange, broker.RoutingKey, true, false, amqp.Publishing{
		ContentType:  order.ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    e.orderID,
		Timestamp:    time.Now(),
		Type:         "order",
		AppId:        "flashgate",
		Body:         e.body,
	})
	if err != nil {
		return fmt.Errorf("relay: publish: %w", err)
	}
	p.inflight = append(p.inflight, e)
	r.inFlight.Store(int64(len(p.inflight)))
	r.published.Add(1)
	return nil
}

func (r *Relay) track(sale, id string) bool {
	k := sale + "\x00" + id
	if _, ok := r.st.tracked[k]; ok {
		return false
	}
	r.st.tracked[k] = struct{}{}
	r.tracked.Store(int64(len(r.st.tracked)))
	return true
}

func (r *Relay) untrack(sale, id string) {
	delete(r.st.tracked, sale+"\x00"+id)
	r.tracked.Store(int64(len(r.st.tracked)))
}

// toEntry turns a stream entry into something to publish. A malformed entry
// is acknowledged (so no relay loops on it) but left in the stream, where
// outbox_pending and reconcile show it to an operator.
func (r *Relay) toEntry(ctx context.Context, sale string, m redis.XMessage) *entry {
	o, err := order.FromStream(m.Values)
	if err == nil && o.SaleID != sale {
		err = fmt.Errorf("%w: sale_id %q in the outbox of sale %q", order.ErrMalformed, o.SaleID, sale)
	}
	var body []byte
	if err == nil {
		body, err = o.Marshal()
	}
	if err != nil {
		r.malformed.Add(1)
		r.log.Error("outbox entry is not an order; left in the stream, not published",
			zap.String("sale", sale), zap.String("entry", m.ID), zap.Error(err))
		actx, cancel := context.WithTimeout(ctx, redisCall)
		if aerr := r.rdb.XAck(actx, r.keys.Outbox(sale), Group, m.ID).Err(); aerr != nil {
			r.errs.Add(1)
		}
		cancel()
		r.untrack(sale, m.ID)
		return nil
	}
	return &entry{sale: sale, id: m.ID, orderID: o.OrderID, body: body}
}

// readNew reads entries never delivered to any relay, from as many sales as
// the in-flight budget allows, in one pipelined round trip.
func (r *Relay) readNew(ctx context.Context) ([]*entry, error) {
	st := &r.st
	budget := r.cfg.MaxInFlight - len(st.tracked)
	now := time.Now()
	var sales []string
	for i := 0; i < len(st.sales) && len(sales) < budget; i++ {
		s := st.sales[(st.rot+i)%len(st.sales)]
		if st.ready[s] && now.Sub(st.active[s]) < activeFor {
			sales = append(sales, s)
		}
	}
	if len(st.sales) > 0 {
		st.rot = (st.rot + len(sales)) % len(st.sales)
	}
	if len(sales) == 0 {
		return nil, nil
	}
	count := int64(max(1, min(r.cfg.Batch, budget/len(sales))))
	cctx, cancel := context.WithTimeout(ctx, redisCall)
	defer cancel()
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(sales))
	for i, s := range sales {
		cmds[i] = pipe.XReadGroup(cctx, &redis.XReadGroupArgs{
			Group: Group, Consumer: r.name, Streams: []string{r.keys.Outbox(s), ">"}, Count: count, Block: -1,
		})
	}
	_, _ = pipe.Exec(cctx) // errors are per command, below
	var out []*entry
	var firstErr error
	for i, cmd := range cmds {
		streams, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if redis.HasErrorPrefix(err, "NOGROUP") {
				st.ready[sales[i]] = false // the stream was deleted: create it again
				continue
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("relay: read outbox of %s: %w", sales[i], err)
			}
			continue
		}
		for _, s := range streams {
			if len(s.Messages) > 0 {
				st.active[sales[i]] = now
			}
			for _, m := range s.Messages {
				if !r.track(sales[i], m.ID) {
					continue
				}
				if e := r.toEntry(ctx, sales[i], m); e != nil {
					out = append(out, e)
				}
			}
		}
	}
	if firstErr != nil && len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}

// claim takes over entries pending longer than claim_after: a dead relay's,
// or this relay's own when a read's reply was lost. Entries this relay holds
// are skipped (their idle time is reset, which is harmless).
func (r *Relay) claim(ctx context.Context) {
	st := &r.st
	for _, sale := range st.sales {
		// A pending entry is still in the stream: an empty outbox has
		// nothing to claim.
		if !st.ready[sale] || st.backlog[sale] == 0 {
			continue
		}
		budget := r.cfg.MaxInFlight - len(st.tracked)
		if budget <= 0 {
			return
		}
		start := st.claimFrom[sale]
		if start == "" {
			start = "0-0"
		}
		cctx, cancel := context.WithTimeout(ctx, redisCall)
		msgs, next, err := r.rdb.XAutoClaim(cctx, &redis.XAutoClaimArgs{
			Stream: r.keys.Outbox(sale), Group: Group, Consumer: r.name,
			MinIdle: r.cfg.ClaimAfter, Start: start, Count: int64(min(r.cfg.Batch, budget)),
		}).Result()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.errs.Add(1)
				r.log.Warn("cannot claim pending outbox entries", zap.String("sale", sale), zap.Error(err))
			}
			if redis.HasErrorPrefix(err, "NOGROUP") {
				st.ready[sale] = false
			}
			continue
		}
		st.claimFrom[sale] = next
		now := time.Now()
		for _, m := range msgs {
			if len(m.Values) == 0 || !r.track(sale, m.ID) {
				continue // deleted meanwhile (Redis 6.2 shape), or ours already
			}
			if e := r.toEntry(ctx, sale, m); e != nil {
				r.claimed.Add(1)
				e.due = now
				st.retry = append(st.retry, e)
			}
		}
	}
}

// flushAcks acknowledges and deletes the confirmed entries, one MULTI per
// sale so that an entry is never acknowledged without being deleted (it
// would then sit in the outbox for ever, never read again). On failure the
// entries stay held and the flush is retried; final says this is the last
// try.
func (r *Relay) flushAcks(ctx context.Context, final bool) {
	st := &r.st
	if len(st.acks) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, redisCall)
	defer cancel()
	pipe := r.rdb.TxPipeline()
	for sale, ids := range st.acks {
		key := r.keys.Outbox(sale)
		pipe.XAck(cctx, key, Group, ids...)
		pipe.XDel(cctx, key, ids...)
	}
	if _, err := pipe.Exec(cctx); err != nil {
		r.errs.Add(1)
		st.nextAck = time.Now().Add(st.ackBO.Next())
		n := 0
		for _, ids := range st.acks {
			n += len(ids)
		}
		if final {
			r.log.Warn("cannot remove confirmed entries from the outbox; they will be published again (duplicates are harmless)",
				zap.Int("entries", n), zap.Error(err))
		} else {
			r.log.Warn("cannot remove confirmed entries from the outbox; retrying", zap.Int("entries", n), zap.Error(err))
		}
		return
	}
	st.ackBO.Reset()
	for sale, ids := range st.acks {
		for _, id := range ids {
			r.untrack(sale, id)
		}
		r.removed.Add(uint64(len(ids)))
		delete(st.acks, sale)
	}
}

// refresh re-reads the set of sales, creates the consumer group of new ones
// and samples each outbox for Stats.
func (r *Relay) refresh(ctx context.Context) {
	st := &r.st
	cctx, cancel := context.WithTimeout(ctx, redisCall)
	defer cancel()
	sales, err := r.rdb.SMembers(cctx, r.keys.Sales()).Result()
	if err != nil {
		r.errs.Add(1)
		r.log.Warn("cannot read the set of sales", zap.Error(err))
		return
	}
	st.sales = sales
	for _, s := range sales {
		if st.ready[s] {
			continue
		}
		err := r.rdb.XGroupCreateMkStream(cctx, r.keys.Outbox(s), Group, "0").Err()
		if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			r.errs.Add(1)
			r.log.Warn("cannot create the outbox consumer group", zap.String("sale", s), zap.Error(err))
			continue
		}
		st.ready[s] = true
	}
	r.sample(cctx, sales)
}

// sample records each outbox's length, which marks the sales to poll and
// to claim from, and, for Stats, the age of the oldest entry of those that
// have one (its id is the Redis time of the XADD, in ms).
func (r *Relay) sample(ctx context.Context, sales []string) {
	st := &r.st
	pipe := r.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(sales))
	for i, s := range sales {
		lens[i] = pipe.XLen(ctx, r.keys.Outbox(s))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		r.errs.Add(1)
		return
	}
	now := time.Now()
	out := make([]SaleStats, len(sales))
	pipe = r.rdb.Pipeline()
	firsts := make([]*redis.XMessageSliceCmd, len(sales))
	for i, s := range sales {
		n := lens[i].Val()
		out[i] = SaleStats{Sale: s, Pending: n}
		st.backlog[s] = n
		if n > 0 {
			st.active[s] = now
			firsts[i] = pipe.XRangeN(ctx, r.keys.Outbox(s), "-", "+", 1)
		}
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			r.errs.Add(1)
		}
	}
	for i := range sales {
		if firsts[i] == nil {
			continue
		}
		if msgs := firsts[i].Val(); len(msgs) > 0 {
			if ms, ok := idMillis(msgs[0].ID); ok {
				out[i].OldestAge = max(0, now.Sub(time.UnixMilli(ms)))
			}
		}
	}
	r.saleStats.Store(&out)
}

func idMillis(id string) (int64, bool) {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
