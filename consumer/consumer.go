// Package consumer writes the orders that RabbitMQ delivers into MySQL,
// exactly once in effect: connect, read, write, acknowledge. The schema and
// the writer are package orderdb's; the consumer decides what is written
// when, and what is acknowledged, retried or dead-lettered.
//
// Every message is a snapshot of one order in one state (package order): the
// order as accepted, and one more per change of state (paid, cancelled,
// expired). A consumer takes deliveries with manual acknowledgement and a
// prefetch window, gathers them into batches (up to consumer.batch_size, or
// whatever came within consumer.batch_wait) and writes each batch in one
// transaction (orderdb.WriteOrders) that inserts the orders not yet in MySQL,
// adds the rows it actually inserted to the per-sale ledger, and moves the
// others to their snapshot's state unless theirs is final. Only after COMMIT
// does it acknowledge the batch; then it marks the orders created in Redis
// for status polling (best effort, off the acknowledgement path). A message
// that is not a valid order is rejected without requeue, which dead-letters
// it.
//
// RabbitMQ delivers at least once (a delivery whose ack was lost comes
// again, and the relay may publish an order twice), and in no promised order
// between an order and its change of state; the insert on the order_id
// primary key turns that into exactly once in MySQL, ledger included, and
// the final states, which no snapshot leaves, make the state monotone. Any
// number of consumers may run at once on the same queue.
package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

const (
	// markQueue bounds the batches waiting to be marked created in Redis;
	// beyond it marks are dropped (status polling then says queued).
	markQueue = 256
	// markChunk bounds the order ids of one mark script call.
	markChunk = 500
	// markTries is how often one batch's mark is tried.
	markTries = 3
	// redisCall bounds one mark call.
	redisCall = 2 * time.Second
)

// Deps are the consumer's collaborators.
type Deps struct {
	DB *sql.DB // required; see orderdb.Open
	// Redis and Loader mark orders created for status polling; when Redis
	// is nil nothing is marked.
	Redis  redis.UniversalClient
	Loader *scripts.Loader
	Log    *zap.Logger // nil: no logs
	// Name prefixes the consumer tags; empty: host-pid-random.
	Name string
	// ObserveWrite, when set, is called after each committed transaction
	// with its number of orders and how long writing it took, besides the
	// consumer's own histograms (see WriteMetrics).
	ObserveWrite func(orders int, took time.Duration)
	// Metrics, when set, writes more series after the consumer's own on
	// ServeMetrics's /metrics (the process's repairer).
	Metrics func(w io.Writer)
}

// Stats are the consumer's counters since start, for metrics.
type Stats struct {
	Deliveries   uint64 // messages received (redeliveries included)
	Redelivered  uint64 // of those, messages RabbitMQ had delivered before
	Inserted     uint64 // rows inserted into orders
	Duplicates   uint64 // snapshots of orders that were already in MySQL (redeliveries, duplicates, changes of state)
	Updated      uint64 // of those, rows this consumer changed (state, pay_by, or only the event number seq)
	Batches      uint64 // transactions committed
	DeadLettered uint64 // malformed messages rejected to the dead-letter queue
	DBErrors     uint64 // failed transactions (retried)
	AckErrors    uint64 // acknowledgements that could not be sent (the broker redelivers)
	Reconnects   uint64 // RabbitMQ sessions opened after the first
	Marked       uint64 // orders marked created in Redis
	MarkErrors   uint64 // orders whose mark failed after retries
	MarkDropped  uint64 // orders not marked because the mark queue was full
	Connected    bool   // a RabbitMQ session is open
}

