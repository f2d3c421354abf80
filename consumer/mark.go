package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// The status marker marks the orders a batch wrote created in Redis, for
// status polling: best effort, on a goroutine of its own, off the
// acknowledgement path.
const (
	// markQueue bounds the batches waiting to be marked created in Redis;
	// beyond it marks are dropped (status polling then says queued).
	markQueue = 256
	// markChunk bounds the order ids of one mark script call.
	markChunk = 500
	// markTries is how often one batch's mark is tried.
	markTries = 3
	// redisCall bounds one mark call.
	redisCall = 2 * time.Second
)

// mark is one batch's orders of one sale, to mark created in Redis.
type mark struct {
	sale string
	ids  []string
}

// startMarker starts the marker, when the consumer has Redis, bounded by
// ctx. It returns the queue to hand it marks and stop, which closes the
// queue and waits until the marker has drained it or ctx has ended.
func (c *Consumer) startMarker(ctx context.Context) (marks chan<- mark, stop func()) {
	q := make(chan mark, markQueue)
	var wg sync.WaitGroup
	if c.rdb != nil {
		wg.Go(func() { c.marker(ctx, q) })
	}
	return q, func() {
		close(q)
		wg.Wait()
	}
}

// queueMarks hands the marker the orders written (written[i] for
// orders[i]), one mark per sale, without blocking: when the queue is full
// the mark is dropped and counted.
func (c *Consumer) queueMarks(marks chan<- mark, orders []order.Order, written []bool) {
	if c.rdb == nil {
		return
	}
	bySale := map[string][]string{}
	for i, o := range orders {
		if written[i] {
			bySale[o.SaleID] = append(bySale[o.SaleID], o.OrderID)
		}
	}
	for sale, ids := range bySale {
		select {
		case marks <- mark{sale: sale, ids: ids}:
		default:
			c.markDropped.Add(uint64(len(ids)))
			c.log.Warn("mark queue full; orders stay 'queued' for status polling", zap.String("sale", sale), zap.Int("orders", len(ids)))
		}
	}
}

// marker marks orders created until marks is closed and drained or ctx
// ends. A mark that keeps failing is dropped: it only affects what status
// polling says, never the orders.
func (c *Consumer) marker(ctx context.Context, marks <-chan mark) {
	for m := range marks {
		if ctx.Err() != nil {
			c.markErrors.Add(uint64(len(m.ids)))
			continue
		}
		err := retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: time.Second, Tries: markTries},
			func(ctx context.Context) error { return c.mark(ctx, m) }, nil)
		if err != nil {
			c.markErrors.Add(uint64(len(m.ids)))
			c.log.Warn("cannot mark orders created; status polling says queued for them",
				zap.String("sale", m.sale), zap.Int("orders", len(m.ids)), zap.Error(err))
			continue
		}
		c.marked.Add(uint64(len(m.ids)))
	}
}

func (c *Consumer) mark(ctx context.Context, m mark) error {
	for start := 0; start < len(m.ids); start += markChunk {
		ids := m.ids[start:min(start+markChunk, len(m.ids))]
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		cctx, cancel := context.WithTimeout(ctx, redisCall)
		_, err := c.loader.Mark(cctx, []string{c.keys.Orders(m.sale)}, args...)
		if errors.Is(err, scripts.ErrNotLoaded) {
			if _, err = c.loader.Load(cctx); err == nil {
				_, err = c.loader.Mark(cctx, []string{c.keys.Orders(m.sale)}, args...)
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("mark %s: %w", m.sale, err)
		}
	}
	return nil
}
