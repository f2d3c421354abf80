package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

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
//     back (buckets_lower.go): only what they sold can refuse it.
//
// Every move of stock is two script calls on two slots with a record
// between them (move.lua); the settling pass (settleMoves, run by every
// gateway's sweeper) finishes the moves of a process that died between the
// two, and the second half is a no-op if it had run.

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

// bucketOf is the bucket a user buys in.
func (bs *bucketSet) bucketOf(user string) int {
	h := fnv.New32a()
	h.Write([]byte(user))
	return int(h.Sum32() % uint32(len(bs.names)))
}

// laneSale splits a bucket id "SALE#i.n" into the sale and i; ok is false
// for a sale id.
func laneSale(lane string) (sale string, bucket int, ok bool) { return scripts.SplitBucket(lane) }

// saleOf is the sale of a bucket id, or the id itself.
func saleOf(lane string) string { return scripts.SaleOf(lane) }

// orderBucket reads the bucket of an order id of a sale of several buckets
// (the ".i" its bucket gave it); ok is false for an id without one.
func orderBucket(id string) (int, bool) {
	i := strings.LastIndexByte(id, '.')
	if i < 0 || i == len(id)-1 || len(id)-i > 3 {
		return 0, false
	}
	b, err := strconv.Atoi(id[i+1:])
	return b, err == nil && b >= 0
}

