package sale

import (
	"context"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// batcher coalesces concurrent requests for the same sale into one script
// call: the reservations of buys (In Reservation, Out Result), and the
// joins of a waiting room (In a user id, Out a Place). Below, reservations
// stand for both. There is no timer: the first buyer of an idle sale sends its
// reservation at once, alone; buyers who arrive while that call is out queue
// up, and the moment it returns, the queue (up to maxSize) leaves in the next
// call. Under load, batches grow by themselves to match the round trip; a
// lone buyer pays nothing. With parallel > 1, that many calls of one sale
// may be out at once, overlapping the gateway's work with Redis's.
//
// A sale of several buckets has a queue per bucket (a script call serves
// one bucket), and its buckets share the sale's parallel calls: while they
// are all out, a bucket's buyers wait for one to return, and then the
// bucket whose first buyer has waited longest goes. So its batches grow as
// large as those of a sale of one bucket, and each order costs Redis as
// little (a call's fixed cost is most of a small batch's). A bucket whose
// queue holds a full batch (maxSize) sends it at once besides, with up to
// parallel calls of its own out: waiting could not make that batch larger,
// and it is how a sale hotter than one primary gets the K primaries of its
// buckets working at once.
//
// With linger > 0 (the joins' batcher), a queue whose last call carried
// more than one waits, while it holds fewer than that call did, until its
// first has waited linger, so that a crowd's requests go out in fewer,
// larger calls (lingers says why that bound); each
// waiting buyer then also wakes at linger after it arrived, and sends what
// is due (the first buyer's wake is the one that matters).
//
// No goroutine is started: a buyer whose call is going out does the work;
// when its call returns it takes the next batch from the queue and hands it
// to the first buyer in it, who sends it. It is safe for concurrent use.
type batcher[In, Out any] struct {
	// do makes one script call for the batch in on id and sets out[i] for
	// each in[i] (len(out) == len(in)), or returns an error that is every
	// buyer's answer.
	do          func(ctx context.Context, id string, in []In, out []Out) error
	maxSize     int           // reservations per script call; 1 turns batching off
	parallel    int           // script calls of one sale in flight at once (a full batch of a bucket aside)
	maxInFlight int           // reservations in flight per sale beyond which buys are shed (0: no limit)
	timeout     time.Duration // a reservation not sent within this is answered 503
	linger      time.Duration // how long a queue whose calls carry several waits for a fuller batch (0: never)

	mu    sync.Mutex
	sales map[string]*saleQueue[In, Out]
	pool  sync.Pool // of *call[In, Out]

	calls, items *metrics.Counter // script calls made, the reservations (or joins) they carried
	sizes        *metrics.PrometheusHistogram
}

// saleQueue is one sale's reservations on this process: a queue per id
// (the sale, or each of its buckets that has buyers in flight).
type saleQueue[In, Out any] struct {
	mu     sync.Mutex
	queues []*queue[In, Out] // ids with buyers waiting or calls out; one for a sale of one bucket
	out    int               // calls of this sale in flight (their leaders will hand over)
	users  int               // reservations in flight for this sale on this process (batcher.mu)
}

// queue is the buyers of one id (the sale, or a bucket of it) waiting for a script call.
type queue[In, Out any] struct {
	id      string
	waiting []*call[In, Out]
	out     int // calls of this id in flight
	last    int // how many the last call taken from this queue carried
}

// call is one buyer's reservation in a queue.
type call[In, Out any] struct {
	r        In
	since    time.Time // when it was queued
	deadline time.Time
	res      Out
	err      error
	batch    []*call[In, Out] // set before done receives true: the batch to send
	q        *queue[In, Out]  // set with batch: the queue it was taken from
	// done receives true when this buyer must send batch, false when
	// res/err are set.
	done chan bool
}

// newBatcher returns a batcher making its calls with do, and counting them
// in set as flashgate_<name>_calls_total, flashgate_<name>_<what>_total
// and flashgate_<name>_batch_size.
func newBatcher[In, Out any](do func(ctx context.Context, id string, in []In, out []Out) error, o Batching,
	timeout time.Duration, set *metrics.Set, name, what string) *batcher[In, Out] {
	b := &batcher[In, Out]{do: do, maxSize: o.MaxSize, parallel: max(o.Calls, 1), maxInFlight: o.MaxInFlight,
		timeout: timeout, linger: o.Linger, sales: map[string]*saleQueue[In, Out]{}}
	b.pool.New = func() any { return &call[In, Out]{done: make(chan bool, 1)} }
	b.sizes = set.NewPrometheusHistogramExt("flashgate_"+name+"_batch_size",
		[]float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024})
	b.calls = set.NewCounter("flashgate_" + name + "_calls_total")
	b.items = set.NewCounter("flashgate_" + name + "_" + what + "_total")
	return b
}

