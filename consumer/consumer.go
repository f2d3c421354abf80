// Package consumer writes the orders that RabbitMQ delivers into MySQL,
// exactly once in effect: connect, read, write, acknowledge. The schema and
// the writer are package orderdb's; the consumer decides what is written
// when, and what is acknowledged, retried or dead-lettered.
//
// Every order in a message is a snapshot of one order in one state (package
// order): the order as accepted, and one more per change of state (paid,
// cancelled, expired). A message carries one order (its JSON object) or a
// batch of them (a JSON array, order.Split); the consumer goes by the body,
// whatever the message's type says. A consumer takes deliveries with manual
// acknowledgement and a prefetch window, gathers them (until they carry
// consumer.batch_size orders, or whatever came within consumer.batch_wait),
// and writes their orders in transactions of at most
// consumer.batch_size orders (orderdb.WriteOrders), each of which inserts the
// orders not yet in MySQL, adds the rows it actually inserted to the per-sale
// ledger, and moves the others to their snapshot's state unless theirs is
// final. Only after every transaction of the gathered deliveries has
// committed does it acknowledge them; then it marks the orders created in
// Redis for the order view (mark.go: one SADD per sale for whatever batches
// it gathered, off the acknowledgement path).
//
// What can never be written goes to the dead-letter queue, and no further: a
// message whose body is not an order or a batch of orders, or that carries
// one order that is malformed or that MySQL refuses as data, is rejected
// without requeue, which dead-letters it as it came. An order of a batch
// that is malformed or refused goes there alone: the consumer publishes its
// bytes as a message of its own to the dead-letter exchange, with the reason
// in a header, and waits for the broker's confirm before it acknowledges the
// batch it came in; the rest of the batch is written. When that publish
// fails, nothing of the deliveries in hand is acknowledged and the session
// ends: RabbitMQ delivers the batch again, and the orders already written
// are duplicates, which change nothing.
//
// RabbitMQ delivers at least once (a delivery whose ack was lost comes
// again, and the relay may publish an order twice), and in no promised order
// between an order and its change of state; the insert on the order_id
// primary key turns that into exactly once in MySQL, ledger included, and
// the final states, which no snapshot leaves, make the state monotone. Any
// number of consumers may run at once on the same queue.
//
// The consume loop is consumer.go (sessions, and collect, which gathers
// deliveries) and batch.go (what one gathered batch becomes: written,
// dead-lettered, acknowledged). Beside it: deadletter.go publishes the
// orders dead-lettered alone, mark.go is the status marker, witness.go what
// Settled vouches for (package repair's fence), metrics.go the series.
package consumer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// Deps are the consumer's collaborators.
type Deps struct {
	DB *sql.DB // required; see orderdb.Open
	// Redis is where orders are marked created for the order view; when
	// it is nil nothing is marked.
	Redis redis.UniversalClient
	Log   *zap.Logger // nil: no logs
	// Name prefixes the consumer tags; empty: host-pid-random.
	Name string
	// ObserveWrite, when set, is called after each committed transaction
	// with its number of orders and how long writing it took, besides the
	// consumer's own histograms (see WriteMetrics).
	ObserveWrite func(orders int, took time.Duration)
}

// Stats are the consumer's counters since start, for metrics.
type Stats struct {
	Deliveries  uint64 // messages received (redeliveries included)
	Redelivered uint64 // of those, messages RabbitMQ had delivered before
	Orders      uint64 // valid orders decoded from those messages (a batch message carries several)
	Inserted    uint64 // rows inserted into orders
	Duplicates  uint64 // snapshots of orders that were already in MySQL (redeliveries, duplicates, changes of state)
	Updated     uint64 // of those, rows this consumer changed (state, pay_by, or only the event number seq)
	Batches     uint64 // transactions committed
	// DeadLettered counts messages this consumer sent to the dead-letter
	// queue: one per message rejected whole (a batch that cannot be split
	// counts once, whatever it held) and one per order of a batch published
	// there alone (malformed, or refused by MySQL as data).
	DeadLettered uint64
	DBErrors     uint64 // failed transactions (retried)
	AckErrors    uint64 // acknowledgements that could not be sent (the broker redelivers)
	Reconnects   uint64 // RabbitMQ sessions opened after the first
	Marked       uint64 // orders marked created in Redis
	MarkErrors   uint64 // orders whose mark failed after retries, or was not tried before the shutdown deadline
	Connected    bool   // a RabbitMQ session is open
}

// Consumer is one RabbitMQ → MySQL consumer. Run it once; Stats is safe for
// concurrent use.
type Consumer struct {
	cfg config.Consumer
	// messageOrders is relay.message_orders: the orders a message carries
	// at most.
	messageOrders int
	amqp          config.AMQP
	shutdown      time.Duration
	db            *sql.DB
	rdb           redis.UniversalClient
	keys          scripts.Keys
	log           *zap.Logger
	name          string
	loop          broker.Loop

	started atomic.Bool
	seq     int
	witness witness // what Settled says (witness.go)

	deliveries, orders, inserted, duplicates, updated, batches, deadLettered atomic.Uint64
	dbErrors, ackErrors, marked, markErrors, redelivered                     atomic.Uint64

	observe           func(orders int, took time.Duration)
	metrics           *metrics.Set
	batchSize, insert *metrics.PrometheusHistogram
}

