package relay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/scripts"
)

// looker looks at the outboxes the relay works on (sales) that are due for
// a look (sale.lookDue: seen with entries, a failed read, entries held or
// a read owed for a second): each one's length and the age of its oldest
// entry, every refreshEvery. Those it sees with entries stay active, and
// are read when they hold more than the relay does; what it sees is what
// Stats and WriteMetrics show. Its Redis calls grow with the outboxes that
// hold entries, never with the sales in the registry (the scan, scan.go,
// pays for those) nor with those written to lately. It is owned by Run's
// goroutine; only its error count is read elsewhere.
type looker struct {
	rdb  redis.UniversalClient
	keys scripts.Keys
	errs atomic.Uint64
}

// lookChunk is how many outboxes one pipeline of a look or a scan step asks
// about, so that Redis answers in pieces it can interleave with buyers, and
// no reply buffer grows with the number of sales.
const lookChunk = 500

// look reads the length of every outbox of ss due for a look, then the oldest entry of
// those that have one (its id is the Redis time of its XADD, in ms), each
// round pipelined in chunks of lookChunk, and records them in ss. On an
// error it returns it, having recorded the lengths when only the second
// round failed. It blocks until then or ctx ends.
func (l *looker) look(ctx context.Context, ss *sales, now time.Time) error {
	ids := ss.toLook(now)
	if len(ids) == 0 {
		return nil
	}
	lens := make([]*redis.IntCmd, len(ids))
	if err := chunked(ctx, l.rdb, len(ids), func(pipe redis.Pipeliner, i int) {
		lens[i] = pipe.XLen(ctx, l.keys.Outbox(ids[i]))
	}); err != nil {
		l.errs.Add(1)
		return fmt.Errorf("relay: look at the outbox lengths: %w", err)
	}
	var busy []int // the outboxes with entries
	for i, id := range ids {
		n := lens[i].Val()
		ss.looked(id, n, now)
		if n > 0 {
			busy = append(busy, i)
		}
	}
	firsts := make([]*redis.XMessageSliceCmd, len(busy))
	if err := chunked(ctx, l.rdb, len(busy), func(pipe redis.Pipeliner, j int) {
		firsts[j] = pipe.XRangeN(ctx, l.keys.Outbox(ids[busy[j]]), "-", "+", 1)
	}); err != nil {
		l.errs.Add(1)
		return fmt.Errorf("relay: look at the oldest outbox entries: %w", err)
	}
	for j, i := range busy {
		msgs := firsts[j].Val()
		if len(msgs) == 0 {
			continue // emptied meanwhile: the next look says so
		}
		if ms, ok := idMillis(msgs[0].ID); ok {
			ss.m[ids[i]].oldest = ms
		}
	}
	return nil
}

// chunked queues the commands of items 0..n-1 (add(pipe, i)) on pipelines
// of lookChunk items each and runs them one after the other, all within
// ctx. It returns the first error, after which it sends nothing more: the
// items not sent have no command.
func chunked(ctx context.Context, rdb redis.UniversalClient, n int, add func(pipe redis.Pipeliner, i int)) error {
	for lo := 0; lo < n; lo += lookChunk {
		pipe := rdb.Pipeline()
		for i := lo; i < min(n, lo+lookChunk); i++ {
			add(pipe, i)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

func idMillis(id string) (int64, bool) {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}
