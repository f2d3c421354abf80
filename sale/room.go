package sale

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/flashgate/flashgate/scripts"
)

// A waiting room (API.md "Waiting room", DESIGN.md "The waiting room") lets
// a sale's buyers in at admit_per_second, in the order of their places.
// What a buyer holds is a ticket (ticket.go): the sale's key signs its
// buyer, join number and the admission clock at the join, so that any
// gateway can read a place without Redis. The clock is arithmetic: the head
// (positions admitted so far) grows at the rate from an anchor, so an
// admission writes nothing and a poll is a subtraction. In a random room
// the pre-queue's positions are a keyed permutation of its join numbers
// (shuffle.go), fixed by their count, sealed at the start.

// Waiting room modes, as meta wr holds them.
const (
	RoomOff    int64 = 0
	RoomFIFO   int64 = 1
	RoomRandom int64 = 2
)

var roomNames = [...]string{RoomOff: "off", RoomFIFO: "fifo", RoomRandom: "random"}

// RoomName is the API's name of mode ("off", "fifo", "random").
func RoomName(mode int64) string {
	if mode < 0 || int(mode) >= len(roomNames) {
		return "off"
	}
	return roomNames[mode]
}

// ParseRoom reads a mode's API name; ok is false for any other string.
func ParseRoom(name string) (mode int64, ok bool) {
	for i, n := range roomNames {
		if n == name {
			return int64(i), true
		}
	}
	return 0, false
}

// Bounds and defaults of a waiting room's settings (API.md).
const (
	MaxAdmitPerSecond     = 1_000_000
	MinPassSeconds        = 10
	MaxPassSeconds        = 3600
	DefaultAdmitPerSecond = 100
	DefaultPassSeconds    = 120
)

// Clock is a room's admission clock: from At (Unix ms, Redis's clock) on,
// the head, the number of positions admitted, grows from Head by Rate per
// second. Version orders the clocks of one sale: every change of the
// anchor or the rate moves it (lua/queue.lua).
type Clock struct {
	Version, At, Head, Rate int64
}

// HeadAt is the number of positions admitted at now (Unix ms).
func (c Clock) HeadAt(now int64) int64 {
	if now <= c.At || c.Rate <= 0 {
		return c.Head
	}
	return c.Head + (now-c.At)*c.Rate/1000
}

// AdmitAt is the instant (Unix ms) at which position p is admitted: the
// first ms at which HeadAt reaches p. A position at or below Head was
// admitted at At or before; AdmitAt says At.
func (c Clock) AdmitAt(p int64) int64 {
	if p <= c.Head || c.Rate <= 0 {
		return c.At
	}
	return c.At + ((p-c.Head)*1000+c.Rate-1)/c.Rate
}

// Newer is the later of two clocks of a sale.
func Newer(a, b Clock) Clock {
	if b.Version > a.Version {
		return b
	}
	return a
}

// Room is what a gateway keeps of a sale's waiting room to answer polls
// and check buys without Redis (gateway/rooms.go): Where (standing.go)
// says where a ticket stands in it.
type Room struct {
	Sale     string
	Mode     int64 // RoomOff for a sale without a room
	Pass     int64 // seconds
	Joined   int64
	Prequeue int64 // a random room's pre-queue once sealed; -1 before
	Start    int64 // Unix ms: the window's start, 0 for an open start
	End      int64 // Unix ms, 0 for an open end
	SoldOut  bool
	// Remaining is the units left when the room was read, as the public
	// sale view says it (the queue view's remaining).
	Remaining int64
	Clock     Clock
	Key       *TicketKey // nil without a room
}

// Admitted is the number of buyers let in at now: the head, up to the
// places given. A random room admits no one before its pre-queue is
// sealed.
func (r *Room) Admitted(now int64) int64 {
	return admitted(r.Mode, r.Prequeue, r.Joined, r.Clock, now)
}

func admitted(mode, prequeue, joined int64, c Clock, now int64) int64 {
	if mode == RoomOff || mode == RoomRandom && prequeue < 0 {
		return 0
	}
	return min(c.HeadAt(now), joined)
}

// Room reads the waiting room of sale (one admin get, which seals a random
// room's pre-queue once it has started; and its buckets, for sold out).
// It returns ErrNotFound or an error wrapping ErrUnavailable.
func (s *Store) Room(ctx context.Context, sale string) (*Room, error) {
	v, err := s.Sale(ctx, sale)
	if err != nil {
		return nil, err
	}
	r, err := newRoom(v.ID, v.StartsAt, v.EndsAt, v.Room, v.Remaining() <= 0)
	if err != nil {
		return nil, err
	}
	r.Remaining = max(v.Remaining(), 0)
	return r, nil
}

