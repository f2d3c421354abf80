package gateway

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// rateLimits holds one token bucket per sale for admission.rate. It is safe
// for concurrent use; with rate 0 it admits everything.
type rateLimits struct {
	rate  rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// maxLimiters bounds the memory: past it, buckets are dropped (and refilled).
const maxLimiters = 100_000

func newRateLimits(perSecond float64, burst int) *rateLimits {
	if burst <= 0 {
		burst = max(1, int(perSecond))
	}
	return &rateLimits{rate: rate.Limit(perSecond), burst: burst, m: map[string]*rate.Limiter{}}
}

// allow takes a token of sale's bucket, reporting whether there was one.
func (r *rateLimits) allow(sale []byte, now time.Time) bool {
	if r.rate <= 0 {
		return true
	}
	r.mu.Lock()
	l := r.m[string(sale)]
	if l == nil {
		if len(r.m) >= maxLimiters {
			clear(r.m)
		}
		l = rate.NewLimiter(r.rate, r.burst)
		r.m[string(sale)] = l
	}
	r.mu.Unlock()
	return l.AllowN(now, 1)
}
