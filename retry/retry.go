// Package retry paces the retries of every loop in flashgate that waits for
// a server to come back: RabbitMQ sessions, MySQL writes and migrations,
// Redis script loads and marks. It holds one backoff rule and one loop, so
// that every retry in the tree behaves (and is tested) the same way.
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Backoff computes the delays between attempts: exponential from Min to
// Max, with "equal jitter" (each delay is drawn from the upper half of the
// exponential step, [d/2, d]), so that many processes that lost the same
// server do not come back in lockstep yet none retries at once. The zero
// value uses 100ms and 5s. It is not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	// Tries, when above 0, is how many attempts Until makes at most: after
	// that many failures it returns the last one's error, without waiting
	// again. 0 bounds the attempts by ctx only. Next ignores it.
	Tries int
	n     int
}

// Next returns the delay before the next attempt and advances.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi < lo {
		hi = max(lo, 5*time.Second)
	}
	d := lo
	for i := 0; i < b.n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	if d < hi {
		b.n++
	}
	half := d / 2
	return half + rand.N(half+1)
}

// Reset starts over from Min; call it after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d or until ctx ends, and reports whether the whole delay
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// stop marks an error that no retry can fix.
type stop struct{ err error }

func (s stop) Error() string { return s.err.Error() }
func (s stop) Unwrap() error { return s.err }

// Stop wraps err so that Until returns it at once instead of retrying.
// Stop(nil) is nil.
func Stop(err error) error {
	if err == nil {
		return nil
	}
	return stop{err}
}

// Until calls attempt until it returns nil, an error made with Stop (which
// Until returns unwrapped), b.Tries attempts have failed (Until returns the
// last one's error as it is), or ctx ends (Until then returns ctx's error,
// joined with the last attempt's). Between attempts it waits b.Next() and
// calls notify, when not nil, with the failed attempt's error and the delay.
// It blocks; it is safe for concurrent use when each caller has its own b.
func Until(ctx context.Context, b Backoff, attempt func(context.Context) error, notify func(err error, next time.Duration)) error {
	for tries := 1; ; tries++ {
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		if s, ok := errors.AsType[stop](err); ok {
			return s.err
		}
		if tries == b.Tries {
			return err
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), err)
		}
		d := b.Next()
		if notify != nil {
			notify(err, d)
		}
		if !Sleep(ctx, d) {
			return errors.Join(ctx.Err(), err)
		}
	}
}
