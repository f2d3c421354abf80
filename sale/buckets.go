package sale

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// A sale of K > 1 buckets (API.md "buckets") spreads its buyers over K
// Redis hash slots, so that one sale hotter than a Redis core can use K
// primaries of a cluster. The layout:
//
//   - The sale's own slot, its home, keeps the settings and the whole stock
//     and sells nothing: its meta says buckets = K, names the buckets and
//     counts moved, the units handed to them. The pool is stock − moved.
//   - Bucket i is a sale of the same scripts in a slot of its own, id
//     "SALE#i.n" ('#' is in no sale id, so no sale can be a bucket; n picks
//     the slot, see bucketNames). Its stock is what the pool handed it, its
//     sold, buyers, orders, outbox, payment window and idempotency keys are
//     its own, and its records name the sale, so that the relay, the
//     consumers and MySQL see orders of the sale.
//   - A buyer always buys in the same bucket (a hash of the user id), so the
//     bucket's per-user record is the buyer's whole: the limit holds across
//     buckets with no cross-slot read.
//   - A bucket that cannot serve a reservation (its stock short) takes a
//     chunk from the pool (the move script); a pool that is empty first
//     takes back the unsold stock of every other bucket. So stock goes to
//     where the buyers are, and only when the pool and every bucket are
//     empty, that is when the whole sale is, does a buyer hear sold_out (or
//     insufficient_stock when the whole sale has fewer units than asked).
//   - An order's id ends in ".i", its bucket, so that its status, payment
//     and cancellation go to the bucket that holds it.
//   - Admin changes go to the home, then to every bucket, before the call
//     returns (fanOut); a view sums the buckets. A stock below what the
//     home has handed to the buckets waits for their unsold units to come
//     back (lower.go): only what they sold can refuse it.
//
// Every move of stock is two script calls on two slots with a record
// between them (move.lua, moves.go); the settling pass (settleMoves, run
// by every process's Store.Run) finishes the moves of a process that died
// between the two, and the second half is a no-op if it had run.

// bucketSet is a sale's buckets, fixed at creation.
type bucketSet struct {
	sale  string
	names []string
	// refill serialises the refills of one bucket on this gateway: of the
	// batches that find a bucket short at once, one moves stock and the
	// others find it there. refills counts the refills of each bucket, and
	// got (guarded by refill) is what the last one moved, so that a batch
	// that waited for another's refill takes its result instead of
	// refilling again.
	refill  []sync.Mutex
	refills []atomic.Uint64
	got     []int64
}

// bucketOf is the bucket a user buys in (scripts.BucketOf).
func (bs *bucketSet) bucketOf(user string) int { return scripts.BucketOf(user, len(bs.names)) }

// orderBucket reads the bucket of an order id of a sale of several buckets
// (scripts.OrderBucket).
func orderBucket(id string) (int, bool) { return scripts.OrderBucket(id) }

// idFor is the id a reservation of user on sale is sent to: the sale
// itself, or, for a sale of several buckets this process has met, the
// user's bucket. A sale it has not met yet is sent home, which answers
// BUCKETED (Reserve then learns the buckets).
func (s *Store) idFor(sale, user string) string {
	if v, ok := s.buckets.Load(sale); ok {
		bs := v.(*bucketSet)
		return bs.names[bs.bucketOf(user)]
	}
	return sale
}

// bucketsOf returns the buckets of sale, read from its home once and then
// kept (a sale's buckets never change); nil for a sale of one bucket. The
// buy path uses it; a sale whose Redis was emptied and that was made again
// is met by the first buy that finds its bucket gone (reserveBucket).
func (s *Store) bucketsOf(ctx context.Context, sale string) (*bucketSet, error) {
	if v, ok := s.buckets.Load(sale); ok {
		return v.(*bucketSet), nil
	}
	return s.bucketsNow(ctx, sale)
}

// bucketsNow reads the buckets of sale from its home, and keeps what it
// read (or forgets them, for a sale of one bucket): the admin calls use it,
// so that they always act on the sale Redis holds.
func (s *Store) bucketsNow(ctx context.Context, sale string) (*bucketSet, error) {
	names, err := s.rdb.HGet(ctx, s.keys.Meta(sale), "names").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buckets of %s: %w: %w", sale, ErrUnavailable, err)
	}
	list := scripts.BucketNames(names)
	if list == nil {
		s.buckets.Delete(sale)
		return nil, nil
	}
	if v, ok := s.buckets.Load(sale); ok && slices.Equal(v.(*bucketSet).names, list) {
		return v.(*bucketSet), nil
	}
	bs := &bucketSet{sale: sale, names: list, refill: make([]sync.Mutex, len(list)),
		refills: make([]atomic.Uint64, len(list)), got: make([]int64, len(list))}
	s.buckets.Store(sale, bs)
	return bs, nil
}

