package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/flashgate/flashgate/sale"
)

// rooms is the gateway's memory of the sales' waiting rooms, so that a
// poll, the bulk of a waiting crowd's traffic, and a buy's ticket check
// make no Redis call (API.md "Waiting room"). A sale is read from Redis
// the first time it is asked about (one call, shared by the requests that
// wait for it), then:
//
//   - a sale with a room is read again in the background, once a second
//     while it is asked about (its clock, joined, sold out; a random room
//     also at its start, which seals the pre-queue), and at once on an
//     announcement of a change (a new admit_per_second applies within 1 s
//     on every gateway; at once where the change was made). Requests are
//     answered from what is held meanwhile, also while Redis is down.
//   - a sale without one is remembered as such for noRoomTTL, and
//     forgotten on an announcement. Whether a sale has a room can only
//     change before its window starts (admin.lua, ROOM_FIXED), when a buy
//     is refused anyway, so a buy never passes a room it did not see: a
//     change is announced inside the admin script, and a lost
//     subscription forgets every room-less sale (Missed).
//
// It is safe for concurrent use.
type rooms struct {
	// first reads a room a request waits for (no script: a Redis whose
	// script cache is being reloaded answers it), again the background's
	// reads (a script call, which seals a random room's pre-queue and sums
	// a sale of buckets for sold out).
	first, again func(ctx context.Context, sale string) (*sale.Room, error)
	timeout      time.Duration
	log          *zap.Logger
	now          func() time.Time

	mu sync.RWMutex
	m  map[string]*roomEntry
	// wake asks the background loop to look now (an announcement).
	wake chan struct{}
}

// roomEntry is one sale's memory. room is replaced whole, never changed.
type roomEntry struct {
	room   atomic.Pointer[sale.Room]
	loaded atomic.Int64 // Unix ms of the read that room came from; 0: read again now
	used   atomic.Int64 // Unix ms of the last request that asked
	// first is the entry's read in flight, if any (get): it is the
	// entry's, not the rooms', so that an entry forgotten on an
	// announcement forgets its read too, and the next request reads anew.
	first singleflight.Group
	// sealed is the Unix ms of the last read that asked Redis to seal a
	// random room's pre-queue for a request (seal).
	sealed atomic.Int64
	// Counters of its series (roommetrics.go).
	polls, notAdmitted atomic.Uint64
}

const (
	noRoomTTL     = 10 * time.Second
	roomRefresh   = time.Second
	roomIdle      = 10 * time.Second // not asked about for this long: not read again
	roomForget    = time.Minute      // nor kept
	roomTick      = 200 * time.Millisecond
	maxRooms      = 100_000
	maxRefreshing = 256 // reads per tick, one after another
	// sealEvery paces the reads a request waits for to seal a random room
	// that has started (a gateway's clock ahead of Redis's sees the start
	// first): between them, requests are answered from memory.
	sealEvery = 50 * time.Millisecond
)

func newRooms(first, again func(ctx context.Context, sale string) (*sale.Room, error), timeout time.Duration, log *zap.Logger) *rooms {
	return &rooms{first: first, again: again, timeout: timeout, log: log, now: time.Now, m: map[string]*roomEntry{},
		wake: make(chan struct{}, 1)}
}

// noSale is what is held of a sale that does not exist: no room, and a
// poll of it is 404 (a buy goes on, and Redis answers it).
var noSale = &sale.Room{Mode: sale.RoomOff}

// get returns what is held of the room of id, reading it from Redis first
// when nothing is (an error wrapping sale.ErrUnavailable when Redis cannot
// answer in time). A sale that does not exist is noSale.
func (r *rooms) get(id []byte, now time.Time) (*sale.Room, *roomEntry, error) {
	ms := now.UnixMilli()
	r.mu.RLock()
	e := r.m[string(id)]
	r.mu.RUnlock()
	if e != nil {
		if rm := e.room.Load(); rm != nil && (rm.Mode != sale.RoomOff || ms-e.loaded.Load() < noRoomTTL.Milliseconds()) {
			e.used.Store(ms)
			if rm.Mode == sale.RoomRandom && rm.Prequeue < 0 && rm.Start > 0 && ms >= rm.Start {
				rm = r.seal(e, string(id), rm, ms)
			}
			return rm, e, nil
		}
	} else {
		r.mu.Lock()
		if e = r.m[string(id)]; e == nil {
			if len(r.m) >= maxRooms {
				clear(r.m)
			}
			e = &roomEntry{}
			r.m[string(id)] = e
		}
		r.mu.Unlock()
	}
	e.used.Store(ms)
	rm, err := r.load(e, string(id), ms)
	return rm, e, err
}

// load reads the room of id into e, the read a request that found nothing
// held waits for. One read at a time per sale: the requests that come
// meanwhile wait for it and share its answer, a failure included, so that
// a Redis that does not answer costs a crowd one timeout, not one each.
// The read is not the caller's: it runs to its own timeout whoever waits.
func (r *rooms) load(e *roomEntry, id string, ms int64) (*sale.Room, error) {
	v, err, _ := e.first.Do("", func() (any, error) {
		if rm := e.room.Load(); rm != nil && (rm.Mode != sale.RoomOff || ms-e.loaded.Load() < noRoomTTL.Milliseconds()) {
			return rm, nil // read by a request that finished as this one began
		}
		rm, err := r.read(r.first, id)
		if err == nil {
			r.store(e, rm, r.now())
		}
		return rm, err
	})
	rm, _ := v.(*sale.Room)
	return rm, err
}

