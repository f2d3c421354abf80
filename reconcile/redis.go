package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// readHome reads the sale's own meta hash: whether it exists and, for a
// sale of several buckets, the buckets' ids (its field names, as
// sale/buckets.go writes them), its stock and moved.
func (r *Report) readHome(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys) (bool, error) {
	pipe := rdb.TxPipeline()
	exists := pipe.Exists(ctx, keys.Meta(r.Sale))
	meta := pipe.HMGet(ctx, keys.Meta(r.Sale), "buckets", "names", "stock", "moved")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("redis: %w", err)
	}
	m := meta.Val()
	if len(m) != 4 {
		return exists.Val() == 1, nil
	}
	buckets := num(m[0])
	names, _ := m[1].(string)
	if buckets <= 1 && names == "" {
		return exists.Val() == 1, nil
	}
	lanes := strings.Split(names, ",")
	if len(lanes) < 2 || int64(len(lanes)) != buckets || slices.Contains(lanes, "") {
		return false, fmt.Errorf("redis: the sale has %d buckets, its meta names %q", buckets, names)
	}
	r.Buckets, r.Lanes = len(lanes), lanes
	r.Stock, r.Moved = num(m[2]), num(m[3])
	return true, nil
}

// readSlot adds the figures, orders, users and outbox of slot (the sale, or
// one of its buckets) to r, orders and inOutbox: one MULTI for the figures,
// then scans for the details.
func (r *Report) readSlot(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys, slot string,
	orders map[string]*accepted, inOutbox map[string]map[string]bool) error {
	pipe := rdb.TxPipeline()
	meta := pipe.HMGet(ctx, keys.Meta(slot), "sold", "pending", "paid", "cancelled", "expired", "stock")
	buyers := pipe.HLen(ctx, keys.Users(slot))
	due := pipe.ZCard(ctx, keys.Due(slot))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis %s: %w", slot, err)
	}
	if m := meta.Val(); len(m) == 6 {
		r.Sold += num(m[0])
		for i, st := range States[1:] {
			r.Counters[st] += num(m[i+1])
		}
		if slot != r.Sale {
			r.LaneStock += num(m[5])
		}
	}
	r.Buyers += buyers.Val()
	r.Due += due.Val()

	err := hscan(ctx, rdb, keys.Orders(slot), func(id, v string) {
		if prev, dup := orders[id]; dup {
			// A scan may return a field twice; two buckets must never
			// hold the same order.
			if prev.slot != slot {
				r.Doubled++
				r.example("doubled", id, prev.slot+", "+slot)
			}
			return
		}
		rec, err := scripts.ParseRecord(v)
		orders[id] = &accepted{rec: rec, bad: err != nil, slot: slot}
		r.Accepted++
		r.AcceptedUnits += rec.Quantity
		if err != nil {
			r.BadRecords++
			r.example("bad", id, "")
			return
		}
		r.States[rec.State]++
		if order.Live(rec.State) {
			r.LiveOrders++
			r.LiveUnits += rec.Quantity
		}
	})
	if err != nil {
		return fmt.Errorf("orders hash of %s: %w", slot, err)
	}
	held := map[string]int64{}
	err = hscan(ctx, rdb, keys.Users(slot), func(user, v string) {
		held[user], _ = strconv.ParseInt(v, 10, 64)
	})
	if err != nil {
		return fmt.Errorf("users hash of %s: %w", slot, err)
	}
	for _, n := range held {
		r.UserUnits += n
	}
	for start := "-"; ; {
		msgs, err := rdb.XRangeN(ctx, keys.Outbox(slot), start, "+", 1000).Result()
		if err != nil {
			return fmt.Errorf("outbox of %s: %w", slot, err)
		}
		for _, m := range msgs {
			os, err := order.FromStreamEntry(m.Values)
			if err != nil {
				r.OutboxEntries++
				r.OutboxBad++
				continue
			}
			r.OutboxEntries += int64(len(os))
			for _, o := range os {
				if inOutbox[o.OrderID] == nil {
					inOutbox[o.OrderID] = map[string]bool{}
				}
				inOutbox[o.OrderID][o.State] = true
			}
		}
		if len(msgs) < 1000 {
			break
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
	return nil
}

// readCreated notes which orders of slot its created set holds (SSCAN, in
// pages): the view says created for them. An id of the set with no record
// (a Redis that lost the record, not the mark) has no view, and is left out.
func readCreated(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys, slot string, orders map[string]*accepted) error {
	var cursor uint64
	for {
		ids, next, err := rdb.SScan(ctx, keys.Created(slot), cursor, "*", 1000).Result()
		if err != nil {
			return fmt.Errorf("created set of %s: %w", slot, err)
		}
		for _, id := range ids {
			if a := orders[id]; a != nil && a.slot == slot {
				a.marked = true
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// MarkQueued marks created, in their slots' created sets, the orders r
// found in MySQL whose view said queued (Report.Queued): what a consumer's
// lost mark left (a consumer killed between its acknowledgement and its
// mark, a mark that failed past its tries, or one a restarted Redis lost
// with its last writes). Only orders with a row are marked, so the view
// never says created of an order not in MySQL. It returns how many ids it
// sent; it blocks for one pipeline and is safe for concurrent use.
func MarkQueued(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys, r *Report) (int, error) {
	pipe := rdb.Pipeline()
	n := 0
	for slot, ids := range r.queued {
		for lo := 0; lo < len(ids); lo += 1000 {
			part := ids[lo:min(lo+1000, len(ids))]
			args := make([]any, len(part))
			for i, id := range part {
				args[i] = id
			}
			pipe.SAdd(ctx, keys.Created(slot), args...)
			n += len(part)
		}
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("mark %s: %w", r.Sale, err)
	}
	return n, nil
}

// readMoves counts in r.Moving the units of the moves of a sale of several
// buckets that are half done (scripts/lua/move.lua): a take recorded in the
// home whose credit has not reached its bucket, a give recorded in a bucket
// whose units the home has not accepted. A record whose second half ran
// (its op key exists) but that is not removed yet holds no unit: they are
// in the bucket's stock, or back in the pool.
func (r *Report) readMoves(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys) error {
	done := func(slot, id string) (bool, error) {
		n, err := rdb.Exists(ctx, keys.Op(slot, id)).Result()
		return n == 1, err
	}
	takes, err := rdb.HGetAll(ctx, keys.Moves(r.Sale)).Result()
	if err != nil {
		return fmt.Errorf("moves of %s: %w", r.Sale, err)
	}
	for id, rec := range takes {
		m, err := scripts.ParseMove(rec)
		if err != nil || !m.Take || m.Bucket >= len(r.Lanes) {
			r.MovesBad++
			r.example("move", id, rec)
			continue
		}
		credited, err := done(r.Lanes[m.Bucket], id)
		if err != nil {
			return fmt.Errorf("move %s: %w", id, err)
		}
		if !credited {
			r.Moving += m.Units
		}
	}
	for _, lane := range r.Lanes {
		gives, err := rdb.HGetAll(ctx, keys.Moves(lane)).Result()
		if err != nil {
			return fmt.Errorf("moves of %s: %w", lane, err)
		}
		for id, rec := range gives {
			m, err := scripts.ParseMove(rec)
			if err != nil || m.Take {
				r.MovesBad++
				r.example("move", id, rec)
				continue
			}
			accepted, err := done(r.Sale, id)
			if err != nil {
				return fmt.Errorf("move %s: %w", id, err)
			}
			if !accepted {
				r.Moving += m.Units
			}
		}
	}
	return nil
}

// num reads an HMGET value as an integer; a missing or unreadable one is 0.
func num(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func hscan(ctx context.Context, rdb redis.UniversalClient, key string, fn func(field, value string)) error {
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, key, cursor, "*", 1000).Result()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			fn(kv[i], kv[i+1])
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