// reserveBucket reserves rs, all of buyers of bucket b, there. A
// reservation the bucket is short for waits for a refill (refillBucket) and
// is tried again, until it is served, or the whole sale cannot serve it
// (sold_out or insufficient_stock, the sale's own answer), or ctx ends
// (503): near the end of a sale the last units may be moving between
// buckets, or be sold meanwhile in the bucket that held them, and a buyer
// is never told sold_out while units are left.
func (s *Store) reserveBucket(ctx context.Context, bs *bucketSet, b int, rs []Reservation, out []Result) error {
	bucket := bs.names[b]
	suffix := "." + strconv.Itoa(b)
	own := make([]Reservation, len(rs))
	for i, r := range rs {
		if _, ok := orderBucket(r.OrderID); !ok {
			r.OrderID += suffix
		}
		own[i] = r
	}
	seen := bs.refills[b].Load()
	if err := s.reserveOn(ctx, bucket, bs.sale, own, out); err != nil {
		return err
	}
	if errors.Is(out[0].Err, ErrNotFound) {
		// The bucket is gone (its Redis was emptied): forget the sale's
		// buckets, so that the next buyer asks its home again.
		s.buckets.CompareAndDelete(bs.sale, bs)
		return nil
	}
	short := make([]int, 0, len(own))
	// Units in a move, or in a bucket busy selling them, are looked for
	// again after a pause of 1 to 16 ms, doubling.
	pause := retry.Backoff{Min: time.Millisecond, Max: 16 * time.Millisecond}
	for {
		short = short[:0]
		var need int64
		for i := range own {
			if errors.Is(out[i].Err, ErrSoldOut) || errors.Is(out[i].Err, ErrInsufficientStock) {
				short = append(short, i)
				need += int64(own[i].Quantity)
			}
		}
		if len(short) == 0 {
			return nil
		}
		fail := func(err error) error {
			for _, i := range short {
				out[i] = Result{Err: err}
			}
			return nil
		}
		got, err := s.refillBucket(ctx, bs, b, need, seen)
		if err != nil {
			return fail(err)
		}
		if got == 0 {
			// Nothing to be had from the pool or the other buckets:
			// what has the whole sale left?
			left, err := s.remaining(ctx, bs)
			if err != nil {
				return fail(err)
			}
			waiting := short[:0]
			for _, i := range short {
				switch {
				case left <= 0:
					out[i] = Result{Err: ErrSoldOut}
				case left < int64(own[i].Quantity):
					out[i] = Result{Err: ErrInsufficientStock}
				default:
					waiting = append(waiting, i)
				}
			}
			if len(waiting) == 0 {
				return nil
			}
			// The units are in a move, or in a bucket busy selling them:
			// look again shortly.
			short = waiting
			if !retry.Sleep(ctx, pause.Next()) {
				return fail(fmt.Errorf("%w: bucket %s short while its sale has %d units (moving between buckets)", ErrUnavailable, bucket, left))
			}
		}
		again := make([]Reservation, len(short))
		res := make([]Result, len(short))
		for j, i := range short {
			again[j] = own[i]
		}
		seen = bs.refills[b].Load()
		if err := s.reserveOn(ctx, bucket, bs.sale, again, res); err != nil {
			// Those retried may have been accepted: promise nothing to
			// them. The others keep their answers.
			return fail(err)
		}
		for j, i := range short {
			out[i] = res[j]
		}
	}
}

// refillBucket moves up to need units, or more (a chunk of the stock),
// into bucket b: from the pool, and when the pool has fewer than need,
// the rest from the other buckets through the pool, each giving what it has
// unsold up to what is still missing (a bucket busy selling keeps the
// rest). It returns the units moved; 0 means nothing was to be had. seen
// is bs.refills[b] as the caller read it before the reservation that found
// the bucket short: a refill since then answers for this one (the caller
// then tries again with what it moved).
func (s *Store) refillBucket(ctx context.Context, bs *bucketSet, b int, need int64, seen uint64) (got int64, err error) {
	bs.refill[b].Lock()
	defer bs.refill[b].Unlock()
	if bs.refills[b].Load() != seen {
		return bs.got[b], nil
	}
	defer func() {
		bs.got[b] = got
		bs.refills[b].Add(1)
	}()
	got, err = s.poolToBucket(ctx, bs, b, need)
	if err != nil || got >= need {
		return got, err
	}
	for k := 1; k < len(bs.names) && got < need; k++ {
		j := (b + k) % len(bs.names)
		n, err := s.bucketToPool(ctx, bs, j, need-got)
		if err != nil {
			return got, err
		}
		if n == 0 {
			continue
		}
		m, err := s.poolToBucket(ctx, bs, b, need-got)
		if err != nil {
			return got, err
		}
		got += m
	}
	return got, nil
}
