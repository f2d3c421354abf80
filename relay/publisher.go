package relay

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/retry"
)

// publisher sends entries to RabbitMQ on a channel in confirm mode and
// settles each by its confirm: confirmed (handed to onConfirmed), or kept
// for another publish (nacked, returned as unroutable, or lost with the
// channel). The retry queue outlives sessions; the in-flight window is the
// current session's, in delivery-tag order (RabbitMQ may confirm out of
// order; the library hands the confirms over in order). It is owned by Run's
// goroutine; only its counters are read elsewhere (Stats).
type publisher struct {
	exchange    string
	window      int // publishes awaiting a confirm at most
	onConfirmed func(*entry)

	retry   []*entry      // FIFO of entries to publish again
	retryBO retry.Backoff // spaces out the retries while RabbitMQ refuses

	// The current session's, between attach and detach.
	s        *broker.Session
	ch       *amqp.Channel
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
	inflight []*entry
	bounced  map[bounce]int // returns not yet matched with their confirm

	n publishCounts
}

// publishCounts are the publisher's figures for Stats, safe for concurrent
// use.
type publishCounts struct {
	published, confirmed, nacked, returned, lost atomic.Uint64
	inFlight                                     atomic.Int64
}

func newPublisher(exchange string, window int, onConfirmed func(*entry)) *publisher {
	return &publisher{
		exchange:    exchange,
		window:      window,
		onConfirmed: onConfirmed,
		retryBO:     retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
	}
}

// attach puts the session's channel in confirm mode and publishes on it
// from now on.
func (p *publisher) attach(s *broker.Session) error {
	ch := s.Channel
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("relay: confirm mode: %w", err)
	}
	p.s, p.ch = s, ch
	// Buffers as large as what can be outstanding, so the library's reader
	// never blocks on us (which would stall confirms and heartbeats).
	p.confirms = ch.NotifyPublish(make(chan amqp.Confirmation, p.window))
	p.returns = ch.NotifyReturn(make(chan amqp.Return, p.window))
	p.bounced = map[bounce]int{}
	return nil
}

// bounce names one outbox entry in a return: the message id is the order
// id, which an order's change of state shares with the order (two of its
// entries may be in flight at once), so the correlation id carries the
// entry's stream id. A return drained before the confirm of an earlier
// publish of the same order must not be taken for that one's.
type bounce struct{ orderID, entry string }

// detach lets the session go. What was in flight on it goes back to the
// front of the retry queue, due at once: those messages may or may not have
// reached RabbitMQ.
func (p *publisher) detach() {
	if len(p.inflight) > 0 {
		p.n.lost.Add(uint64(len(p.inflight)))
		now := time.Now()
		for _, e := range p.inflight {
			e.due = now
		}
		// Before the others: they are older.
		q := make([]*entry, 0, len(p.inflight)+len(p.retry))
		q = append(q, p.inflight...)
		p.retry = append(q, p.retry...)
		p.inflight = nil
		p.n.inFlight.Store(0)
	}
	p.s, p.ch, p.confirms, p.returns, p.bounced = nil, nil, nil, nil, nil
}

// full reports whether the in-flight window is full.
func (p *publisher) full() bool { return len(p.inflight) >= p.window }

// enqueue queues entries for a publish once they are due.
func (p *publisher) enqueue(es []*entry) { p.retry = append(p.retry, es...) }

// nextRetry returns when the oldest retry is due, and false when there is
// none or the window has no room for it.
func (p *publisher) nextRetry() (time.Time, bool) {
	if len(p.retry) == 0 || p.full() {
		return time.Time{}, false
	}
	return p.retry[0].due, true
}

// sendDue publishes the retries that are due, oldest first, while the
// window has room, and returns how many it sent. An error means the channel
// is unusable.
func (p *publisher) sendDue(now time.Time) (int, error) {
	n := 0
	for len(p.retry) > 0 && !p.full() {
		e := p.retry[0]
		if e.due.After(now) {
			break
		}
		p.retry[0] = nil
		p.retry = p.retry[1:]
		if err := p.send(e); err != nil {
			p.retry = append([]*entry{e}, p.retry...)
			return n, err
		}
		n++
	}
	if len(p.retry) == 0 {
		p.retry = nil // let the backing array go
	}
	return n, nil
}

