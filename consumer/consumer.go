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
// Redis for status polling (best effort, off the acknowledgement path).
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
package consumer

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
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
	// deadLetterWait bounds the wait for the broker's confirm of one order
	// published to the dead-letter queue; a confirm that takes longer
	// counts as a failed publish.
	deadLetterWait = 30 * time.Second
	// maxReason bounds the reason header of an order dead-lettered alone.
	maxReason = 512
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
	MarkErrors   uint64 // orders whose mark failed after retries
	MarkDropped  uint64 // orders not marked because the mark queue was full
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
	loader        *scripts.Loader
	keys          scripts.Keys
	log           *zap.Logger
	name          string
	loop          broker.Loop

	started atomic.Bool
	seq     int
	witness witness // what Settled says (witness.go)

	deliveries, orders, inserted, duplicates, updated, batches, deadLettered atomic.Uint64
	dbErrors, ackErrors, marked, markErrors, markDropped, redelivered        atomic.Uint64

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
		loader:        deps.Loader,
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
	c.extraMetrics = deps.Metrics
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
func (c *Consumer) session(ctx, hard context.Context, s *broker.Session, marks chan<- mark) error {
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
// (order.CountHeader; a message without it counts as one) or batch_wait has
// passed. open is false once the channel of deliveries has closed.
func (c *Consumer) collect(ctx context.Context, deliveries <-chan amqp.Delivery, watch bool) (batch []amqp.Delivery, open bool) {
	var done <-chan struct{}
	if watch {
		done = ctx.Done()
	}
	var n int
	c.witness.waiting(time.Now())
	select {
	case d, ok := <-deliveries:
		c.witness.busy()
		if !ok {
			return nil, false
		}
		batch = append(make([]amqp.Delivery, 0, 16), d)
		n = order.Count(d.Headers)
	case <-done:
		c.witness.busy()
		return nil, true
	}
	if c.cfg.BatchWait <= 0 {
		for n < c.cfg.BatchSize {
			select {
			case d, ok := <-deliveries:
				if !ok {
					return batch, false
				}
				batch = append(batch, d)
				n += order.Count(d.Headers)
			default:
				return batch, true
			}
		}
		return batch, true
	}
	t := time.NewTimer(c.cfg.BatchWait)
	defer t.Stop()
	for n < c.cfg.BatchSize {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch, false
			}
			batch = append(batch, d)
			n += order.Count(d.Headers)
		case <-t.C:
			return batch, true
		case <-done:
			return batch, true
		}
	}
	return batch, true
}

// message is one delivery in hand and what became of its orders.
type message struct {
	d amqp.Delivery
	// parts are the encoded orders its body carries (order.Split); more
	// than one makes it a batch, whose orders are dead-lettered alone.
	parts [][]byte
	// rejected: the delivery was rejected whole (or its rejection failed);
	// its tag must not be named again.
	rejected bool
	// dead are the orders of a batch to publish to the dead-letter queue
	// alone before the delivery may be acknowledged.
	dead []deadOrder
}

// source is where an order in hand came from: msgs[msg].parts[part].
type source struct{ msg, part int }

// deadOrder is one order of a batch that can never be written.
type deadOrder struct {
	part int // its index in the batch
	why  error
}

