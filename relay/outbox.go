package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

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

// outbox is the relay's side of the outbox streams: what it reads and
// claims from the sales it works on (sales.go), their consumer groups, the
// entries it holds (read or claimed, not yet removed), and the confirmed
// ones waiting for their removal. It is owned by Run's goroutine; only its
// counters are read elsewhere (Stats).
type outbox struct {
	rdb        redis.UniversalClient
	loader     *scripts.Loader // runs the remove script (Loader.Remove needs no Load)
	keys       scripts.Keys
	log        *zap.Logger
	name       string // this relay's consumer name in the groups
	batch      int
	window     int // entries held at most
	claimAfter time.Duration
	poll       time.Duration
	lines      bool // orders go out in the lines form (relay.wire), else JSON
	full       bool // the last read came back full for some sale: more wait

	ss       *sales
	pollAt   time.Time           // when the sales whose read failed are next read
	tracked  map[string]struct{} // sale + "\x00" + id of every entry held
	acks     map[string][]any    // sale → confirmed entries to remove: id, orders, id, orders, …
	toRemove int                 // entries in acks

	n outboxCounts
}

// outboxCounts are the outbox's figures for Stats, safe for concurrent use.
type outboxCounts struct {
	removed, claimed, malformed, errs atomic.Uint64
	held                              atomic.Int64 // len(tracked)
}

func newOutbox(rdb redis.UniversalClient, keys scripts.Keys, log *zap.Logger, name string, c config.Relay, ss *sales) *outbox {
	return &outbox{
		loader: scripts.New(rdb, "", keys),
		rdb:    rdb, keys: keys, log: log, name: name,
		batch: c.Batch, window: c.MaxInFlight, claimAfter: c.ClaimAfter, poll: c.Poll, lines: c.Wire != "json",
		ss:      ss,
		tracked: map[string]struct{}{},
		acks:    map[string][]any{},
	}
}

// free is how many more entries the outbox may track: the window less
// the entries tracked.
func (o *outbox) free() int { return o.window - len(o.tracked) }

// nextRead returns when a read is next due: at once while a sale is hot
// (noticed, seen with entries it does not hold, or read full last time),
// at the next poll while a sale's read failed; ok is false when there is
// none. No outbox is read on a timer for lack of news: one the relay was
// told of is read at once, and read again while its reads come back full;
// entries written without a notice are found by a look (an outbox that had
// entries) or the scan.
func (o *outbox) nextRead() (at time.Time, ok bool) {
	switch {
	case o.ss.hotN > 0:
		return time.Time{}, true
	case o.ss.retryN > 0:
		return o.pollAt, true
	}
	return time.Time{}, false
}

// failed records that the read of s, or the creation of its group, failed
// at now: it is read again at the next poll (sales.failed).
func (o *outbox) failed(s *sale, now time.Time) {
	if o.ss.retryN == 0 {
		o.pollAt = now.Add(o.poll)
	}
	o.ss.failed(s)
}

// ensureGroups creates the consumer group of each sale in sales whose
// read or claim answered NOGROUP (sale.ready), in one pipeline (MKSTREAM:
// an outbox noticed but gone is created empty, rather than failing every
// read; BUSYGROUP: the group exists already, another relay made it).
// A group is created when its outbox is first read, so a sale nobody buys
// from has none. It returns the sales whose group is taken to exist; the
// others are read again at the next poll.
func (o *outbox) ensureGroups(ctx context.Context, sales []*sale, now time.Time) []*sale {
	var cmds []*redis.StatusCmd
	var news []*sale
	pipe := o.rdb.Pipeline()
	for _, s := range sales {
		if !s.ready {
			news = append(news, s)
			cmds = append(cmds, pipe.XGroupCreateMkStream(ctx, o.keys.Outbox(s.id), Group, "0"))
		}
	}
	if len(news) == 0 {
		return sales
	}
	_, _ = pipe.Exec(ctx) // errors are per command, below
	for i, s := range news {
		if err := cmds[i].Err(); err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
			if ctx.Err() == nil {
				o.n.errs.Add(1)
				o.log.Warn("cannot create the outbox consumer group", zap.String("sale", s.id), zap.Error(err))
			}
			o.failed(s, now)
			continue
		}
		s.ready = true
	}
	out := make([]*sale, 0, len(sales))
	for _, s := range sales {
		if s.ready {
			out = append(out, s)
		}
	}
	return out
}