// Consumer is one RabbitMQ → MySQL consumer. Run it once; Stats is safe for
// concurrent use.
type Consumer struct {
	cfg      config.Consumer
	amqp     config.AMQP
	shutdown time.Duration
	db       *sql.DB
	rdb      redis.UniversalClient
	loader   *scripts.Loader
	keys     scripts.Keys
	log      *zap.Logger
	name     string
	loop     broker.Loop

	started atomic.Bool
	seq     int

	deliveries, inserted, duplicates, updated, batches, deadLettered, dbErrors atomic.Uint64
	ackErrors, marked, markErrors, markDropped, redelivered                    atomic.Uint64

	observe           func(orders int, took time.Duration)
	extraMetrics      func(w io.Writer)
	metrics           *metrics.Set
	batchSize, insert *metrics.PrometheusHistogram
}

// New validates the settings and returns a consumer, or an error saying
// which setting or dependency is missing. It connects to nothing until Run.
func New(cfg *config.Config, deps Deps) (*Consumer, error) {
	if deps.DB == nil {
		return nil, errors.New("consumer: no database")
	}
	if deps.Redis != nil && deps.Loader == nil {
		return nil, errors.New("consumer: a Redis client needs a script loader")
	}
	if cfg.Consumer.Prefetch < 1 || cfg.Consumer.BatchSize < 1 || cfg.Consumer.BatchWait < 0 {
		return nil, fmt.Errorf("consumer: bad settings %+v", cfg.Consumer)
	}
	if cfg.AMQP.URL == "" || cfg.AMQP.Exchange == "" || cfg.AMQP.Queue == "" {
		return nil, errors.New("consumer: AMQP URL, exchange and queue are required")
	}
	log := deps.Log
	if log == nil {
		log = zap.NewNop()
	}
	name := deps.Name
	if name == "" {
		name = broker.InstanceName("consumer")
	}
	c := &Consumer{
		cfg:      cfg.Consumer,
		amqp:     cfg.AMQP,
		shutdown: cfg.Shutdown.Timeout,
		db:       deps.DB,
		rdb:      deps.Redis,
		loader:   deps.Loader,
		keys:     scripts.Keys{Prefix: cfg.Redis.KeyPrefix},
		log:      log,
		name:     name,
		observe:  deps.ObserveWrite,
		loop: broker.Loop{
			AMQP:    cfg.AMQP,
			Name:    "flashgate consumer " + name,
			Log:     log,
			Backoff: retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
			Lost:    "unacknowledged deliveries go back to the queue",
		},
	}
	c.extraMetrics = deps.Metrics
	c.newMetrics()
	return c, nil
}

// Stats returns the counters. It is safe for concurrent use.
func (c *Consumer) Stats() Stats {
	return Stats{
		Deliveries:   c.deliveries.Load(),
		Redelivered:  c.redelivered.Load(),
		Inserted:     c.inserted.Load(),
		Duplicates:   c.duplicates.Load(),
		Updated:      c.updated.Load(),
		Batches:      c.batches.Load(),
		DeadLettered: c.deadLettered.Load(),
		DBErrors:     c.dbErrors.Load(),
		AckErrors:    c.ackErrors.Load(),
		Reconnects:   c.loop.Reconnects(),
		Marked:       c.marked.Load(),
		MarkErrors:   c.markErrors.Load(),
		MarkDropped:  c.markDropped.Load(),
		Connected:    c.loop.Connected(),
	}
}

// Run migrates the schema, then consumes until ctx ends, reconnecting to
// RabbitMQ and retrying MySQL with backoff for as long as it takes. When ctx
// ends it cancels its subscription, writes, commits and acknowledges every
// delivery already received, and returns nil; shutdown.timeout bounds that
// (what is not acknowledged by then goes back to the queue). It returns an
// error wrapping orderdb.ErrSchemaNewer when the database is newer than the
// binary, or an error when called twice.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("consumer: Run called twice")
	}
	hard, cancelHard := graceAfter(ctx, c.shutdown)
	defer cancelHard()

	if err := c.migrate(ctx); err != nil {
		return err
	}

	marks := make(chan mark, markQueue)
	var wg sync.WaitGroup
	if c.rdb != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.marker(hard, marks)
		}()
	}
	defer func() {
		close(marks)
		wg.Wait()
	}()

	c.loop.Run(ctx, func(ctx context.Context, s *broker.Session) error {
		return c.session(ctx, hard, s, marks)
	})
	return nil
}

