package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// entry is one outbox entry held by the relay, from its read (or claim) to
// its removal.
type entry struct {
	sale, id string   // the sale and the stream entry id
	orderIDs []string // the orders it carries: one, or a batch of the reserve script
	bodies   [][]byte // their wire forms (order.Marshal)
	// unconfirmed counts the orders of the entry not yet in a confirmed
	// message: an entry's orders may travel in more than one.
	unconfirmed int
}

// outbox is the relay's side of the outbox streams: the sales it serves and
// their consumer groups, the entries it holds (read or claimed, not yet
// removed), and the confirmed ones waiting for their removal. It is owned by
// Run's goroutine; only its counters are read elsewhere (Stats).
type outbox struct {
	rdb        redis.UniversalClient
	keys       scripts.Keys
	log        *zap.Logger
	name       string // this relay's consumer name in the groups
	batch      int
	window     int // entries held at most
	claimAfter time.Duration

	sales     []string             // every sale known, from the last sample
	ready     map[string]bool      // consumer group known to exist
	active    map[string]time.Time // last time the sale's outbox had entries
	backlog   map[string]int64     // outbox length at the last sample
	claimFrom map[string]string    // XAUTOCLAIM cursor per sale
	tracked   map[string]struct{}  // sale + "\x00" + id of every entry held
	acks      map[string][]any     // sale → confirmed entries to remove: id, orders, id, orders, …
	toRemove  int                  // entries in acks
	rot       int                  // rotating start among sales for fairness

	n outboxCounts
}

// outboxCounts are the outbox's figures for Stats, safe for concurrent use.
type outboxCounts struct {
	removed, claimed, malformed, errs atomic.Uint64
	held                              atomic.Int64 // len(tracked)
}

func newOutbox(rdb redis.UniversalClient, keys scripts.Keys, log *zap.Logger, name string, c config.Relay) *outbox {
	return &outbox{
		rdb: rdb, keys: keys, log: log, name: name,
		batch: c.Batch, window: c.MaxInFlight, claimAfter: c.ClaimAfter,
		ready:     map[string]bool{},
		active:    map[string]time.Time{},
		backlog:   map[string]int64{},
		claimFrom: map[string]string{},
		tracked:   map[string]struct{}{},
		acks:      map[string][]any{},
	}
}

// room is how many more entries the outbox may hold.
func (o *outbox) room() int { return o.window - len(o.tracked) }

// apply takes in a new sample: the sales to serve, each outbox's length
// (an empty outbox has nothing to claim) and which had entries lately (those
// are polled every relay.poll). It creates the consumer group of every sale
// new to it.
func (o *outbox) apply(ctx context.Context, smp *sample) {
	o.sales = o.sales[:0]
	for _, s := range smp.sales {
		o.sales = append(o.sales, s.Sale)
		o.backlog[s.Sale] = s.Pending
		if s.Pending > 0 {
			o.active[s.Sale] = smp.at
		}
	}
	cctx, cancel := context.WithTimeout(ctx, redisCall)
	defer cancel()
	for _, s := range o.sales {
		if o.ready[s] {
			continue
		}
		err := o.rdb.XGroupCreateMkStream(cctx, o.keys.Outbox(s), Group, "0").Err()
		if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			o.n.errs.Add(1)
			o.log.Warn("cannot create the outbox consumer group", zap.String("sale", s), zap.Error(err))
			continue
		}
		o.ready[s] = true
	}
}

func (o *outbox) track(sale, id string) bool {
	k := sale + "\x00" + id
	if _, ok := o.tracked[k]; ok {
		return false
	}
	o.tracked[k] = struct{}{}
	o.n.held.Store(int64(len(o.tracked)))
	return true
}

func (o *outbox) untrack(sale, id string) {
	delete(o.tracked, sale+"\x00"+id)
	o.n.held.Store(int64(len(o.tracked)))
}

