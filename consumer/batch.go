package consumer

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/retry"
)

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
func (c *Consumer) handle(hard, held context.Context, s *broker.Session, dl *deadLetters, batch []amqp.Delivery, marks *marks) bool {
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
	c.queueMarks(hard, marks, orders, written)
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
