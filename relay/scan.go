package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/scripts"
)

// scanner finds the outboxes with entries that nobody told this relay of
// (Wrote): those of a gateway that died before its relay read them or
// with them pending, other processes' writes, and whatever is there when
// the relay starts. It walks the registry of sales (scripts.Keys.Sales)
// with SSCAN and looks at the length of each outbox on its way; one with
// entries joins the sales the relay works on.
//
// The first walk, at start, goes as fast as Redis answers, lookChunk sales
// a step, so that a restarted gateway serves at once what is there. The
// walks after it are spread over every: each step (every min(refreshEvery,
// every)) looks at its share of the registry, SCARD × step ÷ every sales
// (the SCARD of the step, so that the pace follows a registry that grows
// during a walk; the fractions carried from step to step), but at least
// floor of them (all, when there are fewer): a small registry is walked
// every step at a cost that does not matter. So an idle relay costs about
// max(SCARD ÷ every, min(SCARD, floor) ÷ step) XLEN a second, and one
// SCARD a step, with no burst. SSCAN's
// COUNT is a hint (a small set comes back whole): the members it returns
// beyond a step's share wait for the next steps. It is owned by Run's
// goroutine; only its counters are read elsewhere.
type scanner struct {
	rdb   redis.UniversalClient
	keys  scripts.Keys
	every time.Duration // one walk of the whole registry, after the first
	floor int           // sales a step looks at at least: scanFloor; tests set 0

	// The walk under way.
	credit float64  // sales the steps so far were due to look at but have not
	cursor uint64   // SSCAN cursor
	swept  bool     // SSCAN's cursor came back to 0
	queue  []string // members SSCAN returned, not looked at yet

	walks atomic.Uint64
	errs  atomic.Uint64
}

// scanFloor is the scanner's floor: a registry of up to 50 sales is walked
// every second, one of 3,000 or more (at the default ScanEvery) is paced.
const scanFloor = 50

// scanCalls bounds the SSCAN calls of one step: a sparse hash table
// returns fewer members than COUNT, so a step may call it again.
const scanCalls = 10

// stepEvery is the pause between two steps of a walk after the first;
// during the first there is none.
func (s *scanner) stepEvery() time.Duration {
	if s.walks.Load() == 0 {
		return 0
	}
	return min(refreshEvery, s.every)
}

// step looks at the next share of the registry: it records the length of
// each outbox in it in ss (ss.looked). It blocks until then or ctx ends
// and returns the first Redis error; what it did not look at is looked at
// by the next step.
func (s *scanner) step(ctx context.Context, ss *sales, now time.Time) error {
	first := s.walks.Load() == 0
	want := lookChunk
	var share, credit float64
	if !first {
		n, err := s.rdb.SCard(ctx, s.keys.Sales()).Result()
		if err != nil {
			s.errs.Add(1)
			return fmt.Errorf("relay: count the sales: %w", err)
		}
		share = max(float64(n)*float64(s.stepEvery())/float64(s.every), float64(min(n, int64(s.floor))))
		credit = s.credit + share
		want = int(credit)
	}
	for calls := 0; calls < scanCalls && len(s.queue) < want && !s.swept; calls++ {
		got, next, err := s.rdb.SScan(ctx, s.keys.Sales(), s.cursor, "", int64(want-len(s.queue))).Result()
		if err != nil {
			s.errs.Add(1)
			return fmt.Errorf("relay: scan the sales: %w", err)
		}
		s.queue = append(s.queue, got...)
		s.cursor, s.swept = next, next == 0
	}
	ids := s.queue[:min(want, len(s.queue))]
	lens := make([]*redis.IntCmd, len(ids))
	if err := chunked(ctx, s.rdb, len(ids), func(pipe redis.Pipeliner, i int) {
		lens[i] = pipe.XLen(ctx, s.keys.Outbox(ids[i]))
	}); err != nil {
		s.errs.Add(1)
		return fmt.Errorf("relay: scan the outbox lengths: %w", err)
	}
	for i, id := range ids {
		ss.looked(id, lens[i].Val(), now)
	}
	s.queue = append(s.queue[:0], s.queue[len(ids):]...)
	// What a sparse table kept SSCAN from returning is carried, at most
	// one step's share (or one sale, for a registry looked at less than
	// once a step): a failed step is not made up in a burst.
	if !first {
		s.credit = min(credit-float64(len(ids)), max(share, 1))
	}
	if s.swept && len(s.queue) == 0 {
		// The walk is over: the next step starts another.
		s.walks.Add(1)
		s.cursor, s.swept, s.credit = 0, false, 0
	}
	return nil
}