// seal reads again a random room that has started with its pre-queue not
// sealed (the read seals it), for a request that waits for it, so that the
// first poll after the start gets its place: one read at a time, shared by
// the requests that come meanwhile, at most one every sealEvery. It
// returns the room sealed, or rm when the read failed or Redis's clock has
// not reached the start yet.
func (r *rooms) seal(e *roomEntry, id string, rm *sale.Room, ms int64) *sale.Room {
	if last := e.sealed.Load(); ms-last < sealEvery.Milliseconds() {
		return rm
	}
	v, _, _ := e.first.Do("seal", func() (any, error) {
		if held := e.room.Load(); held != nil && held.Prequeue >= 0 {
			return held, nil // sealed by a read that finished as this one began
		}
		at := r.now()
		e.sealed.Store(at.UnixMilli())
		got, err := r.read(r.again, id)
		if err != nil {
			return nil, err
		}
		r.store(e, got, at)
		return e.room.Load(), nil
	})
	if got, _ := v.(*sale.Room); got != nil {
		return got
	}
	return rm
}

// peek returns what is held of the room of id, or nil, without reading
// Redis.
func (r *rooms) peek(id []byte) *sale.Room {
	r.mu.RLock()
	e := r.m[string(id)]
	r.mu.RUnlock()
	if e == nil {
		return nil
	}
	return e.room.Load()
}

// read reads a sale's room from Redis with load, within the timeout.
func (r *rooms) read(load func(ctx context.Context, sale string) (*sale.Room, error), id string) (*sale.Room, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	rm, err := load(ctx, id)
	if errors.Is(err, sale.ErrNotFound) {
		return noSale, nil
	}
	return rm, err
}

// store keeps rm as e's room, read at at. A room read earlier than a join
// that came after it is not older than that join's clock: the newer clock
// and the larger counts are kept.
func (r *rooms) store(e *roomEntry, rm *sale.Room, at time.Time) {
	if old := e.room.Load(); old != nil && old.Mode != sale.RoomOff && rm.Mode != sale.RoomOff {
		if old.Clock.Version > rm.Clock.Version {
			c := *rm
			c.Clock = old.Clock
			rm = &c
		}
	}
	e.room.Store(rm)
	e.loaded.Store(at.UnixMilli())
}

// joined records what a join saw of its room: its clock, if newer, its
// count of places, and its sealed pre-queue, so that this gateway answers
// the buyer's next poll with no less than the join told.
func (r *rooms) joined(id string, seen *sale.Room) {
	r.mu.RLock()
	e := r.m[id]
	r.mu.RUnlock()
	if e == nil {
		return
	}
	for {
		old := e.room.Load()
		if old == nil || old.Mode == sale.RoomOff {
			return
		}
		c := *old
		c.Clock = sale.Newer(old.Clock, seen.Clock)
		c.Joined = max(old.Joined, seen.Joined)
		if c.Prequeue < 0 {
			c.Prequeue = seen.Prequeue
		}
		if e.room.CompareAndSwap(old, &c) {
			return
		}
	}
}

// Changed is an announced change of a sale (sale.Listener): a sale held
// without a room is forgotten, one with a room is read again at once.
func (r *rooms) Changed(id string) {
	r.mu.Lock()
	if e := r.m[id]; e != nil {
		if rm := e.room.Load(); rm == nil || rm.Mode == sale.RoomOff {
			delete(r.m, id)
		} else {
			e.loaded.Store(0)
		}
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Missed says that announcements may have been missed (sale.Listener):
// every sale held without a room is forgotten, every room read again.
func (r *rooms) Missed(bool) {
	r.mu.Lock()
	for id, e := range r.m {
		if rm := e.room.Load(); rm == nil || rm.Mode == sale.RoomOff {
			delete(r.m, id)
		} else {
			e.loaded.Store(0)
		}
	}
	r.mu.Unlock()
}

var _ sale.Listener = (*rooms)(nil)

// Run reads again, until ctx is done, the rooms asked about lately: every
// roomRefresh, at once after an announcement, and a random room that has
// started with its pre-queue not sealed at every tick until it is. It
// forgets what was not asked about for roomForget.
func (r *rooms) Run(ctx context.Context) {
	t := time.NewTicker(roomTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
		r.refresh(ctx)
	}
}

// refresh is one pass of Run.
func (r *rooms) refresh(ctx context.Context) {
	now := r.now().UnixMilli()
	var due []string
	var dueEntries []*roomEntry
	r.mu.Lock()
	for id, e := range r.m {
		used := e.used.Load()
		if now-used > roomForget.Milliseconds() {
			delete(r.m, id)
			continue
		}
		rm := e.room.Load()
		if rm == nil || rm.Mode == sale.RoomOff || now-used > roomIdle.Milliseconds() || len(due) >= maxRefreshing {
			continue
		}
		unsealed := rm.Mode == sale.RoomRandom && rm.Prequeue < 0 && now >= rm.Start
		if unsealed || now-e.loaded.Load() >= roomRefresh.Milliseconds() {
			due = append(due, id)
			dueEntries = append(dueEntries, e)
		}
	}
	r.mu.Unlock()
	for i, id := range due {
		if ctx.Err() != nil {
			return
		}
		at := r.now()
		rm, err := r.read(r.again, id)
		if err != nil {
			if ce := r.log.Check(zap.DebugLevel, "waiting room: read failed; answering from memory"); ce != nil {
				ce.Write(zap.String("sale_id", id), zap.Error(err))
			}
			continue
		}
		r.store(dueEntries[i], rm, at)
	}
}

// each calls f with every sale held with a room (the metrics).
func (r *rooms) each(f func(id string, rm *sale.Room, e *roomEntry)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for id, e := range r.m {
		if rm := e.room.Load(); rm != nil && rm.Mode != sale.RoomOff {
			f(id, rm, e)
		}
	}
}
