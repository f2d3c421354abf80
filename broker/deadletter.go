package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/config"
)

// The dead-letter queue read back: Browse looks at its messages and puts
// them back; Requeue moves them to the orders exchange. Both work on a
// connection of their own, closed before they return.

// ReasonHeader is the header in which a consumer says why it dead-lettered
// one order of a batch alone (the broker's x-death says the rest).
const ReasonHeader = "x-flashgate-reason"

// MaxScan bounds the messages one Browse or Requeue reads: a larger
// dead-letter queue takes several runs.
const MaxScan = 50000

// ErrUnconfirmed is wrapped by Requeue's error when the broker refused a
// publish (nack, or unroutable: the orders queue is missing or full); the
// dead letter stays where it was.
var ErrUnconfirmed = errors.New("the broker did not confirm the publish")

// Dead is one message of the dead-letter queue.
type Dead struct {
	Delivery amqp.Delivery
	// Reason is why it was dead-lettered: the consumer's own reason
	// (ReasonHeader) for an order dead-lettered alone, else the broker's
	// ("rejected": a consumer found it malformed; "delivery_limit": it
	// came back too often), else "unknown".
	Reason string
	// At is when it was dead-lettered, zero when the message does not say.
	At time.Time
}

// Classify returns the reason and the time of dead-lettering d's headers
// and timestamp say.
func Classify(d amqp.Delivery) Dead {
	dead := Dead{Delivery: d, Reason: "unknown"}
	if r, ok := d.Headers[ReasonHeader].(string); ok && r != "" {
		dead.Reason = r
		dead.At = d.Timestamp
		return dead
	}
	if r, ok := d.Headers["x-first-death-reason"].(string); ok && r != "" {
		dead.Reason = r
	}
	if deaths, ok := d.Headers["x-death"].([]any); ok {
		for _, x := range deaths {
			t, ok := x.(amqp.Table)
			if !ok {
				continue
			}
			if at, ok := t["time"].(time.Time); ok && (dead.At.IsZero() || at.Before(dead.At)) {
				dead.At = at
			}
			if dead.Reason == "unknown" {
				if r, ok := t["reason"].(string); ok && r != "" {
					dead.Reason = r
				}
			}
		}
	}
	if dead.At.IsZero() {
		dead.At = d.Timestamp
	}
	return dead
}

// Matches reports whether a reason is selected by filter: every reason by
// "", else those that contain filter.
func Matches(reason, filter string) bool {
	return filter == "" || strings.Contains(reason, filter)
}

// deadReader is a connection with a channel consuming the dead-letter
// queue without auto-ack, at most n messages unacknowledged.
type deadReader struct {
	sess       *Session
	conn       *amqp.Connection
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	ready      int // the queue's ready messages when the reader started
	stop       func() bool
}

// openDeadReader dials, declares the topology and consumes the dead-letter
// queue with a prefetch of min(its ready messages, limit, MaxScan). When
// ctx ends the connection is closed, which unblocks every call on it.
func openDeadReader(ctx context.Context, c config.AMQP, name string, limit int) (*deadReader, error) {
	s, err := Open(ctx, c, name)
	if err != nil {
		return nil, err
	}
	r := &deadReader{sess: s, conn: s.Conn, ch: s.Channel}
	r.stop = context.AfterFunc(ctx, func() { _ = s.Close() })
	q, err := r.ch.QueueDeclarePassive(DeadLetter(c.Queue), true, false, false, false, nil)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("broker: queue %s: %w", DeadLetter(c.Queue), err)
	}
	r.ready = q.Messages
	n := min(q.Messages, limit, MaxScan)
	if n == 0 {
		return r, nil
	}
	if err := r.ch.Qos(n, 0, false); err != nil {
		r.close()
		return nil, fmt.Errorf("broker: qos: %w", err)
	}
	r.deliveries, err = r.ch.Consume(DeadLetter(c.Queue), name, false, false, false, false, nil)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("broker: consume %s: %w", DeadLetter(c.Queue), err)
	}
	return r, nil
}

// next returns the next delivery, or an error when ctx ends or the channel
// closes first.
func (r *deadReader) next(ctx context.Context) (amqp.Delivery, error) {
	select {
	case d, ok := <-r.deliveries:
		if !ok {
			if ctx.Err() != nil {
				return amqp.Delivery{}, ctx.Err()
			}
			return amqp.Delivery{}, fmt.Errorf("broker: the dead-letter queue's channel closed: %w", amqp.ErrClosed)
		}
		return d, nil
	case <-ctx.Done():
		return amqp.Delivery{}, ctx.Err()
	}
}

// close closes the connection: every message delivered and not acknowledged
// goes back to the dead-letter queue.
func (r *deadReader) close() {
	r.stop()
	_ = r.sess.Close()
}

// Browse returns the dead-letter queue's ready messages (at most limit of
// them, and MaxScan) and the count of its ready messages, and puts them
// all back: they stay in the queue, marked redelivered. It blocks until it
// has read them, ctx ends or the connection fails. name shows in RabbitMQ's
// connection list.
func Browse(ctx context.Context, c config.AMQP, name string, limit int) ([]Dead, int, error) {
	r, err := openDeadReader(ctx, c, name, limit)
	if err != nil {
		return nil, 0, err
	}
	defer r.close()
	n := min(r.ready, limit, MaxScan)
	out := make([]Dead, 0, n)
	for len(out) < n {
		d, err := r.next(ctx)
		if err != nil {
			return nil, r.ready, err
		}
		out = append(out, Classify(d))
	}
	if n > 0 {
		// Back at once rather than with the connection's close, so that
		// nothing waits on the close handshake for them.
		_ = r.ch.Nack(out[n-1].Delivery.DeliveryTag, true, true)
	}
	return out, r.ready, nil
}