// migrate runs orderdb.Migrate until it succeeds: MySQL may not be up yet.
// It returns nil when ctx ends first (Run then has nothing to consume).
func (c *Consumer) migrate(ctx context.Context) error {
	err := retry.Until(ctx, retry.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second},
		func(ctx context.Context) error {
			mctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			err := orderdb.Migrate(mctx, c.db)
			if errors.Is(err, orderdb.ErrSchemaNewer) {
				return retry.Stop(err)
			}
			return err
		},
		func(err error, d time.Duration) {
			c.log.Warn("cannot migrate the schema yet; retrying", zap.Error(err), zap.Duration("retry_in", d))
		})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// session consumes on one RabbitMQ session until it breaks or ctx ends. Its
// handled batches mark the session served, so that the next one starts the
// backoff over.
func (c *Consumer) session(ctx, hard context.Context, s *broker.Session, marks chan<- mark) error {
	ch := s.Channel
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("consumer: qos: %w", err)
	}
	c.seq++
	tag := c.name + "-" + strconv.Itoa(c.seq)
	deliveries, err := ch.Consume(c.amqp.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consumer: consume %s: %w", c.amqp.Queue, err)
	}

	// Past the shutdown deadline nothing may block on the session.
	stop := context.AfterFunc(hard, func() { _ = s.Close() })
	defer stop()
	// held ends when the deliveries in hand can no longer be acknowledged:
	// the session is lost (the broker has taken them back) or closed at the
	// shutdown deadline. A write waiting to retry gives up then.
	held, release := context.WithCancel(hard)
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-s.Done():
		case <-held.Done():
		}
		release()
	})
	defer func() {
		release()
		wg.Wait()
	}()

	cancelled := false
	for {
		batch, open := c.collect(ctx, deliveries, !cancelled)
		if len(batch) > 0 {
			if !c.handle(hard, held, s, batch, marks) {
				// Not committed, not acknowledged: end the session so
				// that no later acknowledgement (multiple) covers
				// these deliveries; RabbitMQ delivers them again.
				return errGaveUp
			}
			s.Served()
		}
		if !open {
			if cancelled {
				return nil
			}
			if err := s.Err(); err != nil {
				return fmt.Errorf("consumer: %w", err)
			}
			return errors.New("consumer: deliveries closed")
		}
		if ctx.Err() != nil && !cancelled {
			// Stop taking deliveries. Those already sent to us are in
			// hand: finish them (the library closes the channel of
			// deliveries once they are all handed over).
			cancelled = true
			if err := ch.Cancel(tag, false); err != nil {
				return fmt.Errorf("consumer: cancel: %w", err)
			}
		}
	}
}

// collect returns the next batch: it waits for one delivery (or for ctx, when
// watch is set), then takes more until batch_size or batch_wait. open is false
// once the channel of deliveries has closed.
func (c *Consumer) collect(ctx context.Context, deliveries <-chan amqp.Delivery, watch bool) (batch []amqp.Delivery, open bool) {
	var done <-chan struct{}
	if watch {
		done = ctx.Done()
	}
	select {
	case d, ok := <-deliveries:
		if !ok {
			return nil, false
		}
		batch = append(make([]amqp.Delivery, 0, c.cfg.BatchSize), d)
	case <-done:
		return nil, true
	}
	if c.cfg.BatchWait <= 0 {
		for len(batch) < c.cfg.BatchSize {
			select {
			case d, ok := <-deliveries:
				if !ok {
					return batch, false
				}
				batch = append(batch, d)
			default:
				return batch, true
			}
		}
		return batch, true
	}
	t := time.NewTimer(c.cfg.BatchWait)
	defer t.Stop()
	for len(batch) < c.cfg.BatchSize {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch, false
			}
			batch = append(batch, d)
		case <-t.C:
			return batch, true
		case <-done:
			return batch, true
		}
	}
	return batch, true
}

