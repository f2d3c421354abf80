package broker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/retry"
)

// pauses records the delays Loop asks its Pause hook for.
type pauses struct {
	mu sync.Mutex
	d  []time.Duration
}

func (p *pauses) pause(ctx context.Context, d time.Duration) {
	p.mu.Lock()
	p.d = append(p.d, d)
	p.mu.Unlock()
	retry.Sleep(ctx, d)
}

func (p *pauses) all() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.d...)
}

// runLoop runs l until ctx ends, bounded in time.
func runLoop(t *testing.T, ctx context.Context, l *broker.Loop, serve func(ctx context.Context, s *broker.Session) error) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, serve)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Loop.Run did not return")
	}
}

// A session that ends is replaced by a new one after a backoff delay that
// grows while sessions end without serving and starts over after one that
// served; Run closes each session after its serve, and returns once ctx
// ends.
func TestLoopReconnectsAndBacksOff(t *testing.T) {
	c := testAMQP(t)
	core, logs := observer.New(zap.InfoLevel)
	p := &pauses{}
	l := &broker.Loop{AMQP: c, Name: "loop test", Log: zap.New(core), Lost: "the test's work goes back",
		Backoff: retry.Backoff{Min: 20 * time.Millisecond, Max: time.Second}, Pause: p.pause}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sessions []*broker.Session
	runLoop(t, ctx, l, func(ctx context.Context, s *broker.Session) error {
		if !l.Connected() {
			t.Error("Connected is false while a session serves")
		}
		for _, old := range sessions {
			select {
			case <-old.Done():
			default:
				t.Error("an ended session was not closed before the next")
			}
		}
		sessions = append(sessions, s)
		switch len(sessions) {
		case 1, 2, 3:
			return errors.New("broke before serving")
		case 4:
			s.Served()
			return errors.New("broke after serving")
		}
		cancel()
		<-ctx.Done()
		return nil
	})
	// Equal jitter: each delay is in the upper half of its step.
	steps := []time.Duration{20, 40, 80, 20} // ms; the last after a session that served
	got := p.all()
	if len(got) != len(steps) {
		t.Fatalf("pauses %v, want %d", got, len(steps))
	}
	for i, step := range steps {
		if step *= time.Millisecond; got[i] < step/2 || got[i] > step {
			t.Errorf("pause %d: %v, want within [%v, %v]", i, got[i], step/2, step)
		}
	}
	if l.Connected() || l.Reconnects() != 4 || l.Failures() != 0 {
		t.Errorf("connected %v, reconnects %d, failures %d; want false, 4, 0", l.Connected(), l.Reconnects(), l.Failures())
	}
	select {
	case <-sessions[len(sessions)-1].Done():
	default:
		t.Error("the last session is open after Run returned")
	}
	if n := logs.FilterMessage("RabbitMQ session ended; the test's work goes back").Len(); n != 4 {
		t.Errorf("%d session-ended lines, want 4", n)
	}
	if n := logs.FilterMessage("reconnected to RabbitMQ").Len(); n != 4 {
		t.Errorf("%d reconnected lines, want 4", n)
	}
}

// An unreachable broker counts failures, pauses between attempts and never
// calls serve; Run returns once ctx ends.
func TestLoopCountsFailures(t *testing.T) {
	c := testAMQP(t)
	c.URL = "amqp://guest:guest@127.0.0.1:1/" // nothing listens there
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attempts := 0
	l := &broker.Loop{AMQP: c, Name: "loop test", Backoff: retry.Backoff{Min: time.Millisecond, Max: 10 * time.Millisecond},
		Pause: func(ctx context.Context, d time.Duration) {
			if attempts++; attempts == 3 {
				cancel()
			}
		}}
	runLoop(t, ctx, l, func(context.Context, *broker.Session) error {
		t.Error("serve called without a session")
		return nil
	})
	if l.Failures() != 3 || l.Connected() || l.Reconnects() != 0 {
		t.Errorf("failures %d, connected %v, reconnects %d; want 3, false, 0", l.Failures(), l.Connected(), l.Reconnects())
	}
}

func TestCloseAfter(t *testing.T) {
	c := testAMQP(t)
	const grace = 300 * time.Millisecond

	t.Run("closes the session once ctx has ended and grace has passed", func(t *testing.T) {
		s := open(t, c)
		ctx, cancel := context.WithCancel(context.Background())
		defer broker.CloseAfter(ctx, grace, s)()
		cancel()
		select {
		case <-s.Done():
			t.Fatal("closed before the grace had passed")
		case <-time.After(grace / 3):
		}
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("not closed after the grace")
		}
	})

	t.Run("stop before ctx ends keeps the session open", func(t *testing.T) {
		s := open(t, c)
		ctx, cancel := context.WithCancel(context.Background())
		stop := broker.CloseAfter(ctx, grace, s)
		if !stop() {
			t.Fatal("stop reported the watchdog had started")
		}
		cancel()
		select {
		case <-s.Done():
			t.Fatal("closed after stop")
		case <-time.After(2 * grace):
		}
	})
}
