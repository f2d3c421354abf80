package gateway

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashgate/flashgate/sale"
)

// closedSales remembers, for a short while, the sales that Redis said are
// sold out, locked, ended or unknown, so that the crowd arriving after the
// last unit is answered from memory. Every admin change of a sale is
// announced (inside the admin script, atomically with the change; heard
// through sale.Store.Listen) and forgets the sale at once; the TTL is the safety net for a
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
func (c *closedSales) get(id []byte, now time.Time) error {
	if c.ttl <= 0 {
		return nil
	}
	c.mu.RLock()
	e, ok := c.m[string(id)] // no allocation: the compiler reads the bytes in place
	c.mu.RUnlock()
	if !ok || now.After(e.until) {
		return nil
	}
	return e.err
}

// remember records Redis's answer for sale if it is one to remember and no
// announcement arrived since epoch (read before the call that produced it).
func (c *closedSales) remember(id string, err error, epoch uint64, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	switch {
	case errors.Is(err, sale.ErrSoldOut), errors.Is(err, sale.ErrLocked), errors.Is(err, sale.ErrEnded), errors.Is(err, sale.ErrNotFound):
	default:
		return
	}
	c.mu.Lock()
	if c.epoch.Load() == epoch {
		if len(c.m) >= maxClosed {
			clear(c.m)
		}
		c.m[id] = closedEntry{err: err, until: now.Add(c.ttl)}
	}
	c.mu.Unlock()
}

// forget drops what is remembered of sale ("" drops everything).
func (c *closedSales) forget(id string) {
	c.mu.Lock()
	c.epoch.Add(1)
	if id == "" {
		clear(c.m)
	} else {
		delete(c.m, id)
	}
	c.mu.Unlock()
}

// Changed forgets sale: an admin change of it was announced
// (sale.Listener).
func (c *closedSales) Changed(id string) { c.forget(id) }

// Missed forgets everything, since announcements may have been missed
// (sale.Listener); up tells whether they are heard again.
func (c *closedSales) Missed(up bool) {
	c.forget("")
	c.subscribed.Store(up)
}

var _ sale.Listener = (*closedSales)(nil)

// listeners hears the announcements for several listeners, in order.
type listeners []sale.Listener

func (ls listeners) Changed(id string) {
	for _, l := range ls {
		l.Changed(id)
	}
}

func (ls listeners) Missed(up bool) {
	for _, l := range ls {
		l.Missed(up)
	}
}