// RequeueResult says what a Requeue did.
type RequeueResult struct {
	// Scanned counts the dead letters read, Moved those published to the
	// orders exchange, confirmed and then removed from the dead-letter
	// queue. Left counts the ready messages the queue had at the start
	// that this run did not move (not matching, beyond limit, or not reached).
	Scanned, Moved, Left int
}

// RequeueOptions says which dead letters Requeue moves, and what it tells
// on the way.
type RequeueOptions struct {
	// Reason selects the messages whose reason contains it (Matches);
	// "": all.
	Reason string
	// Max bounds the messages moved.
	Max int
	// OnConfirmed, when not nil, is called once a message's publish is
	// confirmed and before its dead letter is acknowledged; OnMoved after
	// it is acknowledged. Both run on Requeue's goroutine and must return
	// promptly.
	OnConfirmed, OnMoved func(RequeueResult)
}

// Requeue moves the dead-letter queue's messages whose reason Matches
// o.Reason, at most o.Max of them, back to the orders exchange (routing key
// RoutingKey), each as it was, less the headers of its dead-lettering. It
// reads the messages that were ready when it started, and no more (so a
// message that fails again is not moved twice in one run).
//
// Each move is publish (persistent, mandatory), wait for the broker's
// confirm, then ack the dead letter: an interruption at any point loses
// nothing (what was not acknowledged goes back to the dead-letter queue)
// and at worst puts one order on the orders queue while it is also still a
// dead letter, which the consumer's idempotent write makes harmless.
//
// It blocks until done, ctx ends or the connection fails, and returns the
// result so far with any error: ctx's, a connection's, or one wrapping
// ErrUnconfirmed.
func Requeue(ctx context.Context, c config.AMQP, name string, o RequeueOptions) (RequeueResult, error) {
	filter, limit := o.Reason, o.Max
	var res RequeueResult
	// Skipped messages stay unacknowledged until the end, so the reader
	// must be able to hold every message it scans.
	r, err := openDeadReader(ctx, c, name, MaxScan)
	if err != nil {
		return res, err
	}
	defer r.close()
	scan := min(r.ready, MaxScan)
	res.Left = r.ready
	if scan == 0 || limit <= 0 {
		return res, nil
	}
	pub, err := r.conn.Channel()
	if err != nil {
		return res, fmt.Errorf("broker: open channel: %w", err)
	}
	if err := pub.Confirm(false); err != nil {
		return res, fmt.Errorf("broker: confirm mode: %w", err)
	}
	// One publish is in flight at a time and its return, if any, comes
	// before its confirm: one slot is enough.
	returns := pub.NotifyReturn(make(chan amqp.Return, 1))
	for res.Scanned < scan && res.Moved < limit {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		d, err := r.next(ctx)
		if err != nil {
			return res, err
		}
		res.Scanned++
		if !Matches(Classify(d).Reason, filter) {
			continue
		}
		if err := publishBack(ctx, pub, returns, c.Exchange, d); err != nil {
			return res, err
		}
		if o.OnConfirmed != nil {
			o.OnConfirmed(res)
		}
		if err := d.Ack(false); err != nil {
			// Published and confirmed, still a dead letter: a later run
			// moves it again, harmlessly.
			return res, fmt.Errorf("broker: ack dead letter after its requeue: %w", err)
		}
		res.Moved++
		res.Left--
		if o.OnMoved != nil {
			o.OnMoved(res)
		}
	}
	return res, nil
}

// deathHeaders are the headers of a dead-lettering, which a message moved
// back should not carry into its next life.
var deathHeaders = []string{"x-death", "x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
	"x-last-death-reason", "x-last-death-queue", "x-last-death-exchange", "x-delivery-count", ReasonHeader}

// publishBack publishes d to exchange as it was and waits for the confirm.
func publishBack(ctx context.Context, pub *amqp.Channel, returns <-chan amqp.Return, exchange string, d amqp.Delivery) error {
	headers := amqp.Table{}
	for k, v := range d.Headers {
		headers[k] = v
	}
	for _, k := range deathHeaders {
		delete(headers, k)
	}
	dc, err := pub.PublishWithDeferredConfirmWithContext(ctx, exchange, RoutingKey, true, false, amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	})
	if err != nil {
		return fmt.Errorf("broker: publish to %s: %w", exchange, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("broker: wait for the confirm: %w", err)
	}
	select {
	case rt, ok := <-returns:
		if ok {
			return fmt.Errorf("broker: %w: %s returned it as unroutable: %d %s", ErrUnconfirmed, exchange, rt.ReplyCode, rt.ReplyText)
		}
	default:
	}
	if !acked {
		return fmt.Errorf("broker: %w: %s nacked it (is the orders queue full?)", ErrUnconfirmed, exchange)
	}
	return nil
}