// run sends r on id, the sale or the buyer's bucket of it, batched with
// whatever else is in flight for that sale (unless batching is off). It
// blocks for at most about two Redis timeouts. It returns ErrRateLimited at
// once when the sale already has maxInFlight reservations in flight on this
// gateway, and an error wrapping ErrUnavailable when Redis did not answer in
// time.
func (b *batcher[In, Out]) run(sale, id string, r In) (Out, error) {
	sq, ok := b.acquire(sale)
	defer b.release(sale, sq)
	if !ok {
		var zero Out
		return zero, ErrRateLimited
	}
	if b.maxSize <= 1 {
		var out [1]Out
		ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
		err := b.do(ctx, id, []In{r}, out[:])
		cancel()
		b.calls.Inc()
		b.items.Inc()
		return out[0], err
	}

	c := b.pool.Get().(*call[In, Out])
	now := time.Now()
	c.r, c.since, c.deadline = r, now, now.Add(b.timeout)
	sq.mu.Lock()
	q := sq.queue(id)
	q.waiting = append(q.waiting, c)
	leave, expired := b.dispatch(sq, now)
	sq.mu.Unlock()
	answerExpired(expired)
	if !handOff(leave, c) {
		b.wait(sq, c)
	}
	if c.batch != nil {
		b.send(sq, c.q, c.batch)
	}
	res, err := c.res, c.err
	*c = call[In, Out]{done: c.done}
	b.pool.Put(c)
	return res, err
}

// queue returns the queue of id, made if the sale has none. sq.mu must
// be held.
func (sq *saleQueue[In, Out]) queue(id string) *queue[In, Out] {
	for _, q := range sq.queues {
		if q.id == id {
			return q
		}
	}
	q := &queue[In, Out]{id: id}
	sq.queues = append(sq.queues, q)
	return q
}

// dispatch takes from sq's queues the batches that leave now: while fewer
// than parallel calls of the sale are out, the batch of the queue whose
// first buyer has waited longest, and any number of times a full batch of
// a queue with fewer than parallel calls of its own out. It also removes
// the reservations that waited past their deadline, and the queues left
// idle. The first call of each batch returned has batch and q set. sq.mu
// must be held.
func (b *batcher[In, Out]) dispatch(sq *saleQueue[In, Out], now time.Time) (leave [][]*call[In, Out], expired []*call[In, Out]) {
	for {
		var pick *queue[In, Out]
		for _, q := range sq.queues {
			switch {
			case len(q.waiting) == 0:
			case sq.out < b.parallel && !b.lingers(q, now):
				if pick == nil || q.waiting[0].deadline.Before(pick.waiting[0].deadline) {
					pick = q
				}
			case len(q.waiting) >= b.maxSize && q.out < b.parallel && pick == nil:
				pick = q
			}
		}
		if pick == nil {
			break
		}
		batch, exp := b.take(pick, now)
		expired = append(expired, exp...)
		if len(batch) == 0 {
			continue
		}
		pick.last = len(batch)
		pick.out++
		sq.out++
		batch[0].batch, batch[0].q = batch, pick
		leave = append(leave, batch)
	}
	idle := 0
	for _, q := range sq.queues {
		if len(q.waiting) > 0 || q.out > 0 {
			sq.queues[idle] = q
			idle++
		}
	}
	clear(sq.queues[idle:])
	sq.queues = sq.queues[:idle]
	return leave, expired
}