// sendAll publishes a batch just read. On an error (the channel is
// unusable) the entries not sent go to the retry queue.
func (p *publisher) sendAll(batch []*entry) error {
	for i, e := range batch {
		if err := p.send(e); err != nil {
			p.retry = append(p.retry, batch[i:]...)
			return err
		}
	}
	return nil
}

// send publishes one entry. An error means the channel is unusable.
func (p *publisher) send(e *entry) error {
	e.tag = p.ch.GetNextPublishSeqNo()
	err := p.ch.Publish(p.exchange, broker.RoutingKey, true, false, amqp.Publishing{
		ContentType:   order.ContentType,
		DeliveryMode:  amqp.Persistent,
		MessageId:     e.orderID,
		CorrelationId: e.id, // the entry, for matching a return (bounce)
		Timestamp:     time.Now(),
		Type:          "order",
		AppId:         "flashgate",
		Body:          e.body,
	})
	if err != nil {
		return fmt.Errorf("relay: publish: %w", err)
	}
	p.inflight = append(p.inflight, e)
	p.n.inFlight.Store(int64(len(p.inflight)))
	p.n.published.Add(1)
	return nil
}

// settleReady settles every confirm already received, without blocking.
func (p *publisher) settleReady() error {
	for {
		select {
		case c, ok := <-p.confirms:
			if err := p.settle(c, ok); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// settle handles one receive from p.confirms (ok false: it was closed): it
// settles the oldest publish in flight. RabbitMQ sends the basic.return of
// an unroutable mandatory message before its basic.ack, and the library
// hands them over in that order, so every return of this publish is
// already in p.returns. A confirm tells the session loop that its session
// served (its reconnect backoff starts over).
func (p *publisher) settle(c amqp.Confirmation, ok bool) error {
	if !ok {
		return p.sessionErr()
	}
returns:
	for {
		select {
		case ret := <-p.returns:
			p.bounced[bounce{ret.MessageId, ret.CorrelationId}]++
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
	p.n.inFlight.Store(int64(len(p.inflight)))
	switch {
	case !c.Ack:
		p.n.nacked.Add(1)
		p.retryLater(e)
	case p.bounced[bounce{e.orderID, e.id}] > 0:
		k := bounce{e.orderID, e.id}
		if p.bounced[k]--; p.bounced[k] == 0 {
			delete(p.bounced, k)
		}
		p.n.returned.Add(1)
		p.retryLater(e)
	default:
		p.n.confirmed.Add(1)
		p.retryBO.Reset()
		p.s.Served()
		p.onConfirmed(e)
	}
	return nil
}

// retryLater queues e for another publish after a growing delay, so that a
// broker that keeps refusing (a missing binding) is not hammered.
func (p *publisher) retryLater(e *entry) {
	e.due = time.Now().Add(p.retryBO.Next())
	p.retry = append(p.retry, e)
}

// sessionErr says why the session's confirms stopped.
func (p *publisher) sessionErr() error {
	select {
	case <-p.s.Done():
		if err := p.s.Err(); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
	default:
	}
	return errors.New("relay: channel closed")
}

// drain waits for the confirms of what is in flight until none is left,
// the session ends (its error) or deadline fires; it returns how many
// publishes are still unconfirmed.
func (p *publisher) drain(deadline <-chan time.Time) (int, error) {
	for len(p.inflight) > 0 {
		select {
		case c, ok := <-p.confirms:
			if err := p.settle(c, ok); err != nil {
				return len(p.inflight), err
			}
		case <-p.s.Done():
			return len(p.inflight), p.sessionErr()
		case <-deadline:
			return len(p.inflight), nil
		}
	}
	return 0, nil
}