// handle writes one batch and acknowledges it. It reports whether the batch
// was committed. When it was not (shutdown deadline, lost session), nothing
// is acknowledged and RabbitMQ delivers the messages again. hard bounds the
// writes, held the waits between their retries (see writeRetry).
func (c *Consumer) handle(hard, held context.Context, s *broker.Session, batch []amqp.Delivery, marks chan<- mark) bool {
	c.deliveries.Add(uint64(len(batch)))
	orders := make([]order.Order, 0, len(batch))
	good := make([]amqp.Delivery, 0, len(batch))
	for _, d := range batch {
		if d.Redelivered {
			c.redelivered.Add(1)
		}
		o, err := order.Unmarshal(d.Body)
		if err != nil {
			c.deadLetter(s, d, err)
			continue
		}
		orders = append(orders, o)
		good = append(good, d)
	}
	if len(orders) == 0 {
		return true
	}
	written, ok := c.write(hard, held, s, orders, good)
	if !ok {
		return false
	}
	// Acknowledge up to the last delivery not rejected: multiple=true
	// covers every earlier one, and a rejected tag must not be named again.
	var last uint64
	for i, d := range good {
		if written[i] {
			last = max(last, d.DeliveryTag)
		}
	}
	if last > 0 {
		if err := s.Channel.Ack(last, true); err != nil {
			// Committed but not acknowledged: RabbitMQ delivers again,
			// the insert finds the rows, nothing is counted twice.
			c.ackErrors.Add(1)
			c.log.Warn("cannot acknowledge a committed batch; it will be delivered again (harmless)", zap.Error(err))
		}
	}
	if c.rdb != nil {
		bySale := map[string][]string{}
		for i, o := range orders {
			if written[i] {
				bySale[o.SaleID] = append(bySale[o.SaleID], o.OrderID)
			}
		}
		for sale, ids := range bySale {
			select {
			case marks <- mark{sale: sale, ids: ids}:
			default:
				c.markDropped.Add(uint64(len(ids)))
				c.log.Warn("mark queue full; orders stay 'queued' for status polling", zap.String("sale", sale), zap.Int("orders", len(ids)))
			}
		}
	}
	return true
}

func (c *Consumer) deadLetter(s *broker.Session, d amqp.Delivery, why error) {
	c.log.Error("rejecting a message that can never be processed; it goes to the dead-letter queue",
		zap.String("message_id", d.MessageId), zap.Uint64("delivery_tag", d.DeliveryTag), zap.Error(why))
	if err := s.Channel.Nack(d.DeliveryTag, false, false); err != nil {
		c.ackErrors.Add(1)
		c.log.Warn("cannot reject a malformed message; it will be delivered again", zap.Error(err))
		return
	}
	c.deadLettered.Add(1)
}

// errGaveUp means a write was abandoned: the shutdown deadline passed or the
// session that delivered the orders is gone. Nothing may be acknowledged.
var errGaveUp = errors.New("consumer: write abandoned")

// write commits orders. written[i] says whether orders[i] is now in MySQL:
// false only for an order MySQL refuses as data, which is dead-lettered
// here. ok is false when the batch was abandoned (see writeRetry); then
// nothing of it may be acknowledged.
func (c *Consumer) write(hard, held context.Context, s *broker.Session, orders []order.Order, ds []amqp.Delivery) (written []bool, ok bool) {
	written = make([]bool, len(orders))
	err := c.writeRetry(hard, held, orders)
	if err == nil {
		for i := range written {
			written[i] = true
		}
		return written, true
	}
	if !orderdb.IsDataError(err) {
		return nil, false
	}
	// One order spoils the batch: write them one by one, to dead-letter
	// only the ones MySQL refuses.
	for i, o := range orders {
		err := c.writeRetry(hard, held, []order.Order{o})
		switch {
		case err == nil:
			written[i] = true
		case orderdb.IsDataError(err):
			c.deadLetter(s, ds[i], err)
		default:
			return nil, false
		}
	}
	return written, true
}

