package relay

import (
	"slices"
	"strings"
	"time"
)

// sale is what the relay knows of one outbox: a sale's own, or a bucket's
// ("SALE#i.n").
type sale struct {
	id string
	// active is the last notice of a write, the last read that found
	// entries, or the last look or scan that saw entries. A sale shows in
	// Stats and the metrics while active within activeFor, and is
	// forgotten after it once nothing of it is pending.
	active time.Time
	// pending is the outbox's length at the last look or scan; 0 also for
	// an outbox only noticed (its entries are read, not looked at); -1
	// when it is to be looked at (a read of it failed, so entries may be
	// delivered to this relay and known to nobody but the stream).
	pending int64
	// oldest is the Redis time (Unix ms, from its id) of the outbox's
	// oldest entry at the last look; 0 when it is empty or was not looked
	// at since it had entries.
	oldest int64
	// held counts the entries of the outbox the relay holds (read or
	// claimed, not yet removed), since heldSince.
	held      int
	heldSince time.Time
	hotSince  time.Time // when hot was last set
	// ready: its consumer group is taken to exist, until a read or a
	// claim answers NOGROUP. A sale's group is made once in its life, and
	// most sales the relay meets have one (it comes back to them, and
	// forgets them between their orders): so it reads at once, and makes
	// the group when the read says there is none, rather than paying an
	// XGROUP CREATE each time it meets a sale again.
	ready     bool
	hot       bool   // to be read at the next read
	retry     bool   // to be read at the next poll: its read or group creation failed
	claimFrom string // XAUTOCLAIM cursor
}

// lookDue reports whether the outbox is to be looked at (its length and
// oldest entry) at now: while it had entries at the last look or scan,
// when a read of it failed, and when the relay has held its entries, or
// owed it a read, for refreshEvery or more (RabbitMQ away or slow, the
// window full: a backlog the metrics must show). An outbox the relay was
// told of, read and emptied costs no look: the notices say when it has
// new entries, and the scan finds what they missed.
func (s *sale) lookDue(now time.Time) bool {
	return s.pending != 0 ||
		s.held > 0 && now.Sub(s.heldSince) >= refreshEvery ||
		s.hot && now.Sub(s.hotSince) >= refreshEvery
}

// sales are the outboxes the relay works on: the active ones and those
// with entries. Only they are read, looked at and claimed from, and each
// only when something says it has entries (a notice, a read that came back
// full, a look or a scan that saw some: lookDue), so the relay's work
// follows the orders written, not the sales that exist nor those that sold
// lately. An outbox leaves once it has been inactive for activeFor with no
// entry, so the memory it takes is bounded by the same measure. Owned by
// Run's goroutine.
type sales struct {
	activeFor time.Duration
	m         map[string]*sale
	list      []*sale // m's values, oldest first: the rotating order of reads and claims
	hotN      int     // sales with hot set
	retryN    int     // sales with retry set
	readRot   int     // where the next read starts in list
	claimRot  int     // where the next claim starts in list
}

func newSales(activeFor time.Duration) *sales {
	return &sales{activeFor: activeFor, m: map[string]*sale{}}
}

// get returns the sale, added if it is new.
func (ss *sales) get(id string) *sale {
	s, ok := ss.m[id]
	if !ok {
		s = &sale{id: id, ready: true}
		ss.m[id] = s
		ss.list = append(ss.list, s)
	}
	return s
}

func (ss *sales) setHot(s *sale, hot bool, now time.Time) {
	if s.hot != hot {
		s.hot = hot
		if hot {
			ss.hotN++
			s.hotSince = now
		} else {
			ss.hotN--
		}
	}
}

// failed records that a read of s, or the creation of its group, failed:
// it is read again at the next poll, and looked at by the next
// look (its entries may have been delivered to this relay without the
// reply: only a claim gets those, and a claim needs a look that saw them).
func (ss *sales) failed(s *sale) {
	s.pending = -1
	if !s.retry {
		s.retry = true
		ss.retryN++
	}
}

// retryAll marks every sale whose read failed for the next read.
func (ss *sales) retryAll(now time.Time) {
	if ss.retryN == 0 {
		return
	}
	for _, s := range ss.list {
		if s.retry {
			s.retry = false
			ss.setHot(s, true, now)
		}
	}
	ss.retryN = 0
}

// holds records that the relay holds one more entry of id's outbox (d =
// 1) or one less (d = -1).
func (ss *sales) holds(id string, d int, now time.Time) {
	s := ss.m[id]
	if s == nil {
		return
	}
	if s.held == 0 && d > 0 {
		s.heldSince = now
	}
	s.held = max(0, s.held+d)
}

// noticed records a notice of a write to id's outbox: the sale is active
// from now and read at the next read.
func (ss *sales) noticed(id string, now time.Time) {
	s := ss.get(id)
	s.active = now
	ss.setHot(s, true, now)
}

