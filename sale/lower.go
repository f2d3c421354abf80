package sale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flashgate/flashgate/scripts"
)

// Lowering the stock of a sale of several buckets (buckets.go): the home
// decides a stock on moved, the units it handed to the buckets, sold or
// not, since it cannot read what they sold. A stock below moved is decided
// again once the buckets' unsold units are back in the pool, so that, as on
// a sale of one bucket, only units sold refuse it.

// lowerRounds bounds the takings-back of one lowering (lowerBuckets). With
// the home fenced one is enough but for what moves beside it: an order
// cancelled in a bucket after its give, a give of a buyer's refill under
// way; another round takes those back.
const lowerRounds = 4

// lowerBuckets applies u to a sale of several buckets whose home refused
// its stock as below moved, the units handed to the buckets, sold or not:
// decided on moved alone, a lowering to what the sale sold and a few more
// would be refused while buyers keep units in their buckets unsold. So it
// fences the home (no bucket takes from the pool meanwhile), takes every
// unit the buckets hold unsold back into the pool (drain), and asks the
// home again, where moved is now what the buckets sold, and the units of
// orders cancelled since. The stock is applied in one call of the home, as
// on a sale of one bucket; buyers whose bucket runs short meanwhile wait
// for the fence to lift (reserveBucket), they are not refused.
//
// It returns a *StockBelowSoldError when the buckets have sold more than
// the new stock, or an error wrapping ErrUnavailable (also when the units
// kept moving for lowerRounds rounds); a refusal changes no stock. Every
// unit it moves moves by the two-half moves of move.lua, so a crash at any
// point leaves records the settling pass finishes, and a fence that lapses
// by itself at ctx's deadline.
func (s *Store) lowerBuckets(ctx context.Context, bs *bucketSet, u Update) (*View, bool, error) {
	stock := *u.Stock
	// A refusal needs no fence: the buckets' sold, read one after the
	// other, only grow (but by a cancel or an expiry), so a sum above the
	// stock is what they had sold by the last read.
	if sold, err := s.sold(ctx, bs); err != nil || sold > stock {
		return nil, false, belowSold(stock, sold, err)
	}
	id, err := moveID()
	if err != nil {
		return nil, false, err
	}
	home := []string{s.keys.Meta(bs.sale), s.keys.Moves(bs.sale)}
	if _, err := s.move(ctx, home, "fence", id, fenceFor(ctx).Milliseconds()); err != nil {
		return nil, false, err
	}
	defer func() {
		// An unfence that fails leaves a fence that lapses at ctx's
		// deadline, as a crash would: refills pause until then, nothing
		// more.
		_, _ = s.move(ctx, home, "unfence", id)
	}()
	for range lowerRounds {
		if err := s.drain(ctx, bs); err != nil {
			return nil, false, err
		}
		v, created, err := s.upsertOne(ctx, bs.sale, u, "")
		if !errors.Is(err, errStockBelowMoved) {
			return v, created, err
		}
		if sold, err := s.sold(ctx, bs); err != nil || sold > stock {
			return nil, false, belowSold(stock, sold, err)
		}
	}
	return nil, false, fmt.Errorf("update %s: %w: its buckets' units kept moving for %d rounds", bs.sale, ErrUnavailable, lowerRounds)
}

// belowSold is the refusal of a stock below sold, or err when the units
// sold could not be read.
func belowSold(stock, sold int64, err error) error {
	if err != nil {
		return err
	}
	return &StockBelowSoldError{Stock: stock, Sold: sold}
}

// fenceFor is how long a lowering fences its home: until ctx's deadline,
// when the call gives up anyway, so that the fence of a call that died
// outlives it by no more than that.
func fenceFor(ctx context.Context) time.Duration {
	d := time.Second
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	return min(max(d, 10*time.Millisecond), 5*time.Second)
}

// drain takes back into the pool every unit the buckets of bs hold unsold:
// it finishes the takes under way (their units then in a bucket), gives
// back each bucket's unsold stock, and finishes the gives under way. Each
// second half it runs is a no-op if its writer (or the settling pass) ran
// it first, so it may run beside them. The buckets are drained at once,
// each in a goroutine of its own that drain waits for: one bucket's calls
// follow one another, and the call costs the round trips of one bucket,
// not of K.
func (s *Store) drain(ctx context.Context, bs *bucketSet) error {
	recs, err := s.rdb.HGetAll(ctx, s.keys.Moves(bs.sale)).Result()
	if err != nil {
		return fmt.Errorf("moves of %s: %w: %w", bs.sale, ErrUnavailable, err)
	}
	takes := make([]map[string]int64, len(bs.names)) // per bucket: move id → units
	for id, rec := range recs {
		// A record of an unreadable form is left for reconcile to report.
		m, err := scripts.ParseMove(rec)
		if err != nil || !m.Take || m.Bucket >= len(bs.names) {
			continue
		}
		if takes[m.Bucket] == nil {
			takes[m.Bucket] = map[string]int64{}
		}
		takes[m.Bucket][id] = m.Units
	}
	errs := make([]error, len(bs.names))
	var wg sync.WaitGroup
	for j := range bs.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[j] = s.drainBucket(ctx, bs, j, takes[j])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// drainBucket finishes the takes into bucket j (move id → units), then
// gives back its unsold stock, then finishes every give of it under way.
func (s *Store) drainBucket(ctx context.Context, bs *bucketSet, j int, takes map[string]int64) error {
	bucket := bs.names[j]
	for id, n := range takes {
		if err := s.creditBucket(ctx, bucket, bs.sale, id, n); err != nil {
			return err
		}
	}
	if _, err := s.bucketToPool(ctx, bs, j, 0); err != nil {
		return err
	}
	gives, err := s.rdb.HGetAll(ctx, s.keys.Moves(bucket)).Result()
	if err != nil {
		return fmt.Errorf("moves of %s: %w: %w", bucket, ErrUnavailable, err)
	}
	for id, rec := range gives {
		m, err := scripts.ParseMove(rec)
		if err != nil || m.Take {
			continue
		}
		if err := s.creditPool(ctx, bucket, bs.sale, id, m.Units); err != nil {
			return err
		}
	}
	return nil
}
