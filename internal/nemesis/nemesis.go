package nemesis

// The nemesis: one fault at a time, drawn at random, held, healed.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// Fault kinds the nemesis throws.
const (
	FaultLatency  = "latency"       // latency with jitter on one proxy
	FaultTimeout  = "timeout"       // nothing passes, connections kept, closed at the heal
	FaultReset    = "reset_peer"    // connections reset
	FaultBand     = "bandwidth"     // a narrow link
	FaultSlicer   = "slicer"        // data cut in small pieces, each delayed
	FaultDown     = "proxy_down"    // a proxy disabled: connections closed, new ones refused
	FaultKill     = "kill9"         // kill -9 of a gateway or consumer, started again at the heal
	FaultPause    = "pause"         // a gateway or consumer stopped (SIGSTOP), resumed at the heal (SIGCONT)
	FaultRedis    = "redis_kill9"   // kill -9 of the run's Redis (AOF, fsync always), started again
	FaultRedisRst = "redis_restart" // a clean restart of the run's Redis
)

// FaultEvent is one fault of a run's schedule.
type FaultEvent struct {
	At     time.Duration // since the run began
	Kind   string
	Target string
	Detail string
	Held   time.Duration
	Err    string // what went wrong throwing or healing it
}

func (e FaultEvent) String() string {
	s := fmt.Sprintf("%8.3fs %-13s %-22s %-40s held %v", e.At.Seconds(), e.Kind, e.Target, e.Detail, e.Held.Round(time.Millisecond))
	if e.Err != "" {
		s += " ERROR " + e.Err
	}
	return s
}

// Nemesis throws faults at a Stack and the run's Redis. It is driven by
// one goroutine (Run); Schedule is safe to read once Run has returned.
type Nemesis struct {
	rng   *rand.Rand
	stack *Stack
	redis *localstack.RedisServer // nil: no Redis fault
	start time.Time
	// Kinds are the faults it may throw, each as often as the others.
	Kinds []string

	mu       sync.Mutex
	schedule []FaultEvent
}

// NewNemesis is a nemesis of stack and redis drawing from rng.
func NewNemesis(rng *rand.Rand, stack *Stack, redis *localstack.RedisServer, start time.Time) *Nemesis {
	kinds := []string{FaultLatency, FaultTimeout, FaultReset, FaultBand, FaultSlicer, FaultDown, FaultKill, FaultPause}
	if redis != nil {
		kinds = append(kinds, FaultRedis, FaultRedisRst)
	}
	return &Nemesis{rng: rng, stack: stack, redis: redis, start: start, Kinds: kinds}
}

// Schedule is the faults thrown so far.
func (n *Nemesis) Schedule() []FaultEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.schedule)
}

// Counts is the faults thrown, by kind.
func (n *Nemesis) Counts() map[string]int {
	out := map[string]int{}
	for _, e := range n.Schedule() {
		out[e.Kind]++
	}
	return out
}

// Errors is the faults that could not be thrown or healed.
func (n *Nemesis) Errors() []FaultEvent {
	var out []FaultEvent
	for _, e := range n.Schedule() {
		if e.Err != "" {
			out = append(out, e)
		}
	}
	return out
}

// Run throws a fault every 1–3 s, holds it 0.5–3 s and heals it, until ctx
// is done; the fault in progress is healed before it returns, so that the
// stack is whole again.
func (n *Nemesis) Run(ctx context.Context) {
	for {
		pause := time.Duration(1000+n.rng.IntN(2000)) * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		n.one(ctx)
	}
}

// one throws, holds and heals one fault.
func (n *Nemesis) one(ctx context.Context) {
	kind := n.Kinds[n.rng.IntN(len(n.Kinds))]
	hold := time.Duration(500+n.rng.IntN(2500)) * time.Millisecond
	ev := FaultEvent{At: time.Since(n.start), Kind: kind}
	heal, err := n.throw(&ev)
	if err != nil {
		ev.Err = err.Error()
	} else {
		t := time.NewTimer(hold)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		ev.Held = time.Since(n.start) - ev.At
		// Healing must happen whatever ctx says: the run ends whole.
		if err := heal(); err != nil {
			ev.Err = "heal: " + err.Error()
		}
	}
	n.mu.Lock()
	n.schedule = append(n.schedule, ev)
	n.mu.Unlock()
}