// toEntry turns a stream entry into something to publish. A malformed entry
// is acknowledged (so no relay loops on it) but left in the stream, where
// outbox_pending and reconcile show it to an operator.
func (o *outbox) toEntry(ctx context.Context, sale string, m redis.XMessage) *entry {
	ords, err := order.FromStreamEntry(m.Values)
	e := &entry{sale: sale, id: m.ID, orderIDs: make([]string, 0, len(ords)), bodies: make([][]byte, 0, len(ords)), unconfirmed: len(ords)}
	for _, ord := range ords {
		// A bucket's outbox holds orders of its sale (gateway/buckets.go).
		if ord.SaleID != scripts.SaleOf(sale) {
			err = fmt.Errorf("%w: sale_id %q in the outbox of sale %q", order.ErrMalformed, ord.SaleID, sale)
			break
		}
		var body []byte
		if body, err = ord.Marshal(); err != nil {
			break
		}
		e.orderIDs = append(e.orderIDs, ord.OrderID)
		e.bodies = append(e.bodies, body)
	}
	if err != nil {
		o.n.malformed.Add(1)
		o.log.Error("outbox entry is not an order; left in the stream, not published",
			zap.String("sale", sale), zap.String("entry", m.ID), zap.Error(err))
		actx, cancel := context.WithTimeout(ctx, redisCall)
		if aerr := o.rdb.XAck(actx, o.keys.Outbox(sale), Group, m.ID).Err(); aerr != nil {
			o.n.errs.Add(1)
		}
		cancel()
		o.untrack(sale, m.ID)
		return nil
	}
	return e
}

// read reads entries never delivered to any relay, from as many active
// sales as the room allows, in one pipelined round trip. It fails only when
// nothing could be read and some sale's read failed.
func (o *outbox) read(ctx context.Context) ([]*entry, error) {
	budget := o.room()
	now := time.Now()
	var sales []string
	for i := 0; i < len(o.sales) && len(sales) < budget; i++ {
		s := o.sales[(o.rot+i)%len(o.sales)]
		if o.ready[s] && now.Sub(o.active[s]) < activeFor {
			sales = append(sales, s)
		}
	}
	if len(o.sales) > 0 {
		o.rot = (o.rot + len(sales)) % len(o.sales)
	}
	if len(sales) == 0 {
		return nil, nil
	}
	count := int64(max(1, min(o.batch, budget/len(sales))))
	cctx, cancel := context.WithTimeout(ctx, redisCall)
	defer cancel()
	pipe := o.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(sales))
	for i, s := range sales {
		cmds[i] = pipe.XReadGroup(cctx, &redis.XReadGroupArgs{
			Group: Group, Consumer: o.name, Streams: []string{o.keys.Outbox(s), ">"}, Count: count, Block: -1,
		})
	}
	_, _ = pipe.Exec(cctx) // errors are per command, below
	var out []*entry
	var firstErr error
	for i, cmd := range cmds {
		streams, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if redis.HasErrorPrefix(err, "NOGROUP") {
				o.ready[sales[i]] = false // the stream was deleted: create it again
				continue
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("relay: read outbox of %s: %w", sales[i], err)
			}
			continue
		}
		for _, s := range streams {
			if len(s.Messages) > 0 {
				o.active[sales[i]] = now
			}
			for _, m := range s.Messages {
				if !o.track(sales[i], m.ID) {
					continue
				}
				if e := o.toEntry(ctx, sales[i], m); e != nil {
					out = append(out, e)
				}
			}
		}
	}
	if firstErr != nil && len(out) == 0 {
		o.n.errs.Add(1)
		return nil, firstErr
	}
	return out, nil
}

