package scripts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Replicated mode (redis.min_replicas N ≥ 1): a script call that may have
// changed something is sent with WAIT N on the same connection, in one
// pipeline on the primary of its keys' slot, so that its answer is given
// only once N replicas hold its writes, and a batch of buyers shares the
// one wait. WAIT called inside a script returns at once (Redis runs it
// before the script's writes are sent to the replicas), so it follows the
// call. WAIT waits for the connection's last write: a call that answers a
// change made before (a replayed Idempotency-Key, a pay of an order paid
// already) writes once itself, after that change, so that the wait covers
// it (the reserve and order scripts).

// ErrUnconfirmed is returned, with the call's reply, by Run and the typed
// calls in replicated mode when the replicas did not acknowledge the
// call's writes in time: the change is made on the primary, but a failover
// may still lose it.
var ErrUnconfirmed = errors.New("the replicas did not confirm in time")

// waitMargin is the most of a call's budget kept for the reply after
// WAIT's own timeout, so that WAIT answers (with fewer replicas) before the
// connection's deadline cuts it off: Redis notices a blocked client's
// timeout at its next cron tick (every 100 ms at the default hz 10), so a
// WAIT answers up to that much after its timeout. A quarter of the budget
// is kept, up to waitMargin.
const waitMargin = 200 * time.Millisecond

// noDeadlineWait is WAIT's timeout for a ctx without a deadline on a
// client without a read timeout.
const noDeadlineWait = time.Second

// SetReplicas turns replicated mode on with n ≥ 1 replicas, off with 0.
// Call it before the Loader is used.
func (l *Loader) SetReplicas(n int) {
	l.replicas = n
	l.readTimeout = readTimeoutOf(l.rdb)
}

// readTimeoutOf is the read timeout of rdb's connections (0: none), which
// bounds WAIT's as a ctx deadline does.
func readTimeoutOf(rdb redis.UniversalClient) time.Duration {
	var t time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		t = c.Options().ReadTimeout
	case *redis.ClusterClient:
		t = c.Options().ReadTimeout
	}
	return max(t, 0) // go-redis: -1 no timeout, -2 no deadline at all
}

// Replicas returns the n of SetReplicas.
func (l *Loader) Replicas() int { return l.replicas }

// WaitStats are replicated mode's counters (WaitStats).
type WaitStats struct {
	// Calls waited for, of which Unconfirmed were not acknowledged in time.
	Calls, Unconfirmed uint64
	// Waited is the time the script calls with their waits took in all.
	Waited time.Duration
}

// WaitStats returns replicated mode's counters since start.
func (l *Loader) WaitStats() WaitStats {
	return WaitStats{Calls: l.waits.Load(), Unconfirmed: l.unacked.Load(), Waited: time.Duration(l.waitNanos.Load())}
}

// changes tells whether a call of script name with args may change
// something that an answer reports: every reserve; an admin or order call
// but a read or an expiry sweep (whose changes no one is answered about).
func changes(name string, args []any) bool {
	switch name {
	case Reserve:
		return true
	case Admin:
		// ping too: /readyz's call then says whether the primary of its
		// slot has the replicas it needs.
		op, _ := firstArg(args)
		return op != "get"
	case Order:
		op, _ := firstArg(args)
		return op != "get" && op != "sweep"
	}
	return false
}

func firstArg(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	s, ok := args[0].(string)
	return s, ok
}

// evalWait calls sc with EVALSHA and WAIT l.replicas in one pipeline on the
// primary of keys[0]'s slot. It returns the script's reply and error; when
// the script succeeded but fewer replicas than asked acknowledged its
// writes, the reply with an error wrapping ErrUnconfirmed.
func (l *Loader) evalWait(ctx context.Context, sc *Script, keys []string, args []any) (any, error) {
	start := time.Now()
	node, err := l.primaryFor(ctx, keys)
	if err != nil {
		return nil, err
	}
	budget := l.readTimeout
	if d, ok := ctx.Deadline(); ok && (budget <= 0 || time.Until(d) < budget) {
		budget = time.Until(d)
	}
	timeout := noDeadlineWait
	if budget > 0 {
		timeout = max(budget-min(waitMargin, budget/4), time.Millisecond)
	}
	pipe := node.Pipeline()
	ev := sc.rs.EvalSha(ctx, pipe, keys, args...)
	w := redis.NewIntCmd(ctx, "wait", l.replicas, max(timeout.Milliseconds(), 1))
	_ = pipe.Process(ctx, w)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	l.waits.Add(1)
	l.waitNanos.Add(int64(time.Since(start)))
	v, err := ev.Result()
	if err != nil {
		if c, ok := l.rdb.(*redis.ClusterClient); ok {
			if redirected(err) {
				c.ReloadState(ctx) // the slot moved (a failover, resharding): the next call asks the new primary
			}
		}
		return v, err
	}
	n, werr := w.Result()
	switch {
	case werr != nil:
		l.unacked.Add(1)
		return v, fmt.Errorf("%w: WAIT %d: %w", ErrUnconfirmed, l.replicas, werr)
	case n < int64(l.replicas):
		l.unacked.Add(1)
		return v, fmt.Errorf("%w: %d of %d replicas acknowledged within %s", ErrUnconfirmed, n, l.replicas, timeout)
	}
	return v, nil
}

// primaryFor returns the client whose one connection reaches the primary
// of keys[0]'s slot: the node's own client on a cluster, else the client.
func (l *Loader) primaryFor(ctx context.Context, keys []string) (redis.Cmdable, error) {
	c, ok := l.rdb.(*redis.ClusterClient)
	if !ok {
		return l.rdb, nil
	}
	if len(keys) == 0 {
		return nil, errors.New("scripts: a replicated call needs a key to find its primary")
	}
	return c.MasterForKey(ctx, keys[0])
}

// redirected reports whether err is a cluster redirection (MOVED, ASK),
// which a call sent to one node's connection does not follow.
func redirected(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}