// writeRetry runs orderdb.WriteOrders until it succeeds, MySQL refuses the
// data (returned at once: no retry can fix it), or held ends: the session is
// lost (the broker has taken the deliveries back; another consumer, or this
// one reconnected, gets them again) or the shutdown deadline passed; both
// return errGaveUp. Other failures (a lost connection, a server restart, a
// deadlock) are retried with backoff. A write under way is bounded by hard
// only: a session lost meanwhile does not abort a transaction that may
// commit, which is harmless (a redelivery finds the rows).
func (c *Consumer) writeRetry(hard, held context.Context, orders []order.Order) error {
	err := retry.Until(held, retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		func(context.Context) error {
			start := time.Now()
			w, err := orderdb.WriteOrders(hard, c.db, orders)
			if err == nil {
				c.count(w, len(orders), time.Since(start))
				return nil
			}
			if orderdb.IsDataError(err) {
				return retry.Stop(err)
			}
			c.dbErrors.Add(1)
			return err
		},
		func(err error, d time.Duration) {
			c.log.Warn("cannot write to MySQL; retrying, nothing is acknowledged meanwhile",
				zap.Int("orders", len(orders)), zap.Error(err), zap.Duration("retry_in", d))
		})
	if err == nil || orderdb.IsDataError(err) {
		return err
	}
	return errGaveUp
}

// count records one committed transaction of n orders that took took.
func (c *Consumer) count(w orderdb.Written, n int, took time.Duration) {
	c.batches.Add(1)
	c.inserted.Add(uint64(w.Inserted))
	c.duplicates.Add(uint64(w.Duplicates))
	c.updated.Add(uint64(w.Updated))
	c.batchSize.Update(float64(n))
	c.insert.Update(took.Seconds())
	if c.observe != nil {
		c.observe(n, took)
	}
}

// mark is one batch's orders of one sale, to mark created in Redis.
type mark struct {
	sale string
	ids  []string
}

// marker marks orders created until marks is closed and drained or ctx
// ends. A mark that keeps failing is dropped: it only affects what status
// polling says, never the orders.
func (c *Consumer) marker(ctx context.Context, marks <-chan mark) {
	for m := range marks {
		if ctx.Err() != nil {
			c.markErrors.Add(uint64(len(m.ids)))
			continue
		}
		tries := 0
		err := retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: time.Second},
			func(ctx context.Context) error {
				tries++
				err := c.mark(ctx, m)
				if err != nil && tries == markTries {
					return retry.Stop(err)
				}
				return err
			}, nil)
		if err != nil {
			c.markErrors.Add(uint64(len(m.ids)))
			c.log.Warn("cannot mark orders created; status polling says queued for them",
				zap.String("sale", m.sale), zap.Int("orders", len(m.ids)), zap.Error(err))
			continue
		}
		c.marked.Add(uint64(len(m.ids)))
	}
}

func (c *Consumer) mark(ctx context.Context, m mark) error {
	for start := 0; start < len(m.ids); start += markChunk {
		ids := m.ids[start:min(start+markChunk, len(m.ids))]
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		cctx, cancel := context.WithTimeout(ctx, redisCall)
		_, err := c.loader.Run(cctx, scripts.Mark, []string{c.keys.Orders(m.sale)}, args...)
		if errors.Is(err, scripts.ErrNotLoaded) {
			if _, err = c.loader.Load(cctx); err == nil {
				_, err = c.loader.Run(cctx, scripts.Mark, []string{c.keys.Orders(m.sale)}, args...)
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("mark %s: %w", m.sale, err)
		}
	}
	return nil
}

// graceAfter returns a context that ends grace after parent ends, or when
// the returned cancel is called.
func graceAfter(parent context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	hard, cancel := context.WithCancel(context.WithoutCancel(parent))
	stop := context.AfterFunc(parent, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-hard.Done():
		}
	})
	return hard, func() {
		stop()
		cancel()
	}
}
