package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// The status marker tells Redis which orders are in MySQL, for the order
// view: on a goroutine of its own, off the acknowledgement path. It adds
// their ids to their sale's created set (scripts.Keys.Created) with plain
// SADDs, which the order script reads beside the record: no script runs
// and no record is rewritten. Issue 30, measured by TestMarkCost (batches
// of 256, AOF on): 0.86–1.11 µs of Redis CPU per order against 1.59–2.15
// µs for the mark script that read and rewrote each record; the set costs
// about 80 bytes of Redis memory per order (scripts.Keys.Created), and a
// view of a record flagged "q" one SISMEMBER (TestViewCost: 2.3 µs).
//
// The batches hand it their ids, which it gathers per sale until it next
// writes; one write is one pipeline (one round trip per Redis node) of an
// SADD per sale, or per bucket, and per markChunk ids, whatever number of
// batches it gathered: the more it lags, the more each write carries.
// Nothing is dropped for want of room: a batch that finds markPending
// ids gathered waits, after its acknowledgement and before the next batch
// is read, until the marker has taken them. Only a write that keeps failing
// (markTries) is given up, and counted: it changes what the view says,
// never the orders.
const (
	// markPending bounds the ids gathered for the marker (a few MB).
	markPending = 1 << 16
	// markChunk bounds the ids of one SADD.
	markChunk = 1000
	// markTries is how often one write is tried.
	markTries = 3
	// redisCall bounds one write.
	redisCall = 2 * time.Second
	// markSales bounds the sales whose buckets the marker remembers; past
	// it, it forgets them all and reads them again as it meets them.
	markSales = 10000
)

// marks are the ids gathered for the marker, per sale. Its methods are safe
// for concurrent use.
type marks struct {
	mu      sync.Mutex
	pending map[string][]string // sale → ids
	n       int                 // ids in pending
	closed  bool
	// wake holds a token when there is something to take, or marks closed.
	wake chan struct{}
	// taken is closed, and replaced, each time the marker takes pending.
	taken chan struct{}
}

func newMarks() *marks {
	return &marks{pending: map[string][]string{}, wake: make(chan struct{}, 1), taken: make(chan struct{})}
}

// add gathers the ids of each sale in bySale. While markPending ids are
// gathered already it waits until the marker takes them, or ctx ends; it
// returns how many ids it could not hand over (ctx ended first).
func (m *marks) add(ctx context.Context, bySale map[string][]string, n int) int {
	for {
		m.mu.Lock()
		if m.n == 0 || m.n+n <= markPending {
			for sale, ids := range bySale {
				m.pending[sale] = append(m.pending[sale], ids...)
			}
			m.n += n
			m.mu.Unlock()
			m.signal()
			return 0
		}
		taken := m.taken
		m.mu.Unlock()
		select {
		case <-taken:
		case <-ctx.Done():
			return n
		}
	}
}

// take returns what is gathered, and whether marks is closed.
func (m *marks) take() (bySale map[string][]string, n int, closed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	bySale, n = m.pending, m.n
	if n > 0 {
		m.pending, m.n = map[string][]string{}, 0
		close(m.taken)
		m.taken = make(chan struct{})
	}
	return bySale, n, m.closed
}

// close tells the marker to write what is gathered and end.
func (m *marks) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.signal()
}

func (m *marks) signal() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// startMarker starts the marker, when the consumer has Redis, bounded by
// ctx. It returns what to hand it marks and stop, which waits until the
// marker has written what it was handed, or ctx has ended.
func (c *Consumer) startMarker(ctx context.Context) (*marks, func()) {
	m := newMarks()
	var wg sync.WaitGroup
	if c.rdb != nil {
		wg.Go(func() { c.marker(ctx, m) })
	}
	return m, func() {
		m.close()
		wg.Wait()
	}
}

// queueMarks hands the marker the orders written (written[i] for
// orders[i]). It waits only while the marker holds markPending ids, bounded
// by ctx; what it could not hand over is counted as a mark error.
func (c *Consumer) queueMarks(ctx context.Context, m *marks, orders []order.Order, written []bool) {
	if c.rdb == nil {
		return
	}
	bySale := map[string][]string{}
	n := 0
	for i, o := range orders {
		if written[i] {
			bySale[o.SaleID] = append(bySale[o.SaleID], o.OrderID)
			n++
		}
	}
	if n == 0 {
		return
	}
	if lost := m.add(ctx, bySale, n); lost > 0 {
		c.markErrors.Add(uint64(lost))
	}
}

