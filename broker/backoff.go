package broker

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff computes reconnect and retry delays: exponential from Min to Max,
// with full jitter in the upper half, so that many processes that lost the
// same server do not come back in lockstep. The zero value uses 100ms and
// 5s. It is not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	n        int
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
