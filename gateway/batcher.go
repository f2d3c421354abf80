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
// up, and the moment it returns, the queue (up to maxSize) leaves in the next
// call. Under load, batches grow by themselves to match the round trip; a
// lone buyer pays nothing. With parallel > 1, that many calls of one sale
// may be out at once, overlapping the gateway's work with Redis's.
//
// No goroutine is started: a buyer whose call is going out does the work;
// when its call returns it takes the next batch from the queue and hands it
// to the first buyer in it, who sends it. It is safe for concurrent use.
type batcher struct {
	store       *Store
	maxSize     int           // reservations per script call; 1 turns batching off
	parallel    int           // script calls of one sale in flight at once
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
	out     int // calls of this sale in flight (their leaders will hand over)
	users   int // reservations in flight for this sale on this gateway
}

// call is one buyer's reservation in a lane.
type call struct {
	r        Reservation
	deadline time.Time
	res      Result
	err      error
	batch    []*call // set before done receives true: the batch to send
	// done receives true when this buyer must send batch, false when
	// res/err are set.
	done chan bool
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan bool, 1)} }}

func newBatcher(store *Store, maxSize, parallel, maxInFlight int, timeout time.Duration) *batcher {
	return &batcher{store: store, maxSize: maxSize, parallel: max(parallel, 1), maxInFlight: maxInFlight,
		timeout: timeout, lanes: map[string]*lane{}}
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
	if b.maxSize <= 1 {
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
	var batch []*call
	var expired []*call
	lead := l.out < b.parallel
	if lead {
		// Fewer calls out than allowed means the queue was empty: c is
		// its head, and leaves now.
		l.out++
		batch, expired = b.take(l, time.Now())
	}
	l.mu.Unlock()
	answerExpired(expired)
	if !lead && <-c.done {
		batch, lead = c.batch, true
	}
	if lead {
		b.send(sale, l, batch)
	}
	res, err := c.res, c.err
	*c = call{done: c.done}
	callPool.Put(c)
	return res, err
}

// take removes the next batch from the head of l's queue, and the
// reservations that waited past their deadline. l.mu must be held.
func (b *batcher) take(l *lane, now time.Time) (batch, expired []*call) {
	n := 0
	for _, c := range l.waiting {
		if n == b.maxSize {
			break
		}
		if now.After(c.deadline) {
			expired = append(expired, c)
		} else {
			batch = append(batch, c)
		}
		n++
	}
	rest := copy(l.waiting, l.waiting[n:])
	clear(l.waiting[rest:])
	l.waiting = l.waiting[:rest]
	return batch, expired
}

// answerExpired answers 503 to reservations that were never sent: nothing
// was promised.
func answerExpired(expired []*call) {
	for _, c := range expired {
		c.err = ErrUnavailable
		c.done <- false
	}
}

// send makes one script call for batch, whose first reservation belongs to
// the calling buyer, then hands the next batch (if any) to its first buyer
// and delivers the results.
func (b *batcher) send(sale string, l *lane, batch []*call) {
	if len(batch) > 0 {
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
		for i, c := range batch {
			c.res, c.err = out[i], err
		}
	}

	// Hand over first, so the next batch goes out before we deliver.
	l.mu.Lock()
	var next, expired []*call
	for len(next) == 0 && len(l.waiting) > 0 {
		var exp []*call
		next, exp = b.take(l, time.Now())
		expired = append(expired, exp...)
	}
	if len(next) == 0 {
		l.out--
	}
	l.mu.Unlock()
	if len(next) > 0 {
		next[0].batch = next
		next[0].done <- true
	}
	answerExpired(expired)
	for i, c := range batch {
		if i > 0 {
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