// marker writes what m gathers until m is closed and drained, or ctx ends.
func (c *Consumer) marker(ctx context.Context, m *marks) {
	lanes := map[string][]string{} // sale → its buckets' ids
	for {
		bySale, n, closed := m.take()
		if n > 0 {
			if ctx.Err() != nil {
				c.markErrors.Add(uint64(n))
			} else {
				c.markWrite(ctx, lanes, bySale, n)
			}
		}
		if ctx.Err() != nil || closed && n == 0 {
			return
		}
		if !closed {
			select {
			case <-m.wake:
			case <-ctx.Done():
			}
		}
	}
}

// markWrite marks n orders created, bySale, in one pipeline tried up to
// markTries times; a write that keeps failing is counted and given up.
func (c *Consumer) markWrite(ctx context.Context, lanes map[string][]string, bySale map[string][]string, n int) {
	err := retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: time.Second, Tries: markTries},
		func(ctx context.Context) error {
			cctx, cancel := context.WithTimeout(ctx, redisCall)
			defer cancel()
			return c.sadd(cctx, lanes, bySale)
		}, nil)
	if err != nil {
		c.markErrors.Add(uint64(n))
		c.log.Warn("cannot mark orders created; the order view says queued for them",
			zap.Int("sales", len(bySale)), zap.Int("orders", n), zap.Error(err))
		return
	}
	c.marked.Add(uint64(n))
}

// sadd adds the ids of each sale to the created set of the keys that hold
// the order: its sale's, or, for a sale of several buckets, its bucket's.
func (c *Consumer) sadd(ctx context.Context, lanes map[string][]string, bySale map[string][]string) error {
	pipe := c.rdb.Pipeline()
	for sale, ids := range bySale {
		byLane, err := c.byLane(ctx, lanes, sale, ids)
		if err != nil {
			return err
		}
		for lane, ids := range byLane {
			key := c.keys.Created(lane)
			for start := 0; start < len(ids); start += markChunk {
				part := ids[start:min(start+markChunk, len(ids))]
				args := make([]any, len(part))
				for i, id := range part {
					args[i] = id
				}
				pipe.SAdd(ctx, key, args...)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("mark: %w", err)
	}
	return nil
}

// byLane splits the ids of sale by the keys that hold them: an order of a
// sale of several buckets is in its bucket (scripts.OrderBucket), whose id
// the sale's home names; any other in the sale's own. The buckets of a
// sale are read once (they never change) and only when an id names one.
func (c *Consumer) byLane(ctx context.Context, lanes map[string][]string, sale string, ids []string) (map[string][]string, error) {
	out := map[string][]string{}
	var names []string
	known := false
	for _, id := range ids {
		lane := sale
		if b, ok := scripts.OrderBucket(id); ok {
			if !known {
				var err error
				if names, err = c.bucketsOf(ctx, lanes, sale); err != nil {
					return nil, err
				}
				known = true
			}
			if b < len(names) {
				lane = names[b]
			}
		}
		out[lane] = append(out[lane], id)
	}
	return out, nil
}

// bucketsOf returns the ids of sale's buckets, nil for a sale of one (or
// whose home Redis lacks).
func (c *Consumer) bucketsOf(ctx context.Context, lanes map[string][]string, sale string) ([]string, error) {
	if names, ok := lanes[sale]; ok {
		return names, nil
	}
	field, err := c.rdb.HGet(ctx, c.keys.Meta(sale), "names").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("mark: buckets of %s: %w", sale, err)
	}
	names := scripts.BucketNames(field)
	if names == nil {
		// Not remembered: an id that names a bucket is of a sale of
		// several, whose home is not (yet) back after a Redis restart.
		return nil, nil
	}
	if len(lanes) >= markSales {
		clear(lanes)
	}
	lanes[sale] = names
	return names, nil
}