// RoomOf reads the waiting room of sale with one HMGET of its meta hash,
// no script: a request that waits for it must not wait on a script cache
// being reloaded (Room, a script call, seals a random room's pre-queue and
// sums a sale of buckets; the gateway reads rooms with it in the
// background). A sale of several buckets is never SoldOut here. It returns
// ErrNotFound or an error wrapping ErrUnavailable.
func (s *Store) RoomOf(ctx context.Context, sale string) (*Room, error) {
	m, err := s.rdb.HMGet(ctx, s.keys.Meta(sale), "stock", "sold", "starts", "ends", "buckets",
		"wr", "aps", "pass", "joined", "preq", "qv", "qt", "qh", "born", "wkey").Result()
	if err != nil {
		return nil, fmt.Errorf("room %s: %w: %w", sale, ErrUnavailable, err)
	}
	if m[0] == nil {
		return nil, ErrNotFound
	}
	num := func(i int, def int64) int64 {
		str, _ := m[i].(string)
		if n, err := strconv.ParseInt(str, 10, 64); err == nil {
			return n
		}
		return def
	}
	starts := num(2, 0)
	w := scripts.Room{Mode: num(5, RoomOff), Rate: num(6, DefaultAdmitPerSecond), Pass: num(7, DefaultPassSeconds),
		Joined: num(8, 0), Prequeue: num(9, -1), Version: num(10, 0), At: num(11, -1), Head: num(12, 0)}
	if w.At < 0 { // no anchor set: the window's start, or the sale's creation (queue.lua)
		w.At, w.Head = starts, 0
		if starts == 0 {
			w.At = num(13, 0)
		}
	}
	w.Key, _ = m[14].(string)
	left := max(num(0, 0)-num(1, 0), 0)
	r, err := newRoom(sale, starts, num(3, 0), w, num(4, 1) <= 1 && left <= 0)
	if err != nil {
		return nil, err
	}
	// A sale of several buckets: its home's count until the background's
	// first read (Room), within a second.
	r.Remaining = left
	return r, nil
}

// newRoom is the Room of a script's reply.
func newRoom(sale string, starts, ends int64, w scripts.Room, soldOut bool) (*Room, error) {
	r := &Room{Sale: sale, Mode: w.Mode, Pass: w.Pass, Joined: w.Joined, Prequeue: w.Prequeue,
		Start: starts, End: ends, SoldOut: soldOut,
		Clock: Clock{Version: w.Version, At: w.At, Head: w.Head, Rate: w.Rate}}
	if w.Mode == RoomOff {
		return r, nil
	}
	k, err := NewTicketKey(w.Key)
	if err != nil {
		return nil, fmt.Errorf("room %s: %w: %w", sale, ErrUnavailable, err)
	}
	r.Key = k
	return r, nil
}

// Place is a buyer's place in a room: its join number, and the room as the
// join saw it.
type Place struct {
	Join int64
	Room *Room
}

// Join gives user a place in the waiting room of sale, or finds the one it
// has, batched with the other joins of the sale in flight on this process
// as buys are (one queue script call on the sale's slot per batch). It
// returns ErrNotFound, ErrNoRoom, ErrEnded, ErrSoldOut, ErrRateLimited at
// once when the sale already has Batching.MaxInFlight joins in flight
// here, or an error wrapping ErrUnavailable when Redis did not answer in
// time. It blocks for at most about two Timeouts.
func (s *Store) Join(sale, user string) (Place, error) {
	return s.joins.run(sale, sale, user)
}

// join makes one queue script call for users, the batch of joins of sale,
// and sets out[i] to users[i]'s place. Every outcome but a place is the
// sale's, and so the batch's: it is returned.
func (s *Store) join(ctx context.Context, sale string, users []string, out []Place) error {
	r, err := s.loader.Join(ctx, []string{s.keys.Meta(sale), s.keys.Queue(sale)}, users)
	if err != nil {
		return fmt.Errorf("join %s: %w: %w", sale, ErrUnavailable, err)
	}
	if err := outcome(r.Code); err != nil {
		return err
	}
	room, err := newRoom(sale, r.StartsAt, r.EndsAt, r.Room, false)
	if err != nil {
		return err
	}
	for i, j := range r.Joins {
		out[i] = Place{Join: j, Room: room}
	}
	return nil
}

// newRoomKey draws a sale's ticket key, given to the admin script with a
// change that may give the sale a room; the script keeps the first.
func newRoomKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