// throw starts the fault ev.Kind on a target drawn at random, filling ev,
// and returns its heal.
func (n *Nemesis) throw(ev *FaultEvent) (func() error, error) {
	switch ev.Kind {
	case FaultKill:
		p := n.stack.Procs[n.rng.IntN(len(n.stack.Procs))]
		ev.Target = p.Name
		if err := p.Kill(); err != nil {
			return nil, err
		}
		return func() error { return restart(p) }, nil
	case FaultPause:
		p := n.stack.Procs[n.rng.IntN(len(n.stack.Procs))]
		ev.Target = p.Name
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		return func() error { return p.Signal(syscall.SIGCONT) }, nil
	case FaultRedis, FaultRedisRst:
		ev.Target = "redis " + n.redis.Addr
		stop := n.redis.Kill
		if ev.Kind == FaultRedisRst {
			stop = n.redis.Stop
		}
		if err := stop(); err != nil {
			return nil, err
		}
		return func() error { return restartRedis(n.redis) }, nil
	case FaultDown:
		names := n.stack.Net.Names()
		name := names[n.rng.IntN(len(names))]
		ev.Target = name
		if err := n.stack.Net.Disable(name); err != nil {
			return nil, err
		}
		return func() error { return n.stack.Net.Enable(name) }, nil
	}
	names := n.stack.Net.Names()
	name := names[n.rng.IntN(len(names))]
	ev.Target = name
	t := n.toxic(ev.Kind)
	ev.Detail = t.String()
	if err := n.stack.Net.AddToxic(name, "nemesis", t); err != nil {
		return nil, err
	}
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return n.stack.Net.RemoveToxic(ctx, name, "nemesis")
	}, nil
}

// toxic draws a toxic of kind: its direction and its strength.
func (n *Nemesis) toxic(kind string) Toxic {
	stream := []string{"upstream", "downstream"}[n.rng.IntN(2)]
	switch kind {
	case FaultLatency:
		return Toxic{Type: "latency", Stream: stream, Attributes: map[string]int{"latency": 20 + n.rng.IntN(400), "jitter": n.rng.IntN(200)}}
	case FaultTimeout:
		return Toxic{Type: "timeout", Stream: stream, Attributes: map[string]int{"timeout": 0}}
	case FaultReset:
		return Toxic{Type: "reset_peer", Stream: stream, Attributes: map[string]int{"timeout": n.rng.IntN(500)}}
	case FaultBand:
		return Toxic{Type: "bandwidth", Stream: stream, Attributes: map[string]int{"rate": 1 + n.rng.IntN(32)}}
	default: // FaultSlicer
		avg := 2 + n.rng.IntN(16)
		return Toxic{Type: "slicer", Stream: stream, Attributes: map[string]int{"average_size": avg, "size_variation": n.rng.IntN(avg), "delay": n.rng.IntN(2000)}}
	}
}

// restartRedis starts the stopped Redis again on its port and its data,
// trying a few times: while it was down, a connection of any process may
// have taken its port as its own end, for a moment.
func restartRedis(r *localstack.RedisServer) error {
	var errs []string
	for range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := r.Start(ctx)
		cancel()
		if err == nil {
			return nil
		}
		errs = append(errs, err.Error())
		time.Sleep(time.Second)
	}
	return fmt.Errorf("redis-server %s does not start again: %s", r.Addr, strings.Join(errs, "; "))
}

// restart starts a killed process again, trying a few times: its port
// may be held a moment by another process's connection.
func restart(p *Proc) error {
	var errs []string
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := p.Start(ctx)
		cancel()
		if err == nil {
			return nil
		}
		errs = append(errs, err.Error())
		time.Sleep(time.Second)
	}
	return fmt.Errorf("%s does not start again: %s", p.Name, strings.Join(errs, "; "))
}