// New validates the settings and returns a consumer, or an error saying
// which setting or dependency is missing. It connects to nothing until Run.
func New(cfg *config.Config, deps Deps) (*Consumer, error) {
	if deps.DB == nil {
		return nil, errors.New("consumer: no database")
	}
	if cfg.Consumer.Prefetch < 1 || cfg.Consumer.BatchSize < 1 || cfg.Consumer.BatchWait < 0 || cfg.Relay.MessageOrders < 1 {
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
		cfg:           cfg.Consumer,
		messageOrders: cfg.Relay.MessageOrders,
		amqp:          cfg.AMQP,
		shutdown:      cfg.Shutdown.Timeout,
		db:            deps.DB,
		rdb:           deps.Redis,
		keys:          scripts.Keys{Prefix: cfg.Redis.KeyPrefix},
		log:           log,
		name:          name,
		observe:       deps.ObserveWrite,
		loop: broker.Loop{
			AMQP:    cfg.AMQP,
			Name:    "flashgate consumer " + name,
			Log:     log,
			Backoff: retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
			Lost:    "unacknowledged deliveries go back to the queue",
		},
	}
	c.newMetrics()
	return c, nil
}

// Stats returns the counters. It is safe for concurrent use.
func (c *Consumer) Stats() Stats {
	return Stats{
		Deliveries:   c.deliveries.Load(),
		Redelivered:  c.redelivered.Load(),
		Orders:       c.orders.Load(),
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

	marks, stopMarker := c.startMarker(hard)
	defer stopMarker()

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

// prefetch is the number of messages one consumer holds unacknowledged:
// consumer.prefetch counts orders, and a message carries up to
// relay.message_orders of them (the relay's setting, which a consumer is
// given alike). Were it counted in messages, the first consumer to
// subscribe to a filled queue would take nearly all of it (512 messages of
// 128 orders) and the others would wait: N consumers would drain no faster
// than one.
func (c *Consumer) prefetch() int {
	return max(1, (c.cfg.Prefetch+c.messageOrders-1)/c.messageOrders)
}

// session consumes on one RabbitMQ session until it breaks or ctx ends. Its
// handled batches mark the session served, so that the next one starts the
// backoff over.
func (c *Consumer) session(ctx, hard context.Context, s *broker.Session, marks *marks) error {
	// However it ends, what RabbitMQ sent on the session and was not
	// settled goes back to the queue (Settled).
	defer func() { c.witness.lost(time.Now()) }()
	ch := s.Channel
	if err := ch.Qos(c.prefetch(), 0, false); err != nil {
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
	dl := &deadLetters{conn: s.Conn, exchange: broker.DeadLetter(c.amqp.Exchange)}
	defer dl.close()
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
			if !c.handle(hard, held, s, dl, batch, marks) {
				// Not settled, not acknowledged: end the session so
				// that no later acknowledgement (multiple) covers
				// these deliveries; RabbitMQ delivers them again.
				return errGaveUp
			}
			c.witness.settled(batch)
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
// watch is set), then takes more until the deliveries carry batch_size orders
// (order.CountHeader; a message without it counts as one), batch_wait has
// passed since the first, or ctx ends (when watched). open is false once the
// channel of deliveries has closed.
//
// One select serves the wait for the first delivery and the filling after
// it, as nsqd's messagePump (nsqd/topic.go) serves its states: a case whose
// channel is nil is never chosen, so the deadline is off until the first
// delivery sets it, and ctx is not watched when done is nil. With
// batch_wait 0 the deadline passes at once: nothing is waited for, and the
// batch is the first delivery and what the select takes before it sees the
// deadline.
func (c *Consumer) collect(ctx context.Context, deliveries <-chan amqp.Delivery, watch bool) (batch []amqp.Delivery, open bool) {
	var done <-chan struct{}
	if watch {
		done = ctx.Done()
	}
	var (
		timer    *time.Timer
		deadline <-chan time.Time // nil: no deadline before the first delivery
		n        int
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	c.witness.waiting(time.Now())
	for n < c.cfg.BatchSize {
		select {
		case d, ok := <-deliveries:
			if !ok {
				c.witness.busy()
				return batch, false
			}
			if batch == nil {
				// Deliveries in hand: the loop no longer vouches for
				// now (Settled), and batch_wait runs from here.
				c.witness.busy()
				batch = make([]amqp.Delivery, 0, 16)
				timer = time.NewTimer(c.cfg.BatchWait) // 0: passed at once
				deadline = timer.C
			}
			batch = append(batch, d)
			n += order.Count(d.Headers)
		case <-deadline:
			return batch, true
		case <-done:
			c.witness.busy()
			return batch, true
		}
	}
	return batch, true
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
