// Package broker is flashgate's RabbitMQ connection: dialling, the topology
// both the relay and the consumer declare, the one reconnect loop (Loop)
// they both run their sessions in, and the dead-letter queue read back
// (Browse, Requeue) for `flashgate dlq`.
//
// amqp.url may list the nodes of one RabbitMQ cluster (config.AMQP.Nodes).
// Every connect tries them in turn until one answers: Open, QueueDepth,
// Browse and Requeue from the first node; Loop from the node it last
// reached, or the one after the node that last failed it (see ring).
//
// The topology, declared idempotently by every process that connects:
//
//	exchange EXCHANGE (direct, durable)
//	  └─ routing key "order" ─► queue QUEUE (quorum, durable,
//	                              x-delivery-limit, dead-letter to EXCHANGE.dead)
//	exchange EXCHANGE.dead (fanout, durable) ─► queue QUEUE.dead (quorum, durable)
//
// A message lands in QUEUE.dead when a consumer rejects it as malformed or
// when it has been delivered more than the delivery limit allows. Dead
// lettering is at-least-once (x-dead-letter-strategy), so a message cannot
// vanish between the two queues.
//
// There is no automatic recovery inside a Session: when its channel or
// connection closes, Done says so and Loop opens a new Session after a
// backoff delay. The relay and the consumer each need to know exactly which
// publishes and deliveries a closed channel took with it, which library-level
// recovery would hide.
package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/flashgate/flashgate/config"
)

// RoutingKey is the routing key of order messages.
const RoutingKey = "order"

// handshake bounds the TCP connect and AMQP handshake of one Dial.
const handshake = 10 * time.Second

// closeWait bounds the close handshake of Session.Close.
const closeWait = 2 * time.Second

// heartbeat lets both ends notice a dead peer even when no traffic flows.
const heartbeat = 5 * time.Second

// DeadLetter returns the name of the dead-letter exchange or queue that goes
// with an exchange or queue name.
func DeadLetter(name string) string { return name + ".dead" }

// QueueArgs returns the arguments of the order queue. Declaring a queue of
// the same name with other arguments fails (PRECONDITION_FAILED).
func QueueArgs(c config.AMQP) amqp.Table {
	return amqp.Table{
		amqp.QueueTypeArg:        amqp.QueueTypeQuorum,
		"x-delivery-limit":       c.DeliveryLimit,
		"x-dead-letter-exchange": DeadLetter(c.Exchange),
		// at-least-once dead lettering needs reject-publish overflow; no
		// length limit is set, so it never rejects a publish by itself.
		"x-dead-letter-strategy": "at-least-once",
		amqp.QueueOverflowArg:    amqp.QueueOverflowRejectPublish,
	}
}

// Declare declares the whole topology on ch, blocking for one round trip per
// exchange, queue and binding. It is idempotent. It fails (and RabbitMQ
// closes ch) when an exchange or queue of the same name exists with other
// arguments: changing amqp.delivery_limit on a live queue takes a policy or
// a new queue, not a restart.
func Declare(ch *amqp.Channel, c config.AMQP) error {
	dead := DeadLetter(c.Exchange)
	if err := ch.ExchangeDeclare(dead, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("broker: declare exchange %s: %w", dead, err)
	}
	deadQ := DeadLetter(c.Queue)
	if _, err := ch.QueueDeclare(deadQ, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		return fmt.Errorf("broker: declare queue %s: %w", deadQ, err)
	}
	if err := ch.QueueBind(deadQ, "", dead, false, nil); err != nil {
		return fmt.Errorf("broker: bind %s to %s: %w", deadQ, dead, err)
	}
	if err := ch.ExchangeDeclare(c.Exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("broker: declare exchange %s: %w", c.Exchange, err)
	}
	if _, err := ch.QueueDeclare(c.Queue, true, false, false, false, QueueArgs(c)); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
			return fmt.Errorf("broker: declare queue %s: %w: %w", c.Queue, ErrQueueArgs, err)
		}
		return fmt.Errorf("broker: declare queue %s: %w", c.Queue, err)
	}
	return bind(ch, c)
}

// ErrQueueArgs is wrapped by Declare's error when the orders queue exists
// with other arguments (say, an older amqp.delivery_limit). RabbitMQ cannot
// change them in place: Open then uses the queue as it is.
var ErrQueueArgs = errors.New("the queue exists with other arguments")

func bind(ch *amqp.Channel, c config.AMQP) error {
	if err := ch.QueueBind(c.Queue, RoutingKey, c.Exchange, false, nil); err != nil {
		return fmt.Errorf("broker: bind %s to %s: %w", c.Queue, c.Exchange, err)
	}
	return nil
}

// Dial connects to url, one node's URL, and completes the AMQP handshake,
// bounded by ctx and by a handshake timeout. name shows in RabbitMQ's
// connection list.
func Dial(ctx context.Context, url, name string) (*amqp.Connection, error) {
	deadline := time.Now().Add(handshake)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat:  heartbeat,
		Locale:     "en_US",
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Deadline: deadline}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Cleared by the library once the handshake is done.
			if err := c.SetDeadline(deadline); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("broker: dial: %w", err)
	}
	return conn, nil
}

