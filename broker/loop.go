package broker

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/retry"
)

// Loop keeps one Session open for as long as its context lasts: it opens a
// session, hands it to a serve function, and when the session ends (or
// cannot be opened) waits a backoff delay and opens the next. It is the one
// reconnect loop of every RabbitMQ client in flashgate (relay, consumer).
//
// With a list of nodes in AMQP.URL, each attempt tries them in turn and
// counts as one attempt however many nodes it tried: it starts at the node
// of the last session, unless that session lost its connection (the node
// or the network to it went away) or the node failed to connect, in which
// case it starts at the node after. The log names the node of each session.
//
// Set the fields before Run; the counters are safe for concurrent use.
type Loop struct {
	AMQP config.AMQP
	// Name shows in RabbitMQ's connection list.
	Name string
	Log  *zap.Logger // nil: no logs
	// Backoff paces the attempts; its zero value is 100ms to 5s. It starts
	// over after a session that served (see Session.Served).
	Backoff retry.Backoff
	// Lost says, in the log line of an ended session, what becomes of the
	// work it held ("entries in flight will be published again").
	Lost string
	// Pause, when set, waits d between attempts instead of retry.Sleep,
	// for a client that has work to do while RabbitMQ is away. It must
	// return by the time d has passed or ctx has ended.
	Pause func(ctx context.Context, d time.Duration)

	connected  atomic.Bool
	reconnects atomic.Uint64
	failures   atomic.Uint64
}

// Run opens sessions and calls serve on each until ctx ends, then returns.
// serve owns the session while it runs and returns when the session broke
// (its error is logged) or ctx ended; Run closes the session after it.
func (l *Loop) Run(ctx context.Context, serve func(ctx context.Context, s *Session) error) {
	log := l.Log
	if log == nil {
		log = zap.NewNop()
	}
	pause := l.Pause
	if pause == nil {
		pause = func(ctx context.Context, d time.Duration) { retry.Sleep(ctx, d) }
	}
	bo := l.Backoff
	nodes := newRing(l.AMQP)
	sessions := 0
	for ctx.Err() == nil {
		s, err := open(ctx, l.AMQP, l.Name, nodes)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.failures.Add(1)
			d := bo.Next()
			log.Warn("cannot connect to RabbitMQ", zap.Error(err), zap.Duration("retry_in", d))
			pause(ctx, d)
			continue
		}
		if s.Warning != "" {
			log.Warn(s.Warning)
		}
		if sessions++; sessions > 1 {
			l.reconnects.Add(1)
			log.Info("reconnected to RabbitMQ", zap.String("node", s.Node))
		} else {
			log.Info("connected to RabbitMQ", zap.String("node", s.Node))
		}
		l.connected.Store(true)
		err = serve(ctx, s)
		l.connected.Store(false)
		// Closed before Close: not by flashgate, so the node (or the way
		// to it) failed, and it is the last to try next time. A session
		// ended otherwise (a channel error, serve's own reasons) leaves
		// the node first.
		if s.Conn.IsClosed() {
			nodes.failed(s.node)
		}
		_ = s.Close()
		if s.served.Load() {
			bo.Reset()
		}
		if ctx.Err() != nil {
			return
		}
		d := bo.Next()
		log.Warn("RabbitMQ session ended; "+l.Lost, zap.Error(err), zap.Duration("retry_in", d))
		pause(ctx, d)
	}
}

// Connected reports whether a session is open now.
func (l *Loop) Connected() bool { return l.connected.Load() }

// Reconnects counts the sessions opened after the first.
func (l *Loop) Reconnects() uint64 { return l.reconnects.Load() }

// Failures counts the attempts to open a session that failed.
func (l *Loop) Failures() uint64 { return l.failures.Load() }

// CloseAfter closes s once ctx has ended and grace has passed since, unless
// the returned stop is called first (stop then waits for nothing: it is
// context.AfterFunc's stop). It is the watchdog for a client blocked on the
// session (a publish stuck under a memory alarm, a write past the shutdown
// deadline) that cannot see ctx itself.
func CloseAfter(ctx context.Context, grace time.Duration, s *Session) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-s.Done():
		case <-t.C:
			_ = s.Close()
		}
	})
}
