package sale

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/scripts"
)

// poolToBucket moves units from the pool into bucket b: the debit of the
// pool with a record in the home (move.lua "take"), then creditBucket.
func (s *Store) poolToBucket(ctx context.Context, bs *bucketSet, b int, need int64) (int64, error) {
	id, err := moveID()
	if err != nil {
		return 0, err
	}
	n, err := s.move(ctx, []string{s.keys.Meta(bs.sale), s.keys.Moves(bs.sale)}, "take", id, need, b)
	if err != nil || n == 0 {
		return 0, err
	}
	if err := s.creditBucket(ctx, bs.names[b], bs.sale, id, n); err != nil {
		return 0, err
	}
	return n, nil
}

// creditBucket finishes a move into a bucket: the units into the bucket
// (move.lua "credit", applied once), then the home's record removed.
func (s *Store) creditBucket(ctx context.Context, bucket, sale, id string, n int64) error {
	if _, err := s.move(ctx, []string{s.keys.Meta(bucket), s.keys.Op(bucket, id)}, "credit", id, n); err != nil {
		return err
	}
	if err := s.rdb.HDel(ctx, s.keys.Moves(sale), id).Err(); err != nil {
		return fmt.Errorf("move %s: %w: %w", id, ErrUnavailable, err)
	}
	return nil
}

// bucketToPool moves up to want of bucket j's unsold stock (want 0: all of
// it) into the pool: the debit of the bucket with a record in it (move.lua
// "give"), then creditPool.
func (s *Store) bucketToPool(ctx context.Context, bs *bucketSet, j int, want int64) (int64, error) {
	id, err := moveID()
	if err != nil {
		return 0, err
	}
	bucket := bs.names[j]
	n, err := s.move(ctx, []string{s.keys.Meta(bucket), s.keys.Moves(bucket)}, "give", id, want)
	if err != nil || n == 0 {
		return 0, err
	}
	return n, s.creditPool(ctx, bucket, bs.sale, id, n)
}

// creditPool finishes a move into the pool: the units into the pool
// (move.lua "accept", applied once), then the bucket's record removed.
func (s *Store) creditPool(ctx context.Context, bucket, sale, id string, n int64) error {
	if _, err := s.move(ctx, []string{s.keys.Meta(sale), s.keys.Op(sale, id)}, "accept", id, n); err != nil {
		return err
	}
	if err := s.rdb.HDel(ctx, s.keys.Moves(bucket), id).Err(); err != nil {
		return fmt.Errorf("move %s: %w: %w", id, ErrUnavailable, err)
	}
	return nil
}

// move runs one half of a move and returns the units it moved.
func (s *Store) move(ctx context.Context, keys []string, op, id string, args ...any) (int64, error) {
	m, err := s.loader.Move(ctx, keys, append([]any{op, id}, args...)...)
	if err != nil {
		return 0, fmt.Errorf("move %s %s: %w: %w", op, keys[0], ErrUnavailable, err)
	}
	if err := outcome(m.Code); err != nil {
		if errors.Is(err, ErrNotFound) {
			return 0, fmt.Errorf("move %s %s: %w: sale or bucket missing", op, keys[0], ErrUnavailable)
		}
		return 0, err
	}
	return m.N, nil
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
		for i, bucket := range bs.names {
			cmds[i] = p.HGet(ctx, s.keys.Meta(bucket), "sold")
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

// settleEvery is how often Run settles the half-done moves.
const settleEvery = time.Second

// settle finishes the half-done moves (settleMoves), bounded by a few
// Redis timeouts, and logs a failure: the next round tries again.
func (s *Store) settle(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 4*s.timeout)
	defer cancel()
	if err := s.settleMoves(sctx); err != nil && ctx.Err() == nil {
		s.log.Warn("cannot settle the stock moves of bucketed sales; retrying", zap.Error(err))
	}
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
			if err := s.creditBucket(ctx, bs.names[m.Bucket], sale, id, m.Units); err != nil {
				return err
			}
		}
		for _, bucket := range bs.names {
			gives, err := s.rdb.HGetAll(ctx, s.keys.Moves(bucket)).Result()
			if err != nil {
				return err
			}
			for id, rec := range gives {
				m, err := scripts.ParseMove(rec)
				if err != nil || m.Take || m.At > due {
					continue
				}
				if err := s.creditPool(ctx, bucket, sale, id, m.Units); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
