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

// publisher sends the orders of entries to RabbitMQ on a channel in
// confirm mode, up to perMessage of them in one message (package order: one
// order's object, or a JSON array of several; an entry's orders may be
// spread over messages), and settles each message by its confirm: confirmed
// (an entry all of whose orders are confirmed is handed to onConfirmed), or
// kept whole for another publish (nacked, returned as unroutable, or lost
// with the channel). The retry queue outlives sessions; the in-flight window is the
// current session's, in delivery-tag order (RabbitMQ may confirm out of
// order; the library hands the confirms over in order). It is owned by Run's
// goroutine; only its counters are read elsewhere (Stats).
type publisher struct {
	exchange    string
	window      int // orders in messages awaiting a confirm, at most
	perMessage  int // orders one message carries at most
	onConfirmed func(*entry)

	retry   []*message    // FIFO of messages to publish again
	retryBO retry.Backoff // spaces out the retries while RabbitMQ refuses

	// The current session's, between attach and detach.
	s           *broker.Session
	ch          *amqp.Channel
	confirms    chan amqp.Confirmation
	returns     chan amqp.Return
	inflight    []*message
	inflightLen int            // orders in inflight
	bounced     map[bounce]int // returns not yet matched with their confirm
	// A run of nacks with no ack between them: how many, since when.
	nackRun   int
	nackSince time.Time

	n publishCounts
}

// A channel whose every publish RabbitMQ nacks for nackReopenAfter, at
// least nackReopenRun of them, is given up for a new session. RabbitMQ 3.10
// nacks every publish of a channel opened while a quorum queue elects a new
// leader (its node killed), for as long as that node stays down, while a
// channel opened after the election is acked: a relay that reconnected
// faster than the election would otherwise retry on the refusing channel
// until the dead node came back (TestHARabbitNodeKill).
const (
	nackReopenAfter = time.Second
	nackReopenRun   = 3
)

// errNacking is the session error of a channel given up for its nacks.
var errNacking = errors.New("relay: RabbitMQ nacked every publish on this channel")

// message is one AMQP message: the orders it carries, as parts of entries
// in the order they were read, and its body. A message is published again
// whole.
type message struct {
	parts  []part
	orders int
	body   []byte
	tag    uint64    // delivery tag while in flight
	due    time.Time // earliest retry
}

// part is the orders from..to-1 of an entry.
type part struct {
	e        *entry
	from, to int
}

// publishCounts are the publisher's figures for Stats, safe for concurrent
// use. All but messages count orders (and changes of state).
type publishCounts struct {
	messages, published, confirmed, nacked, returned, lost atomic.Uint64
	inFlight                                               atomic.Int64
}

func newPublisher(exchange string, window, perMessage int, onConfirmed func(*entry)) *publisher {
	return &publisher{
		exchange:    exchange,
		window:      window,
		perMessage:  perMessage,
		onConfirmed: onConfirmed,
		retryBO:     retry.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
	}
}

// pack puts the orders of entries into messages of up to perMessage orders
// each, in their order, due at once.
func (p *publisher) pack(es []*entry) []*message {
	var ms []*message
	var cur *message
	for _, e := range es {
		for from := 0; from < len(e.bodies); {
			if cur == nil || cur.orders == p.perMessage {
				cur = &message{}
				ms = append(ms, cur)
			}
			to := min(len(e.bodies), from+p.perMessage-cur.orders)
			cur.parts = append(cur.parts, part{e, from, to})
			cur.orders += to - from
			from = to
		}
	}
	var bodies [][]byte
	for _, m := range ms {
		bodies = bodies[:0]
		size := m.orders + 1
		for _, pt := range m.parts {
			for _, b := range pt.e.bodies[pt.from:pt.to] {
				bodies = append(bodies, b)
				size += len(b)
			}
		}
		m.body = order.AppendBatch(make([]byte, 0, size), bodies...)
	}
	return ms
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
	p.nackRun = 0
	return nil
}

// bounce names one message in a return by its first order: the message id
// is that order's id, which an order's change of state shares with the
// order (two of its entries may be in flight at once), so the correlation
// id carries the stream id of the order's entry. A return drained before the
// confirm of an earlier publish of the same order must not be taken for
// that one's.
type bounce struct{ orderID, entry string }

func (m *message) bounce() bounce {
	first := m.parts[0]
	return bounce{first.e.orderIDs[first.from], first.e.id}
}

// detach lets the session go. What was in flight on it goes back to the
// front of the retry queue, due at once: those messages may or may not have
// reached RabbitMQ.
func (p *publisher) detach() {
	if len(p.inflight) > 0 {
		p.n.lost.Add(uint64(p.inflightLen))
		now := time.Now()
		for _, m := range p.inflight {
			m.due = now
		}
		// Before the others: they are older.
		q := make([]*message, 0, len(p.inflight)+len(p.retry))
		q = append(q, p.inflight...)
		p.retry = append(q, p.retry...)
		p.inflight, p.inflightLen = nil, 0
		p.n.inFlight.Store(0)
	}
	p.s, p.ch, p.confirms, p.returns, p.bounced = nil, nil, nil, nil, nil
}

// full reports whether the in-flight window is full.
func (p *publisher) full() bool { return p.inflightLen >= p.window }