func (o *outbox) track(sale, id string, now time.Time) bool {
	k := sale + "\x00" + id
	if _, ok := o.tracked[k]; ok {
		return false
	}
	o.tracked[k] = struct{}{}
	o.ss.holds(sale, 1, now)
	o.n.held.Store(int64(len(o.tracked)))
	return true
}

func (o *outbox) untrack(sale, id string) {
	k := sale + "\x00" + id
	if _, ok := o.tracked[k]; !ok {
		return
	}
	delete(o.tracked, k)
	o.ss.holds(sale, -1, time.Time{})
	o.n.held.Store(int64(len(o.tracked)))
}

// toEntry turns a stream entry into something to publish. A malformed entry
// is acknowledged (so no relay loops on it) but left in the stream, where
// outbox_pending and reconcile show it to an operator.
func (o *outbox) toEntry(ctx context.Context, sale string, m redis.XMessage) *entry {
	ords, err := order.FromStreamEntry(m.Values)
	e := &entry{sale: sale, id: m.ID, orderIDs: make([]string, 0, len(ords)), bodies: make([][]byte, 0, len(ords)), unconfirmed: len(ords)}
	// The lines of an entry's orders share one buffer, sized for them all,
	// each body a slice of it capped at its own end: one allocation per
	// entry rather than a few per order.
	var buf []byte
	if o.lines {
		n := 0
		for _, ord := range ords {
			n += order.LineSize(ord)
		}
		buf = make([]byte, 0, n)
	}
	for _, ord := range ords {
		// A bucket's outbox holds orders of its sale (sale/buckets.go).
		if ord.SaleID != scripts.SaleOf(sale) {
			err = fmt.Errorf("%w: sale_id %q in the outbox of sale %q", order.ErrMalformed, ord.SaleID, sale)
			break
		}
		var body []byte
		if o.lines {
			start := len(buf)
			buf, err = ord.AppendLine(buf)
			body = buf[start:len(buf):len(buf)]
		} else {
			body, err = ord.Marshal()
		}
		if err != nil {
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

// read reads entries never delivered to any relay from the sales due for a
// read (the hot ones; those whose read failed when the poll is due), as
// many as the outbox has free, in one pipelined round trip (two when a
// group is to be created first). A sale whose read came back full is hot
// again: more may wait. A sale whose read failed is read again at the next
// poll. It fails only when some sale's read failed and none succeeded.
func (o *outbox) read(ctx context.Context, now time.Time) ([]*entry, error) {
	if o.ss.retryN > 0 && !now.Before(o.pollAt) {
		o.ss.retryAll(now)
	}
	o.full = false
	budget := o.free()
	picked := o.ss.takeHot(budget)
	if len(picked) == 0 {
		return nil, nil
	}
	cctx, cancel := context.WithTimeout(ctx, redisCall)
	defer cancel()
	sales := o.ensureGroups(cctx, picked, now)
	if len(sales) == 0 {
		return nil, nil
	}
	count := int64(max(1, min(o.batch, budget/len(sales))))
	pipe := o.rdb.Pipeline()
	cmds := make([]*redis.XStreamSliceCmd, len(sales))
	for i, s := range sales {
		cmds[i] = pipe.XReadGroup(cctx, &redis.XReadGroupArgs{
			Group: Group, Consumer: o.name, Streams: []string{o.keys.Outbox(s.id), ">"}, Count: count, Block: -1,
		})
	}
	_, _ = pipe.Exec(cctx) // errors are per command, below
	var out []*entry
	var firstErr error
	ok := 0
	for i, cmd := range cmds {
		s := sales[i]
		streams, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			ok++
			continue
		}
		if err != nil {
			if redis.HasErrorPrefix(err, "NOGROUP") {
				// No group yet (the sale's first read), or the stream
				// was deleted: create it, and read again at once.
				s.ready = false
				o.ss.setHot(s, true, now)
				continue
			}
			o.failed(s, now)
			if firstErr == nil {
				firstErr = fmt.Errorf("relay: read outbox of %s: %w", s.id, err)
			}
			continue
		}
		ok++
		for _, st := range streams {
			if len(st.Messages) == 0 {
				continue
			}
			s.active = now
			if int64(len(st.Messages)) == count {
				o.ss.setHot(s, true, now)
				o.full = true
			}
			for _, m := range st.Messages {
				if !o.track(s.id, m.ID, now) {
					continue
				}
				if e := o.toEntry(ctx, s.id, m); e != nil {
					out = append(out, e)
				}
			}
		}
	}
	if firstErr != nil && ok == 0 {
		o.n.errs.Add(1)
		return nil, firstErr
	}
	return out, nil
}

// claim takes over entries pending longer than claim_after from the sales
// whose outbox had entries at the last look (in one pipeline): a dead
// relay's, or this relay's own when a read's reply was lost. Entries this
// relay holds are skipped (their idle time is reset, which is harmless).
// The entries it returns are for publishing at once.
func (o *outbox) claim(ctx context.Context) []*entry {
	budget := o.free()
	sales := o.ss.claimable(budget)
	if len(sales) == 0 {
		return nil
	}
	count := int64(max(1, min(o.batch, budget/len(sales))))
	cctx, cancel := context.WithTimeout(ctx, redisCall)
	defer cancel()
	now := time.Now()
	pipe := o.rdb.Pipeline()
	cmds := make([]*redis.XAutoClaimCmd, len(sales))
	for i, s := range sales {
		start := s.claimFrom
		if start == "" {
			start = "0-0"
		}
		cmds[i] = pipe.XAutoClaim(cctx, &redis.XAutoClaimArgs{
			Stream: o.keys.Outbox(s.id), Group: Group, Consumer: o.name,
			MinIdle: o.claimAfter, Start: start, Count: count,
		})
	}
	_, _ = pipe.Exec(cctx) // errors are per command, below
	var out []*entry
	for i, cmd := range cmds {
		s := sales[i]
		msgs, next, err := cmd.Result()
		if err != nil {
			if ctx.Err() == nil {
				o.n.errs.Add(1)
				o.log.Warn("cannot claim pending outbox entries", zap.String("sale", s.id), zap.Error(err))
			}
			if redis.HasErrorPrefix(err, "NOGROUP") {
				s.ready = false
			}
			continue
		}
		s.claimFrom = next
		for _, m := range msgs {
			if len(m.Values) == 0 || !o.track(s.id, m.ID, now) {
				continue // deleted meanwhile (Redis 6.2 shape), or ours already
			}
			if e := o.toEntry(ctx, s.id, m); e != nil {
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
// per sale (Loader.Remove of package scripts) so that an entry is never acknowledged
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
	// read and changed here, by the owner, before and after. Each keeps
	// its own error, so that the others are removed whatever one's fate:
	// the group's is always nil.
	var g errgroup.Group
	g.SetLimit(removeParallel)
	for i := range rs {
		r := &rs[i]
		g.Go(func() error {
			keys := []string{o.keys.Outbox(r.sale), o.keys.Meta(r.sale)}
			_, r.err = o.loader.Remove(cctx, keys, append([]any{Group}, r.refs...)...)
			return nil
		})
	}
	_ = g.Wait()
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
