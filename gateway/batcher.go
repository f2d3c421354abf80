package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// batcher coalesces concurrent reservations for the same sale into one
// script call. There is no timer: the first buyer of an idle sale sends its
// reservation at once, alone; buyers who arrive while that call is out queue
// up, and the moment it returns, the first of them takes the whole queue (up
// to max) in the next call. Under load, batches grow by themselves to match
// the round trip; a lone buyer pays nothing.
//
// No goroutine is started: the buyer whose call is going out does the work
// and hands the lead to the next one. It is safe for concurrent use.
type batcher struct {
	store       *Store
	max         int           // reservations per script call; 1 turns batching off
	maxInFlight int           // reservations in flight per sale beyond which buys are shed (0: no limit)
	timeout     time.Duration // a reservation not sent within this is answered 503

	mu    sync.Mutex
	lanes map[string]*lane

	calls, reservations atomic.Uint64 // script calls made, reservations they carried
	sizes               *metrics.PrometheusHistogram
}

// lane is one sale's queue.
type lane struct {
	mu      sync.Mutex
	waiting []*call
	busy    bool // a call for this sale is out; its leader will hand over
	users   int  // reservations in flight for this sale on this gateway
}

// call is one buyer's reservation in a lane.
type call struct {
	r        Reservation
	deadline time.Time
	res      Result
	err      error
	// done receives true when this buyer must lead the next batch, false
	// when res/err are set.
	done chan bool
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan bool, 1)} }}

func newBatcher(store *Store, max, maxInFlight int, timeout time.Duration) *batcher {
	return &batcher{store: store, max: max, maxInFlight: maxInFlight, timeout: timeout, lanes: map[string]*lane{}}
}

// reserve reserves r on sale, batched with whatever else is in flight for
// that sale (unless batching is off). It blocks for at most about two Redis
// timeouts. It returns ErrRateLimited at once when the sale already has
// maxInFlight reservations in flight on this gateway, and an error wrapping
// ErrUnavailable when Redis did not answer in time.
func (b *batcher) reserve(sale string, r Reservation) (Result, error) {
	l, ok := b.acquire(sale)
	defer b.release(sale, l)
	if !ok {
		return Result{}, ErrRateLimited
	}
	if b.max <= 1 {
		var out [1]Result
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		err := b.store.Reserve(ctx, sale, []Reservation{r}, out[:])
		cancel()
		b.calls.Add(1)
		b.reservations.Add(1)
		return out[0], err
	}

	c := callPool.Get().(*call)
	c.r, c.deadline = r, time.Now().Add(b.timeout)
	l.mu.Lock()
	l.waiting = append(l.waiting, c)
	lead := !l.busy
	l.busy = true
	l.mu.Unlock()
	if !lead {
		lead = <-c.done
	}
	if lead {
		b.lead(sale, l, c)
	}
	res, err := c.res, c.err
	*c = call{done: c.done}
	callPool.Put(c)
	return res, err
}

// lead sends one batch from the head of the lane, hands the lead to the next
// waiter if any, and delivers the results. me is the leader's own call, which
// is in the batch.
func (b *batcher) lead(sale string, l *lane, me *call) {
	now := time.Now()
	l.mu.Lock()
	// Reservations that waited past their deadline were never sent: answer
	// them 503 (nothing was promised) rather than send them late.
	var expired []*call
	n := 0
	for n < len(l.waiting) && n < b.max {
		if c := l.waiting[n]; c != me && now.After(c.deadline) {
			expired = append(expired, c)
			l.waiting = append(l.waiting[:n], l.waiting[n+1:]...)
			continue
		}
		n++
	}
	batch := make([]*call, n)
	copy(batch, l.waiting[:n])
	rest := copy(l.waiting, l.waiting[n:])
	clear(l.waiting[rest:])
	l.waiting = l.waiting[:rest]
	l.mu.Unlock()
	for _, c := range expired {
		c.err = ErrUnavailable
		c.done <- false
	}

	rs := make([]Reservation, len(batch))
	for i, c := range batch {
		rs[i] = c.r
	}
	out := make([]Result, len(batch))
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	err := b.store.Reserve(ctx, sale, rs, out)
	cancel()
	b.calls.Add(1)
	b.reservations.Add(uint64(len(rs)))
	if b.sizes != nil {
		b.sizes.Update(float64(len(rs)))
	}

	// Hand over first, so the next batch goes out before we deliver.
	l.mu.Lock()
	if len(l.waiting) > 0 {
		next := l.waiting[0]
		l.mu.Unlock()
		next.done <- true
	} else {
		l.busy = false
		l.mu.Unlock()
	}
	for i, c := range batch {
		c.res, c.err = out[i], err
		if c != me {
			c.done <- false
		}
	}
}

// acquire counts one more reservation in flight for sale; ok is false when
// that is over the limit (release must still be called).
func (b *batcher) acquire(sale string) (l *lane, ok bool) {
	b.mu.Lock()
	l = b.lanes[sale]
	if l == nil {
		l = &lane{}
		b.lanes[sale] = l
	}
	l.users++
	ok = b.maxInFlight <= 0 || l.users <= b.maxInFlight
	b.mu.Unlock()
	return l, ok
}

// release drops the lane of a sale nobody is buying, so that the map holds
// only sales with buyers in flight.
func (b *batcher) release(sale string, l *lane) {
	b.mu.Lock()
	l.users--
	if l.users == 0 {
		delete(b.lanes, sale)
	}
	b.mu.Unlock()
}