// handle writes the orders of one collected batch of deliveries,
// dead-letters what can never be written, and acknowledges the deliveries.
// It reports whether every delivery was settled. When one was not (shutdown
// deadline, lost session, an order that could not be dead-lettered),
// nothing is acknowledged and RabbitMQ delivers the messages again. hard
// bounds the writes, held the waits between their retries (see writeRetry)
// and the dead-letter publishes.
func (c *Consumer) handle(hard, held context.Context, s *broker.Session, dl *deadLetters, batch []amqp.Delivery, marks chan<- mark) bool {
	c.deliveries.Add(uint64(len(batch)))
	msgs := make([]message, len(batch))
	orders := make([]order.Order, 0, len(batch))
	from := make([]source, 0, len(batch)) // where orders[i] came from
	for i, d := range batch {
		m := &msgs[i]
		m.d = d
		if d.Redelivered {
			c.redelivered.Add(1)
		}
		parts, err := order.Split(d.Body)
		if err != nil {
			c.reject(s, m, err)
			continue
		}
		m.parts = parts
		n := len(orders)
		for j, p := range parts {
			o, err := order.Unmarshal(p)
			if err != nil {
				if len(parts) == 1 {
					c.reject(s, m, err)
					break
				}
				m.dead = append(m.dead, deadOrder{part: j, why: err})
				continue
			}
			orders = append(orders, o)
			from = append(from, source{msg: i, part: j})
		}
		c.orders.Add(uint64(len(orders) - n))
	}

	// Transactions are bounded in orders, whatever the messages carry.
	written := make([]bool, len(orders))
	for start := 0; start < len(orders); start += c.cfg.BatchSize {
		end := min(start+c.cfg.BatchSize, len(orders))
		refused, ok := c.write(hard, held, orders[start:end])
		if !ok {
			return false
		}
		for k, why := range refused {
			i := start + k
			if why == nil {
				written[i] = true
				continue
			}
			m := &msgs[from[i].msg]
			if len(m.parts) == 1 {
				c.reject(s, m, why)
				continue
			}
			m.dead = append(m.dead, deadOrder{part: from[i].part, why: why})
		}
	}

	// Every order of a batch is now committed or about to be dead-lettered
	// alone; the delivery is done once the broker has confirmed the latter.
	for i := range msgs {
		m := &msgs[i]
		// In the batch's order, malformed and refused alike.
		slices.SortFunc(m.dead, func(a, b deadOrder) int { return cmp.Compare(a.part, b.part) })
		for _, o := range m.dead {
			if err := c.deadLetterPart(held, dl, m, o); err != nil {
				c.log.Warn("cannot dead-letter an order of a batch; nothing is acknowledged, the batch will be delivered again",
					zap.String("message_id", m.d.MessageId), zap.Int("index", o.part), zap.Error(err))
				return false
			}
		}
	}

	// Acknowledge up to the last delivery not rejected: multiple=true
	// covers every earlier one, and a rejected tag must not be named again.
	var last uint64
	for i := range msgs {
		if !msgs[i].rejected {
			last = max(last, msgs[i].d.DeliveryTag)
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

// reject rejects m's delivery whole without requeue: RabbitMQ dead-letters
// it as it came. Either way its tag is settled for handle, which must not
// name it again (a failed reject leaves it to the broker to deliver again
// after the session).
func (c *Consumer) reject(s *broker.Session, m *message, why error) {
	m.rejected = true
	c.log.Error("rejecting a message that can never be processed; it goes to the dead-letter queue",
		zap.String("message_id", m.d.MessageId), zap.Uint64("delivery_tag", m.d.DeliveryTag), zap.Error(why))
	if err := s.Channel.Nack(m.d.DeliveryTag, false, false); err != nil {
		c.ackErrors.Add(1)
		c.log.Warn("cannot reject a malformed message; it will be delivered again", zap.Error(err))
		return
	}
	c.deadLettered.Add(1)
}

// deadLetterPart publishes one order of m's batch to the dead-letter queue
// alone, its bytes as the batch carried them, and waits for the broker's
// confirm.
func (c *Consumer) deadLetterPart(ctx context.Context, dl *deadLetters, m *message, o deadOrder) error {
	c.log.Error("an order of a batch can never be processed; it goes to the dead-letter queue alone",
		zap.String("message_id", m.d.MessageId), zap.Uint64("delivery_tag", m.d.DeliveryTag),
		zap.Int("index", o.part), zap.Error(o.why))
	err := dl.publish(ctx, amqp.Publishing{
		ContentType:  order.ContentType,
		DeliveryMode: amqp.Persistent,
		Type:         order.TypeOrder,
		Timestamp:    time.Now(),
		AppId:        "flashgate",
		Headers: amqp.Table{
			headerReason:    clipReason(o.why.Error()),
			headerMessageID: m.d.MessageId,
			headerIndex:     int32(o.part),
		},
		Body: m.parts[o.part],
	})
	if err != nil {
		return err
	}
	c.deadLettered.Add(1)
	return nil
}

// The headers of an order dead-lettered alone: why, and where it came from
// (the batch message's id and the order's index in it).
const (
	headerReason    = "x-flashgate-reason"
	headerMessageID = "x-flashgate-message-id"
	headerIndex     = "x-flashgate-index"
)

// clipReason returns why cut to maxReason bytes, on a character boundary.
func clipReason(why string) string {
	if len(why) <= maxReason {
		return why
	}
	return strings.ToValidUTF8(why[:maxReason], "")
}

// deadLetters publishes orders to the dead-letter exchange, one message
// each, on a channel of its own in confirm mode, so that the channel that
// consumes stays as it is: not in confirm mode, and not closed by a publish
// the broker refuses (a missing exchange closes the channel). The channel
// is opened on first use and closed with the session. It is not safe for
// concurrent use (the session's goroutine owns it).
type deadLetters struct {
	conn     *amqp.Connection
	exchange string
	ch       *amqp.Channel
	returns  chan amqp.Return
}

// publish publishes msg to the dead-letter exchange, mandatory, and blocks
// until the broker confirms it, ctx ends, or deadLetterWait has passed. It
// returns nil only for a publish the broker has confirmed and not returned
// as unroutable. After an error the channel is not to be used again (the
// caller ends the session).
func (dl *deadLetters) publish(ctx context.Context, msg amqp.Publishing) error {
	if dl.ch == nil {
		ch, err := dl.conn.Channel()
		if err != nil {
			return fmt.Errorf("dead letter: open channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return fmt.Errorf("dead letter: confirm mode: %w", err)
		}
		// One publish is in flight at a time and its return, if any,
		// comes before its confirm: one slot is enough.
		dl.returns = ch.NotifyReturn(make(chan amqp.Return, 1))
		dl.ch = ch
	}
	ctx, cancel := context.WithTimeout(ctx, deadLetterWait)
	defer cancel()
	dc, err := dl.ch.PublishWithDeferredConfirmWithContext(ctx, dl.exchange, "", true, false, msg)
	if err != nil {
		return fmt.Errorf("dead letter: publish to %s: %w", dl.exchange, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("dead letter: wait for the confirm: %w", err)
	}
	select {
	case r, ok := <-dl.returns:
		if ok {
			return fmt.Errorf("dead letter: %s returned it as unroutable: %d %s", dl.exchange, r.ReplyCode, r.ReplyText)
		}
	default:
	}
	if !acked {
		return fmt.Errorf("dead letter: %s did not confirm it (nack, or the channel closed)", dl.exchange)
	}
	return nil
}

// close closes the channel, if it was opened. The session's watchdog
// bounds it: once the connection is closed, it returns at once.
func (dl *deadLetters) close() {
	if dl.ch != nil {
		_ = dl.ch.Close()
	}
}

// errGaveUp means a batch was abandoned: the shutdown deadline passed, the
// session that delivered the orders is gone, or an order could not be
// dead-lettered. Nothing of it may be acknowledged.
var errGaveUp = errors.New("consumer: batch abandoned")

// write commits orders. refused[i] is nil when orders[i] is now in MySQL,
// else the error with which MySQL refuses it as data (for the caller to
// dead-letter). ok is false when the write was abandoned (see writeRetry);
// then nothing of it may be acknowledged.
func (c *Consumer) write(hard, held context.Context, orders []order.Order) (refused []error, ok bool) {
	refused = make([]error, len(orders))
	err := c.writeRetry(hard, held, orders)
	if err == nil {
		return refused, true
	}
	if !orderdb.IsDataError(err) {
		return nil, false
	}
	// One order spoils the transaction: write them one by one, to
	// dead-letter only the ones MySQL refuses.
	for i, o := range orders {
		err := c.writeRetry(hard, held, []order.Order{o})
		switch {
		case err == nil:
		case orderdb.IsDataError(err):
			refused[i] = err
		default:
			return nil, false
		}
	}
	return refused, true
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