// looked records id's outbox length n, as a look or a scan saw it at now.
// A sale unknown until now is added only when it has entries. An outbox
// with more entries than the relay holds is read at once: nobody told
// this relay about them, or they wait for another relay (a read then finds
// nothing, and a claim takes them once they have waited claim_after).
func (ss *sales) looked(id string, n int64, now time.Time) {
	s, ok := ss.m[id]
	if !ok {
		if n <= 0 {
			return
		}
		s = ss.get(id)
	}
	if n > int64(s.held) {
		ss.setHot(s, true, now)
	}
	if s.pending <= 0 && n > 0 {
		s.oldest = 0 // its entries are new to us: their age is for the next look
	}
	s.pending = n
	if n > 0 {
		s.active = now
	} else {
		s.oldest = 0
	}
}

// takeHot returns up to n hot sales, rotating among them from one read to
// the next, and clears their hot mark.
func (ss *sales) takeHot(n int) []*sale {
	if ss.hotN == 0 || n <= 0 {
		return nil
	}
	var out []*sale
	l := len(ss.list)
	i := 0
	for ; i < l && len(out) < n && ss.hotN > 0; i++ {
		s := ss.list[(ss.readRot+i)%l]
		if s.hot {
			ss.setHot(s, false, time.Time{})
			out = append(out, s)
		}
	}
	ss.readRot = (ss.readRot + i) % l
	return out
}

// claimable returns up to n sales whose outbox had entries at the last look
// and whose group is known, rotating among them from one claim to the
// next: a pending entry is still in its stream, so an empty outbox has
// nothing to claim.
func (ss *sales) claimable(n int) []*sale {
	var out []*sale
	l := len(ss.list)
	i := 0
	for ; i < l && len(out) < n; i++ {
		s := ss.list[(ss.claimRot+i)%l]
		if s.ready && s.pending > 0 {
			out = append(out, s)
		}
	}
	if l > 0 {
		ss.claimRot = (ss.claimRot + i) % l
	}
	return out
}

// toLook returns the ids of the sales due for a look at now (lookDue), in
// list order.
func (ss *sales) toLook(now time.Time) []string {
	var out []string
	for _, s := range ss.list {
		if s.lookDue(now) {
			out = append(out, s.id)
		}
	}
	return out
}

// forget drops the sales inactive for activeFor whose outbox was empty at
// the last look (or never seen with entries), of which the relay holds no
// entry and that wait for no read. Call it only after a look that
// succeeded, so that an outbox due for a look is never forgotten on old
// news. An outbox given entries without a notice after it was forgotten is
// the scan's to find, as one never noticed is.
func (ss *sales) forget(now time.Time) {
	kept := ss.list[:0]
	for _, s := range ss.list {
		if s.pending == 0 && !s.hot && !s.retry && s.held == 0 && now.Sub(s.active) >= ss.activeFor {
			delete(ss.m, s.id)
			continue
		}
		kept = append(kept, s)
	}
	clear(ss.list[len(kept):]) // let the forgotten go
	ss.list = kept
	if len(ss.list) == 0 {
		ss.list = nil
	}
	if l := len(ss.list); l > 0 {
		ss.readRot %= l
		ss.claimRot %= l
	} else {
		ss.readRot, ss.claimRot = 0, 0
	}
}

// known is one outbox as a view shows it.
type known struct {
	sale    string
	pending int64     // entries; 0 also when not looked at yet
	oldest  int64     // Unix ms of the oldest entry; 0: none, or not looked at yet
	active  time.Time // as sale.active
}

// view is what the relay last knew of the outboxes, for Stats and
// WriteMetrics. It is never changed once made, so any goroutine may read it.
type view struct {
	sales []known
	// complete: a full scan of the registry has ended since Run started
	// and the last look and scan step succeeded, so that every outbox with
	// entries is in sales (within a scan cycle).
	complete bool
}

// view returns what the relay knows now.
func (ss *sales) view(complete bool) *view {
	v := &view{sales: make([]known, 0, len(ss.list)), complete: complete}
	for _, s := range ss.list {
		v.sales = append(v.sales, known{sale: s.id, pending: max(s.pending, 0), oldest: s.oldest, active: s.active})
	}
	slices.SortFunc(v.sales, func(a, b known) int { return strings.Compare(a.sale, b.sale) })
	return v
}

// age is the age at now of k's oldest entry: 0 when it has none, or has not
// been looked at since it had entries.
func (k known) age(now time.Time) time.Duration {
	if k.pending == 0 || k.oldest == 0 {
		return 0
	}
	return max(0, now.Sub(time.UnixMilli(k.oldest)))
}

// shown reports whether k has per-sale series (and a row in Stats.Sales)
// at now: while its outbox holds entries, and at 0 while it is active.
func (k known) shown(now time.Time, activeFor time.Duration) bool {
	return k.pending > 0 || now.Sub(k.active) < activeFor
}