// lingers reports whether q's batch waits for more at now: the batcher
// lingers, q's last call carried several, the batch is smaller than that
// call was (and so not full) and its first has waited less than linger.
// Measured against the last call, a closed crowd (each buyer back as soon
// as answered) fills the batch again at once and loses no time to the
// wait; an open one (a flash crowd's arrivals) lets batches grow towards
// what arrives in a linger.
func (b *batcher[In, Out]) lingers(q *queue[In, Out], now time.Time) bool {
	return b.linger > 0 && q.last > 1 && len(q.waiting) < min(q.last, b.maxSize) && now.Before(q.waiting[0].since.Add(b.linger))
}

// wait blocks until c is answered (done receives false) or has a batch to
// send (true: c.batch is set). With a linger, c also wakes at linger after
// it was queued and dispatches what is due then: a queue's batch that
// lingers has no other buyer to send it before a call of the sale returns
// or another request comes.
func (b *batcher[In, Out]) wait(sq *saleQueue[In, Out], c *call[In, Out]) {
	if b.linger <= 0 {
		<-c.done
		return
	}
	t := time.NewTimer(time.Until(c.since.Add(b.linger)))
	defer t.Stop()
	select {
	case <-c.done:
		return
	case <-t.C:
	}
	sq.mu.Lock()
	leave, expired := b.dispatch(sq, time.Now())
	sq.mu.Unlock()
	answerExpired(expired)
	if !handOff(leave, c) {
		<-c.done
	}
}

// handOff gives each batch of leave to its first buyer, who sends it; it
// reports whether self is one of them (self then sends without being
// woken). self may be nil.
func handOff[In, Out any](leave [][]*call[In, Out], self *call[In, Out]) (lead bool) {
	for _, batch := range leave {
		if batch[0] == self {
			lead = true
			continue
		}
		batch[0].done <- true
	}
	return lead
}

// take removes the next batch from the head of q's queue, and the
// reservations that waited past their deadline. The sale's mu must be held.
func (b *batcher[In, Out]) take(q *queue[In, Out], now time.Time) (batch, expired []*call[In, Out]) {
	n := 0
	for _, c := range q.waiting {
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
	rest := copy(q.waiting, q.waiting[n:])
	clear(q.waiting[rest:])
	q.waiting = q.waiting[:rest]
	return batch, expired
}

// answerExpired answers 503 to reservations that were never sent: nothing
// was promised.
func answerExpired[In, Out any](expired []*call[In, Out]) {
	for _, c := range expired {
		c.err = ErrUnavailable
		c.done <- false
	}
}

// send makes one script call for batch, taken from q, whose first
// reservation belongs to the calling buyer, then hands the batches that
// leave next (if any) to their first buyers and delivers the results.
func (b *batcher[In, Out]) send(sq *saleQueue[In, Out], q *queue[In, Out], batch []*call[In, Out]) {
	rs := make([]In, len(batch))
	for i, c := range batch {
		rs[i] = c.r
	}
	out := make([]Out, len(batch))
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	err := b.do(ctx, q.id, rs, out)
	cancel()
	b.calls.Inc()
	b.items.Add(len(rs))
	b.sizes.Update(float64(len(rs)))
	for i, c := range batch {
		c.res, c.err = out[i], err
	}

	// Hand over first, so the next batch goes out before we deliver.
	sq.mu.Lock()
	q.out--
	sq.out--
	leave, expired := b.dispatch(sq, time.Now())
	sq.mu.Unlock()
	handOff(leave, nil)
	answerExpired(expired)
	for i, c := range batch {
		if i > 0 {
			c.done <- false
		}
	}
}

// acquire counts one more reservation in flight for sale; ok is false when
// that is over the limit (release must still be called).
func (b *batcher[In, Out]) acquire(sale string) (sq *saleQueue[In, Out], ok bool) {
	b.mu.Lock()
	sq = b.sales[sale]
	if sq == nil {
		sq = &saleQueue[In, Out]{}
		b.sales[sale] = sq
	}
	sq.users++
	ok = b.maxInFlight <= 0 || sq.users <= b.maxInFlight
	b.mu.Unlock()
	return sq, ok
}

// release drops the queues of a sale nobody is buying, so that the map
// holds only sales with buyers in flight.
func (b *batcher[In, Out]) release(sale string, sq *saleQueue[In, Out]) {
	b.mu.Lock()
	sq.users--
	if sq.users == 0 {
		delete(b.sales, sale)
	}
	b.mu.Unlock()
}