// claim takes over entries pending longer than claim_after: a dead relay's,
// or this relay's own when a read's reply was lost. Entries this relay holds
// are skipped (their idle time is reset, which is harmless). The entries it
// returns are for publishing at once.
func (o *outbox) claim(ctx context.Context) []*entry {
	var out []*entry
	for _, sale := range o.sales {
		// A pending entry is still in the stream: an empty outbox has
		// nothing to claim.
		if !o.ready[sale] || o.backlog[sale] == 0 {
			continue
		}
		budget := o.room()
		if budget <= 0 {
			break
		}
		start := o.claimFrom[sale]
		if start == "" {
			start = "0-0"
		}
		cctx, cancel := context.WithTimeout(ctx, redisCall)
		msgs, next, err := o.rdb.XAutoClaim(cctx, &redis.XAutoClaimArgs{
			Stream: o.keys.Outbox(sale), Group: Group, Consumer: o.name,
			MinIdle: o.claimAfter, Start: start, Count: int64(min(o.batch, budget)),
		}).Result()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				o.n.errs.Add(1)
				o.log.Warn("cannot claim pending outbox entries", zap.String("sale", sale), zap.Error(err))
			}
			if redis.HasErrorPrefix(err, "NOGROUP") {
				o.ready[sale] = false
			}
			continue
		}
		o.claimFrom[sale] = next
		for _, m := range msgs {
			if len(m.Values) == 0 || !o.track(sale, m.ID) {
				continue // deleted meanwhile (Redis 6.2 shape), or ours already
			}
			if e := o.toEntry(ctx, sale, m); e != nil {
				o.n.claimed.Add(1)
				out = append(out, e)
			}
		}
	}
	return out
}

// confirmed records that RabbitMQ has e: it is removed with the next
// removal.
func (o *outbox) confirmed(e *entry) {
	o.acks[e.sale] = append(o.acks[e.sale], e.id, len(e.bodies))
	o.toRemove++
}

// unremoved is how many confirmed entries wait for their removal.
func (o *outbox) unremoved() int { return o.toRemove }

// removeParallel bounds the sales whose removals are in flight at once.
// Each sale's removal is a MULTI of its own, and a relay serving many sales
// would otherwise pay one round trip per sale, one after the other, all
// within one redisCall; on a Redis Cluster the sales' primaries remove
// theirs side by side.
const removeParallel = 16

// remove acknowledges and deletes the confirmed entries, one script call
// per sale (scripts.RemoveEntries) so that an entry is never acknowledged
// without being deleted (it would then sit in the outbox for ever, never
// read again) and the sale's count of orders in its outbox follows. A call
// never holds two sales: their outboxes live in different hash slots, and
// Redis Cluster refuses a script across slots (CROSSSLOT), which would
// stall every sale behind the one removal. Up to removeParallel sales are removed
// at once. A sale whose removal fails keeps its entries held, to be removed
// by the next call; the others are removed, and the error says how many
// wait. It blocks until every removal has answered or redisCall has passed.
func (o *outbox) remove(ctx context.Context) error {
	if o.toRemove == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, redisCall)
	defer cancel()
	type removal struct {
		sale string
		refs []any // id, orders, …
		err  error
	}
	rs := make([]removal, 0, len(o.acks))
	for sale, refs := range o.acks {
		rs = append(rs, removal{sale: sale, refs: refs})
	}
	// The goroutines touch only their own removal; the outbox's maps are
	// read and changed here, by the owner, before and after.
	var wg sync.WaitGroup
	inFlight := make(chan struct{}, removeParallel)
	for i := range rs {
		inFlight <- struct{}{}
		wg.Add(1)
		go func(r *removal) {
			defer func() { <-inFlight; wg.Done() }()
			keys := []string{o.keys.Outbox(r.sale), o.keys.Meta(r.sale)}
			r.err = scripts.RemoveEntries.Run(cctx, o.rdb, keys, append([]any{Group}, r.refs...)...).Err()
		}(&rs[i])
	}
	wg.Wait()
	var firstErr error
	for _, r := range rs {
		if r.err != nil {
			o.n.errs.Add(1)
			if firstErr == nil {
				firstErr = r.err
			}
			continue
		}
		for i := 0; i < len(r.refs); i += 2 {
			o.untrack(r.sale, r.refs[i].(string))
		}
		o.n.removed.Add(uint64(len(r.refs) / 2))
		o.toRemove -= len(r.refs) / 2
		delete(o.acks, r.sale)
	}
	if firstErr != nil {
		return fmt.Errorf("relay: remove confirmed entries, %d still wait: %w", o.toRemove, firstErr)
	}
	return nil
}