// enqueue queues entries for a publish, due at once.
func (p *publisher) enqueue(es []*entry) { p.retry = append(p.retry, p.pack(es)...) }

// nextRetry returns when the oldest retry is due, and false when there is
// none or the window is full.
func (p *publisher) nextRetry() (time.Time, bool) {
	if len(p.retry) == 0 || p.full() {
		return time.Time{}, false
	}
	return p.retry[0].due, true
}

// sendDue publishes the retries that are due, oldest first, while the
// window is not full, and returns how many it sent. An error means the channel
// is unusable.
func (p *publisher) sendDue(now time.Time) (int, error) {
	n := 0
	for len(p.retry) > 0 && !p.full() {
		m := p.retry[0]
		if m.due.After(now) {
			break
		}
		p.retry[0] = nil
		p.retry = p.retry[1:]
		if err := p.send(m); err != nil {
			p.retry = append([]*message{m}, p.retry...)
			return n, err
		}
		n++
	}
	if len(p.retry) == 0 {
		p.retry = nil // let the backing array go
	}
	return n, nil
}

// sendAll publishes a batch just read, in messages of up to perMessage
// orders, while the window is not full. On an error (the channel is unusable) the messages not sent go
// to the retry queue.
func (p *publisher) sendAll(batch []*entry) error {
	ms := p.pack(batch)
	for i, m := range ms {
		if p.full() {
			// The rest waits in the retry queue, due at once, so that
			// no more messages are in flight than the confirm
			// buffers hold.
			p.retry = append(p.retry, ms[i:]...)
			return nil
		}
		if err := p.send(m); err != nil {
			p.retry = append(p.retry, ms[i:]...)
			return err
		}
	}
	return nil
}

// send publishes one message. An error means the channel is unusable.
func (p *publisher) send(m *message) error {
	m.tag = p.ch.GetNextPublishSeqNo()
	typ := order.TypeOrder
	if m.orders > 1 {
		typ = order.TypeBatch
	}
	b := m.bounce()
	ct := order.ContentType
	if order.IsLines(m.body) {
		ct = order.ContentTypeLines
	}
	err := p.ch.Publish(p.exchange, broker.RoutingKey, true, false, amqp.Publishing{
		ContentType:   ct,
		DeliveryMode:  amqp.Persistent,
		MessageId:     b.orderID,
		CorrelationId: b.entry, // the first order's entry, for matching a return (bounce)
		Timestamp:     time.Now(),
		Type:          typ,
		AppId:         "flashgate",
		Headers:       amqp.Table{order.CountHeader: int32(m.orders)},
		Body:          m.body,
	})
	if err != nil {
		return fmt.Errorf("relay: publish: %w", err)
	}
	p.inflight = append(p.inflight, m)
	p.inflightLen += m.orders
	p.n.inFlight.Store(int64(p.inflightLen))
	p.n.messages.Add(1)
	p.n.published.Add(uint64(m.orders))
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
		case ret, open := <-p.returns:
			if !open {
				// The library closes it when the channel shuts down,
				// while confirms it had received may still wait: a
				// closed channel is always ready, so only this ends the
				// loop (it spun for ever under a RabbitMQ restart).
				break returns
			}
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
	m := p.inflight[0]
	p.inflight[0] = nil
	p.inflight = p.inflight[1:]
	p.inflightLen -= m.orders
	p.n.inFlight.Store(int64(p.inflightLen))
	n := uint64(m.orders)
	switch k := m.bounce(); {
	case !c.Ack:
		p.n.nacked.Add(n)
		p.retryLater(m)
		now := time.Now()
		if p.nackRun == 0 {
			p.nackSince = now
		}
		if p.nackRun++; p.nackRun >= nackReopenRun && now.Sub(p.nackSince) >= nackReopenAfter {
			return fmt.Errorf("%w for %v (%d messages): opening a new session", errNacking,
				now.Sub(p.nackSince).Round(time.Millisecond), p.nackRun)
		}
	case p.bounced[k] > 0:
		if p.bounced[k]--; p.bounced[k] == 0 {
			delete(p.bounced, k)
		}
		p.n.returned.Add(n)
		p.retryLater(m)
	default:
		p.nackRun = 0
		p.n.confirmed.Add(n)
		p.retryBO.Reset()
		p.s.Served()
		for _, pt := range m.parts {
			if pt.e.unconfirmed -= pt.to - pt.from; pt.e.unconfirmed == 0 {
				p.onConfirmed(pt.e)
			}
		}
	}
	return nil
}

// retryLater queues m for another publish after a growing delay, so that a
// broker that keeps refusing (a missing binding) is not hammered.
func (p *publisher) retryLater(m *message) {
	m.due = time.Now().Add(p.retryBO.Next())
	p.retry = append(p.retry, m)
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
// orders are still unconfirmed.
func (p *publisher) drain(deadline <-chan time.Time) (int, error) {
	for len(p.inflight) > 0 {
		select {
		case c, ok := <-p.confirms:
			if err := p.settle(c, ok); err != nil {
				return p.inflightLen, err
			}
		case <-p.s.Done():
			return p.inflightLen, p.sessionErr()
		case <-deadline:
			return p.inflightLen, nil
		}
	}
	return 0, nil
}
