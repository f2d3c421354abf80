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

// sampler is the one place in flashgate that samples the outboxes: the set
// of sales and, for each, the length of its outbox and the age of its
// oldest entry. The session loop samples every refreshEvery (the sales to
// serve, which to poll, which to claim from; Stats shows that sample), and
// WriteMetrics samples on each scrape, so that a scrape shows the outboxes
// as they are, as when the gateway sampled them itself. It is safe for
// concurrent use.
type sampler struct {
	rdb  redis.UniversalClient
	keys scripts.Keys
	errs atomic.Uint64
}

// sample is one look at every outbox. It is never changed once taken, so
// any goroutine may read it.
type sample struct {
	at    time.Time
	sales []saleSample
	// agesLost: the round that reads the oldest entries failed, so some
	// OldestAge are 0 that are not. The sample serves the session loop
	// still; a scrape, whose totals would understate the oldest age, does
	// not use it.
	agesLost bool
}

type saleSample struct {
	SaleStats
	// live: the sale exists and has not ended, so its series show even
	// at zero (an ended sale's show only while its outbox holds entries).
	// Read only for a scrape (take with ends).
	live bool
}

// sampleChunk is how many sales one pipeline of a sample asks about, so
// that a Redis holding many thousands of sales answers in pieces it can
// interleave with buyers, and no reply buffer grows with the registry.
const sampleChunk = 500

// take reads one sample, in three rounds whatever the number of sales, each
// round pipelined in chunks of sampleChunk sales: the set, then each
// outbox's length (with the sale's stock and end when ends is set), then the
// oldest entry of each outbox that has one (its id is the Redis time of the
// XADD, in ms). It blocks until then or ctx ends and returns the first Redis
// error of the first two rounds; a failure of the third costs the ages only
// (agesLost).
func (s *sampler) take(ctx context.Context, ends bool) (*sample, error) {
	sales, err := s.rdb.SMembers(ctx, s.keys.Sales()).Result()
	if err != nil {
		s.errs.Add(1)
		return nil, fmt.Errorf("relay: read the set of sales: %w", err)
	}
	lens := make([]*redis.IntCmd, len(sales))
	metas := make([]*redis.SliceCmd, len(sales))
	err = chunked(ctx, s.rdb, len(sales), func(pipe redis.Pipeliner, i int) {
		lens[i] = pipe.XLen(ctx, s.keys.Outbox(sales[i]))
		if ends {
			metas[i] = pipe.HMGet(ctx, s.keys.Meta(sales[i]), "stock", "ends")
		}
	})
	if err != nil {
		s.errs.Add(1)
		return nil, fmt.Errorf("relay: read the outbox lengths: %w", err)
	}
	now := time.Now()
	out := make([]saleSample, len(sales))
	var busy []int // the sales whose outbox has entries
	for i, sale := range sales {
		n := lens[i].Val()
		out[i] = saleSample{SaleStats: SaleStats{Sale: sale, Pending: n}}
		if ends {
			out[i].live = live(metas[i].Val(), now)
		}
		if n > 0 {
			busy = append(busy, i)
		}
	}
	firsts := make([]*redis.XMessageSliceCmd, len(busy))
	smp := &sample{at: now, sales: out}
	if err := chunked(ctx, s.rdb, len(busy), func(pipe redis.Pipeliner, j int) {
		firsts[j] = pipe.XRangeN(ctx, s.keys.Outbox(sales[busy[j]]), "-", "+", 1)
	}); err != nil {
		s.errs.Add(1)
		smp.agesLost = true
	}
	for j, i := range busy {
		if firsts[j] == nil {
			break // not sent
		}
		if msgs := firsts[j].Val(); len(msgs) > 0 {
			if ms, ok := idMillis(msgs[0].ID); ok {
				out[i].OldestAge = max(0, now.Sub(time.UnixMilli(ms)))
			}
		}
	}
	return smp, nil
}

// chunked queues the commands of items 0..n-1 (add(pipe, i)) on pipelines
// of sampleChunk items each and runs them one after the other, all within
// ctx. It returns the first error, after which it sends nothing more: the
// items not sent have no command.
func chunked(ctx context.Context, rdb redis.UniversalClient, n int, add func(pipe redis.Pipeliner, i int)) error {
	for lo := 0; lo < n; lo += sampleChunk {
		pipe := rdb.Pipeline()
		for i := lo; i < min(n, lo+sampleChunk); i++ {
			add(pipe, i)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// live reports whether a sale whose meta hash holds stock and ends (as
// HMGET returns them) exists and has not ended at now.
func live(meta []any, now time.Time) bool {
	if len(meta) != 2 || meta[0] == nil {
		return false
	}
	s, _ := meta[1].(string)
	ends, _ := strconv.ParseInt(s, 10, 64)
	return ends <= 0 || now.UnixMilli() < ends
}

func idMillis(id string) (int64, bool) {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	return n, err == nil
}