// Session is one connection with one channel on which the topology has been
// declared. Its channel is as safe for concurrent use as amqp.Channel is;
// Close, Done and Err are safe for concurrent use.
type Session struct {
	Conn    *amqp.Connection
	Channel *amqp.Channel
	// Node is the URL of the node the session is connected to, its
	// password masked: for logs.
	Node string
	// Warning, when not empty, is something the operator should know about
	// the topology found (a queue with other arguments than configured).
	Warning string

	node      int // Node's index in amqp.url's list
	done      chan struct{}
	served    atomic.Bool
	closeOnce sync.Once
	errMu     sync.Mutex
	err       error
}

// Open dials, opens a channel and declares the topology, blocking until done
// or ctx ends. With a list of nodes it tries each in turn, from the first,
// until one of them does all three. On failure it closes whatever it had
// opened and returns a wrapped error (with a list, one naming every node
// tried); it never leaves a connection behind.
func Open(ctx context.Context, c config.AMQP, name string) (*Session, error) {
	return open(ctx, c, name, newRing(c))
}

// open is Open through the nodes of r, from its start.
func open(ctx context.Context, c config.AMQP, name string, r *ring) (*Session, error) {
	var s *Session
	i, err := r.round(ctx, func(node string) error {
		var err error
		s, err = openNode(ctx, c, node, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.Node, s.node = config.MaskURL(r.nodes[i]), i
	return s, nil
}

// openNode is Open on one node.
func openNode(ctx context.Context, c config.AMQP, node, name string) (*Session, error) {
	conn, err := Dial(ctx, node, name)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(closeWait))
		return nil, fmt.Errorf("broker: open channel: %w", err)
	}
	if err := Declare(ch, c); err != nil {
		if !errors.Is(err, ErrQueueArgs) {
			_ = conn.CloseDeadline(time.Now().Add(closeWait))
			return nil, err
		}
		// The refusal closed the channel. The queue is there, durable and
		// dead-lettering (its arguments differ, not its purpose): use it,
		// and say so — a policy or a new queue name applies new arguments.
		if ch, err = useExisting(conn, c); err != nil {
			_ = conn.CloseDeadline(time.Now().Add(closeWait))
			return nil, err
		}
		s := newSession(conn, ch)
		s.Warning = fmt.Sprintf("queue %s exists with other arguments than the settings ask for "+
			"(amqp.delivery_limit %d); using it as it is. To change them, apply a RabbitMQ policy or use a new amqp.queue",
			c.Queue, c.DeliveryLimit)
		return s, nil
	}
	return newSession(conn, ch), nil
}

// useExisting opens a channel on which the orders queue is checked to exist
// (passively) and bound.
func useExisting(conn *amqp.Connection, c config.AMQP) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("broker: open channel: %w", err)
	}
	if _, err := ch.QueueDeclarePassive(c.Queue, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("broker: queue %s: %w", c.Queue, err)
	}
	if err := bind(ch, c); err != nil {
		return nil, err
	}
	return ch, nil
}

func newSession(conn *amqp.Connection, ch *amqp.Channel) *Session {
	s := &Session{Conn: conn, Channel: ch, done: make(chan struct{})}
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		// Ends when either closes, which Close guarantees.
		var e *amqp.Error
		select {
		case e = <-connClosed:
		case e = <-chClosed:
		}
		s.errMu.Lock()
		if e != nil {
			s.err = e
		} else {
			s.err = amqp.ErrClosed
		}
		s.errMu.Unlock()
		close(s.done)
	}()
	return s
}

// Served records that the session did useful work (a confirm, a committed
// batch), so that Loop starts its backoff over once the session ends. It is
// safe for concurrent use.
func (s *Session) Served() { s.served.Store(true) }

// Done is closed when the channel or the connection has closed, for any
// reason, Close included.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended, once Done is closed; nil before.
func (s *Session) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close closes the connection (and with it the channel), waiting a bounded
// time for RabbitMQ to answer. It is safe to call more than once and from any
// goroutine; it returns once Done is closed.
func (s *Session) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.Conn.CloseDeadline(time.Now().Add(closeWait))
		if errors.Is(err, amqp.ErrClosed) {
			err = nil
		}
	})
	<-s.done
	return err
}

// Depth is what a passive declare tells of the orders queue.
type Depth struct {
	// Ready counts the messages waiting for a consumer; those delivered and
	// not yet acknowledged are not among them.
	Ready int
	// Consumers counts the subscriptions on the queue.
	Consumers int
}

// QueueDepth returns the orders queue's Depth (passive declare). It opens a
// connection of its own (to the first node of a list that answers) and
// closes it, bounded by ctx.
func QueueDepth(ctx context.Context, c config.AMQP, name string) (Depth, error) {
	var conn *amqp.Connection
	_, err := newRing(c).round(ctx, func(node string) error {
		var err error
		conn, err = Dial(ctx, node, name)
		return err
	})
	if err != nil {
		return Depth{}, err
	}
	// Closing unblocks the calls below when ctx ends; a failed close
	// leaves nothing to do.
	closeConn := func() { _ = conn.CloseDeadline(time.Now().Add(closeWait)) }
	defer closeConn()
	stop := context.AfterFunc(ctx, closeConn)
	defer stop()
	ch, err := conn.Channel()
	if err != nil {
		return Depth{}, fmt.Errorf("broker: open channel: %w", err)
	}
	q, err := ch.QueueDeclarePassive(c.Queue, true, false, false, false, nil)
	if err != nil {
		return Depth{}, fmt.Errorf("broker: queue %s: %w", c.Queue, err)
	}
	return Depth{Ready: q.Messages, Consumers: q.Consumers}, nil
}
