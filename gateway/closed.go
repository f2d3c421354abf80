package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/retry"
)

// closedSales remembers, for a short while, the sales that Redis said are
// sold out, locked, ended or unknown, so that the crowd arriving after the
// last unit is answered from memory. Every admin change of a sale is
// announced on a pub/sub channel (inside the admin script, atomically with
// the change) and forgets the sale at once; the TTL is the safety net for a
// missed announcement.
//
// What this allows (API.md's check order is shape, sale, window, lock,
// per-user limit, stock): locked, ended and unknown come before the per-user
// limit, so the remembered answer is the one Redis would give. sold_out comes
// after it: a buyer who already holds per_user_limit units would get 409
// limit_reached from Redis and gets 410 sold_out from memory. Both refuse and
// change nothing; the cheaper one is given. not_started is never remembered
// (the sale may start any moment), nor is insufficient_stock (a smaller
// quantity may still fit). Requests with an Idempotency-Key always go to
// Redis, which must replay their first answer.
//
// It is safe for concurrent use.
type closedSales struct {
	ttl        time.Duration
	epoch      atomic.Uint64 // bumped by every announcement
	subscribed atomic.Bool   // the announcements' subscription is up

	mu sync.RWMutex
	m  map[string]closedEntry
}

type closedEntry struct {
	err   error
	until time.Time
}

// maxClosed bounds the memory: past it, the map is emptied (a cache miss is
// only a Redis call).
const maxClosed = 100_000

func newClosedSales(ttl time.Duration) *closedSales {
	return &closedSales{ttl: ttl, m: map[string]closedEntry{}}
}

// get returns the remembered refusal of sale, or nil.
func (c *closedSales) get(sale []byte, now time.Time) error {
	if c.ttl <= 0 {
		return nil
	}
	c.mu.RLock()
	e, ok := c.m[string(sale)] // no allocation: the compiler reads the bytes in place
	c.mu.RUnlock()
	if !ok || now.After(e.until) {
		return nil
	}
	return e.err
}

// remember records Redis's answer for sale if it is one to remember and no
// announcement arrived since epoch (read before the call that produced it).
func (c *closedSales) remember(sale string, err error, epoch uint64, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	switch {
	case errors.Is(err, ErrSoldOut), errors.Is(err, ErrLocked), errors.Is(err, ErrEnded), errors.Is(err, ErrNotFound):
	default:
		return
	}
	c.mu.Lock()
	if c.epoch.Load() == epoch {
		if len(c.m) >= maxClosed {
			clear(c.m)
		}
		c.m[sale] = closedEntry{err: err, until: now.Add(c.ttl)}
	}
	c.mu.Unlock()
}

// forget drops what is remembered of sale ("" drops everything).
func (c *closedSales) forget(sale string) {
	c.mu.Lock()
	c.epoch.Add(1)
	if sale == "" {
		clear(c.m)
	} else {
		delete(c.m, sale)
	}
	c.mu.Unlock()
}

// watch listens to the announcements until ctx is done. Whenever the
// subscription is (re)established or fails, everything is forgotten, since
// announcements may have been missed meanwhile. A failed subscription is
// retried after a backoff, reset once it is up again; the pause is kept
// short because the memory is off (announcements unheard) meanwhile.
func (c *closedSales) watch(ctx context.Context, rdb redis.UniversalClient, channel string, log *zap.Logger) {
	ps := rdb.Subscribe(ctx, channel)
	defer ps.Close()
	// A blocked read does not see ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	backoff := retry.Backoff{Min: 200 * time.Millisecond, Max: time.Second}
	for {
		msg, err := ps.ReceiveTimeout(ctx, 30*time.Second)
		if ctx.Err() != nil {
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			c.forget(m.Payload)
		case *redis.Subscription:
			c.forget("")
			c.subscribed.Store(true)
			backoff.Reset()
		case *redis.Pong:
		default:
			if err != nil && !isTimeout(err) {
				c.subscribed.Store(false)
				c.forget("")
				d := backoff.Next()
				log.Debug("sale announcements: subscription lost; retrying", zap.Error(err), zap.Duration("in", d))
				if !retry.Sleep(ctx, d) {
					return
				}
			}
		}
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