// lane is the id a reservation of user on sale is sent to: the sale itself,
// or, for a sale of several buckets this gateway has met, the user's
// bucket. A sale it has not met yet is sent home, which answers BUCKETED
// (Reserve then learns the buckets).
func (s *Store) lane(sale, user string) string {
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

// Reserve applies rs on lane (a sale, or one of its buckets) and writes one
// Result per reservation into out (len(out) ≥ len(rs)). A sale of one bucket
// is one atomic script call. A sale of several is one call per bucket its
// buyers are in, and more where a bucket has to draw stock from the pool
// first; each reservation is still decided atomically and exactly once. It
// returns an error wrapping ErrUnavailable when Redis could not answer, or
// answered what the gateway cannot read; then no Result is set and nothing
// may be promised to the buyers. It blocks for the script calls, bounded by
// ctx.
func (s *Store) Reserve(ctx context.Context, lane string, rs []Reservation, out []Result) error {
	if sale, b, ok := laneSale(lane); ok {
		bs, err := s.bucketsOf(ctx, sale)
		if err != nil {
			return err
		}
		if bs == nil || b >= len(bs.names) {
			return fmt.Errorf("reserve %s: %w: no such bucket", lane, ErrUnavailable)
		}
		return s.reserveBucket(ctx, bs, b, rs, out)
	}
	if err := s.reserveOn(ctx, lane, lane, rs, out); err != nil {
		return err
	}
	var bs *bucketSet
	for i := range rs {
		if !errors.Is(out[i].Err, errBucketed) {
			continue
		}
		if bs == nil {
			var err error
			if bs, err = s.bucketsOf(ctx, lane); err != nil {
				return err
			}
			if bs == nil {
				return fmt.Errorf("reserve %s: %w: home answered BUCKETED but names no buckets", lane, ErrUnavailable)
			}
		}
		if err := s.reserveBucket(ctx, bs, bs.bucketOf(rs[i].UserID), rs[i:i+1], out[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// reserveBucket reserves rs, all of buyers of bucket b, there. A
// reservation the bucket is short for waits for a refill (refillBucket) and
// is tried again, until it is served, or the whole sale cannot serve it
// (sold_out or insufficient_stock, the sale's own answer), or ctx ends
// (503): near the end of a sale the last units may be moving between
// buckets, or be sold meanwhile in the bucket that held them, and a buyer
// is never told sold_out while units are left.
func (s *Store) reserveBucket(ctx context.Context, bs *bucketSet, b int, rs []Reservation, out []Result) error {
	lane := bs.names[b]
	suffix := "." + strconv.Itoa(b)
	own := make([]Reservation, len(rs))
	for i, r := range rs {
		if _, ok := orderBucket(r.OrderID); !ok {
			r.OrderID += suffix
		}
		own[i] = r
	}
	seen := bs.refills[b].Load()
	if err := s.reserveOn(ctx, lane, bs.sale, own, out); err != nil {
		return err
	}
	if errors.Is(out[0].Err, ErrNotFound) {
		// The bucket is gone (its Redis was emptied): forget the sale's
		// buckets, so that the next buyer asks its home again.
		s.buckets.CompareAndDelete(bs.sale, bs)
		return nil
	}
	short := make([]int, 0, len(own))
	pause := time.Millisecond
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
			select {
			case <-ctx.Done():
				return fail(fmt.Errorf("%w: bucket %s short while its sale has %d units (moving between buckets)", ErrUnavailable, lane, left))
			case <-time.After(pause):
			}
			pause = min(2*pause, 16*time.Millisecond)
		}
		again := make([]Reservation, len(short))
		res := make([]Result, len(short))
		for j, i := range short {
			again[j] = own[i]
		}
		seen = bs.refills[b].Load()
		if err := s.reserveOn(ctx, lane, bs.sale, again, res); err != nil {
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
	got, err = s.take(ctx, bs, b, need)
	if err != nil || got >= need {
		return got, err
	}
	for k := 1; k < len(bs.names) && got < need; k++ {
		j := (b + k) % len(bs.names)
		n, err := s.giveBack(ctx, bs, j, need-got)
		if err != nil {
			return got, err
		}
		if n == 0 {
			continue
		}
		m, err := s.take(ctx, bs, b, need-got)
		if err != nil {
			return got, err
		}
		got += m
	}
	return got, nil
}

// take moves units from the pool into bucket b: a record in the home, the
// credit in the bucket, the record removed.
func (s *Store) take(ctx context.Context, bs *bucketSet, b int, need int64) (int64, error) {
	id, err := moveID()
	if err != nil {
		return 0, err
	}
	n, err := s.move(ctx, []string{s.keys.Meta(bs.sale), s.keys.Moves(bs.sale)}, "take", id, need, b)
	if err != nil || n == 0 {
		return 0, err
	}
	if err := s.credit(ctx, bs.names[b], bs.sale, id, n); err != nil {
		return 0, err
	}
	return n, nil
}

// credit finishes a take: the units into the bucket (once), then the
// home's record removed.
func (s *Store) credit(ctx context.Context, lane, sale, id string, n int64) error {
	if _, err := s.move(ctx, []string{s.keys.Meta(lane), s.keys.Op(lane, id)}, "credit", id, n); err != nil {
		return err
	}
	if err := s.rdb.HDel(ctx, s.keys.Moves(sale), id).Err(); err != nil {
		return fmt.Errorf("move %s: %w: %w", id, ErrUnavailable, err)
	}
	return nil
}

// giveBack moves up to want of bucket j's unsold stock (want 0: all of it)
// into the pool.
func (s *Store) giveBack(ctx context.Context, bs *bucketSet, j int, want int64) (int64, error) {
	id, err := moveID()
	if err != nil {
		return 0, err
	}
	lane := bs.names[j]
	n, err := s.move(ctx, []string{s.keys.Meta(lane), s.keys.Moves(lane)}, "give", id, want)
	if err != nil || n == 0 {
		return 0, err
	}
	return n, s.accept(ctx, lane, bs.sale, id, n)
}

// accept finishes a give: the units into the pool (once), then the
// bucket's record removed.
func (s *Store) accept(ctx context.Context, lane, sale, id string, n int64) error {
	if _, err := s.move(ctx, []string{s.keys.Meta(sale), s.keys.Op(sale, id)}, "accept", id, n); err != nil {
		return err
	}
	if err := s.rdb.HDel(ctx, s.keys.Moves(lane), id).Err(); err != nil {
		return fmt.Errorf("move %s: %w: %w", id, ErrUnavailable, err)
	}
	return nil
}

// move runs one half of a move and returns the units it moved.
func (s *Store) move(ctx context.Context, keys []string, op, id string, args ...any) (int64, error) {
	v, err := s.loader.Run(ctx, scripts.Move, keys, append([]any{op, id}, args...)...)
	if err != nil {
		return 0, fmt.Errorf("move %s %s: %w: %w", op, keys[0], ErrUnavailable, err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, fmt.Errorf("move %s %s: %w: reply %#v", op, keys[0], ErrUnavailable, v)
	}
	code, ok1 := a[0].(int64)
	n, ok2 := a[1].(int64)
	if !ok1 || !ok2 || n < 0 {
		return 0, fmt.Errorf("move %s %s: %w: reply %#v", op, keys[0], ErrUnavailable, v)
	}
	if err := outcome(scripts.Code(code)); err != nil {
		if errors.Is(err, ErrNotFound) {
			return 0, fmt.Errorf("move %s %s: %w: sale or bucket missing", op, keys[0], ErrUnavailable)
		}
		return 0, err
	}
	return n, nil
}

// moveID names one move: unique, so that its second half applies once.
func moveID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("move id: %w: %w", ErrUnavailable, err)
	}
	return hex.EncodeToString(b[:]), nil
}

// remaining is the whole sale's stock not sold: the home's stock minus what
// every bucket sold.
func (s *Store) remaining(ctx context.Context, bs *bucketSet) (int64, error) {
	stock, err := s.rdb.HGet(ctx, s.keys.Meta(bs.sale), "stock").Int64()
	if err != nil {
		return 0, fmt.Errorf("stock of %s: %w: %w", bs.sale, ErrUnavailable, err)
	}
	sold, err := s.sold(ctx, bs)
	return stock - sold, err
}

// sold is what the buckets of bs have sold, each read on its own, all in
// one pipeline (on a cluster, one per primary, at once).
func (s *Store) sold(ctx context.Context, bs *bucketSet) (int64, error) {
	cmds := make([]*redis.StringCmd, len(bs.names))
	// Each command's own error is read below; the pipeline's is the first
	// of them.
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, lane := range bs.names {
			cmds[i] = p.HGet(ctx, s.keys.Meta(lane), "sold")
		}
		return nil
	})
	var total int64
	for i, cmd := range cmds {
		sold, err := cmd.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("sold of %s: %w: %w", bs.names[i], ErrUnavailable, err)
		}
		total += sold
	}
	return total, nil
}

// settleAge is how old a move record must be before the settling pass
// finishes it: its writer finishes it within a Redis timeout, or died.
// Store.settleAge is it, but for tests.
const settleAge = 5 * time.Second

// settleMoves finishes the half-done moves of every sale of several buckets
// (Keys.Bucketed) whose record is older than settleAge. Each second half is
// a no-op if it had run, so any number of gateways may settle at once, and
// beside a writer that is only slow.
func (s *Store) settleMoves(ctx context.Context) error {
	sales, err := s.rdb.SMembers(ctx, s.keys.Bucketed()).Result()
	if err != nil {
		return err
	}
	// A record of an unreadable form is left for reconcile to report.
	due := time.Now().Unix() - int64(s.settleAge/time.Second)
	for _, sale := range sales {
		bs, err := s.bucketsOf(ctx, sale)
		if err != nil {
			return err
		}
		if bs == nil {
			continue
		}
		takes, err := s.rdb.HGetAll(ctx, s.keys.Moves(sale)).Result()
		if err != nil {
			return err
		}
		for id, rec := range takes {
			m, err := scripts.ParseMove(rec)
			if err != nil || !m.Take || m.At > due || m.Bucket >= len(bs.names) {
				continue
			}
			if err := s.credit(ctx, bs.names[m.Bucket], sale, id, m.Units); err != nil {
				return err
			}
		}
		for _, lane := range bs.names {
			gives, err := s.rdb.HGetAll(ctx, s.keys.Moves(lane)).Result()
			if err != nil {
				return err
			}
			for id, rec := range gives {
				m, err := scripts.ParseMove(rec)
				if err != nil || m.Take || m.At > due {
					continue
				}
				if err := s.accept(ctx, lane, sale, id, m.Units); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// bucketNames chooses the ids of a new sale's k buckets. On a cluster each
// is placed on a primary of its own where there are enough (bucket i on
// the i-th primary after one the sale id picks): "SALE#i.n" with the
// smallest n whose slot is there. Random tags would put 3 buckets on 3
// distinct primaries of 3 only 2 times in 9. Elsewhere n is 0.
func (s *Store) bucketNames(ctx context.Context, sale string, k int) ([]string, error) {
	names := make([]string, k)
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		for i := range names {
			names[i] = sale + "#" + strconv.Itoa(i) + ".0"
		}
		return names, nil
	}
	ps, err := primaries(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("buckets of %s: %w: read the slot map: %w", sale, ErrUnavailable, err)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("buckets of %s: %w: the cluster has no primaries", sale, ErrUnavailable)
	}
	h := fnv.New32a()
	h.Write([]byte(sale))
	first := int(h.Sum32() % uint32(len(ps)))
	for i := range names {
		p := ps[(first+i)%len(ps)]
		for n := 0; ; n++ {
			if n == 1000 {
				return nil, fmt.Errorf("buckets of %s: %w: no tag found for bucket %d", sale, ErrUnavailable, i)
			}
			name := sale + "#" + strconv.Itoa(i) + "." + strconv.Itoa(n)
			slot := int(hashSlot(name))
			in := false
			for _, r := range p.ranges {
				if slot >= r[0] && slot <= r[1] {
					in = true
					break
				}
			}
			if in {
				names[i] = name
				break
			}
		}
	}
	return names, nil
}

// primary is one primary of a cluster with its slot ranges.
type primary struct {
	id     string
	ranges [][2]int
}

// primaries reads the cluster's primaries from CLUSTER SHARDS, sorted by
// node id, so that every gateway places the buckets of a sale alike.
func primaries(ctx context.Context, cc *redis.ClusterClient) ([]primary, error) {
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return nil, err
	}
	var ps []primary
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" || len(sh.Slots) == 0 {
				continue
			}
			p := primary{id: n.ID}
			for _, r := range sh.Slots {
				p.ranges = append(p.ranges, [2]int{int(r.Start), int(r.End)})
			}
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b primary) int { return strings.Compare(a.id, b.id) })
	return ps, nil
}

// hashSlot is Redis Cluster's slot of a key whose hash tag is tag:
// CRC16-CCITT (XMODEM) mod 16384, as the cluster specification gives it.
func hashSlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
