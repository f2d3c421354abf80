package crowdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"
)

// A waiting room's crowd (Options.Room): buyers that each join at one
// base, poll at another and buy at a third (buyer i: bases i, i+1, i+2),
// as behind a load balancer; a request that gets no answer goes to the
// next base, a buy with the same Idempotency-Key. The workers share the
// buyers, each looking after its share in turn, so that every buyer holds
// a place at once, as a crowd does. Every fifth buyer tries to buy while
// still far from the head, and must be refused.

// Room configures a waiting room's crowd; its sale is Options.Sales[0].
type Room struct {
	// Start and Rate are the sale's starts_at (Unix ms; for an open
	// window a moment before the sale's creation) and admit_per_second,
	// never changed: no base may let position p in before
	// Start + p/Rate.
	Start, Rate int64
	// Buyers are the crowd's buyers (NewRoomBuyers). One that holds a
	// place already (Pos, Ticket) begins by joining again, which must
	// answer the same place.
	Buyers []*RoomBuyer
	// PollCap caps the pause a poll's poll_after_ms asks for, so that a
	// test stays short; default 200 ms.
	PollCap time.Duration
}

// QueueView is the part of a queue view (join or poll) the tests read.
type QueueView struct {
	Status      string `json:"status"`
	SaleID      string `json:"sale_id"`
	UserID      string `json:"user_id"`
	Ticket      string `json:"ticket"`
	Position    *int64 `json:"position"`
	Ahead       *int64 `json:"ahead"`
	PollAfterMS int64  `json:"poll_after_ms"`
}

// BuyAnswer is the part of a buy's answer the tests read.
type BuyAnswer struct {
	Status  string `json:"status"`
	OrderID string `json:"order_id"`
	UserID  string `json:"user_id"`
}

// RoomBuyer is one buyer of a room's crowd, looked after by one worker.
// A test reads it once the crowd is done.
type RoomBuyer struct {
	I      int
	User   string
	Ticket string // the first join's, kept for every later request
	Pos    int64
	step   int // roomJoin, roomPoll, roomBuy, roomDone
	next   time.Time
	moved  bool // joined again after a base gave no answer
	// joinSent and joinAnswered bound the first join (fifo: a join
	// answered before another was sent has the smaller position).
	joinSent, joinAnswered time.Time
	cheated                bool // a buy sent while waiting after the start
	cheat202               bool // a buy sent while waiting was accepted (admitted meanwhile)
}

const (
	roomJoin = iota
	roomPoll
	roomBuy
	roomDone
)

// NewRoomBuyers is n buyers, u0 … u(n-1), none joined yet.
func NewRoomBuyers(n int) []*RoomBuyer {
	bs := make([]*RoomBuyer, n)
	for i := range bs {
		bs[i] = &RoomBuyer{I: i, User: "u" + strconv.Itoa(i)}
	}
	return bs
}

// Ticket is a buyer's ticket.
type Ticket struct{ User, Ticket string }

// roomSeen is one poll's answer: position and status, and when it was
// sent and answered.
type roomSeen struct {
	pos            int64
	admitted       bool
	sent, answered time.Time
}

// room is what a room's crowd keeps beside the buyers' answers; its
// slices are guarded by the crowd's mu.
type room struct {
	Room
	sale     string
	seen     []roomSeen
	admitted []Ticket // tickets seen admitted, for the intruders
	rejoins  int64
}

func (c *Crowd) startRoom() {
	r := &room{Room: *c.o.Room, sale: c.o.Sales[0]}
	if r.PollCap == 0 {
		r.PollCap = 200 * time.Millisecond
	}
	c.room = r
	shares := make([][]*RoomBuyer, min(c.o.Workers, len(r.Buyers)))
	for i, b := range r.Buyers {
		shares[i%len(shares)] = append(shares[i%len(shares)], b)
	}
	for _, share := range shares {
		c.wg.Go(func() { c.work(share) })
	}
}

// work looks after a share of the buyers until each is done: whichever is
// due takes its next step.
func (c *Crowd) work(share []*RoomBuyer) {
	for {
		if errors.Is(c.deadline.Err(), context.DeadlineExceeded) {
			c.fail("buyer deadline passed")
			return
		}
		left := 0
		due := false
		for _, b := range share {
			if b.step == roomDone {
				continue
			}
			left++
			if time.Now().Before(b.next) {
				continue
			}
			due = true
			if !c.stepOf(b) {
				return
			}
		}
		if left == 0 {
			return
		}
		if !due {
			select {
			case <-c.deadline.Done():
				if errors.Is(c.deadline.Err(), context.DeadlineExceeded) {
					c.fail("buyer deadline passed")
				}
				return
			case <-c.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// stepOf takes b's next step; false when the deadline passed.
func (c *Crowd) stepOf(b *RoomBuyer) bool {
	switch b.step {
	case roomJoin:
		return c.join(b, b.I%len(c.o.Bases))
	case roomPoll:
		return c.poll(b)
	case roomBuy:
		return c.roomBuy(b)
	}
	return true
}

// rsend is send on the room's sale, counting a request answered by
// another base than its first.
func (c *Crowd) rsend(first int, method, path, body string, hdr map[string]string) (answer, bool) {
	a, ok := c.send(first, method, c.room.sale, path, body, hdr)
	if ok && a.tries > 0 {
		c.failovers.Add(1)
	}
	return a, ok
}

func (c *Crowd) count(what string, code int, status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.codes[what+" "+strconv.Itoa(code)+" "+status]++
}

// join gives b its place through base first (or the next ones), or finds
// it again: a buyer joined once has the same position ever after.
func (c *Crowd) join(b *RoomBuyer, first int) bool {
	sent := time.Now()
	a, ok := c.rsend(first, "POST", "/queue", `{"user_id":"`+b.User+`"}`, nil)
	if !ok {
		return false
	}
	answered := time.Now()
	var v QueueView
	_ = json.Unmarshal(a.raw, &v)
	c.count("join", a.code, v.Status)
	if a.code != 200 || v.UserID != b.User || v.Position == nil || v.Ticket == "" || (v.Status != "waiting" && v.Status != "admitted") {
		c.fail(fmt.Sprintf("join of %s: %d %s", b.User, a.code, a.raw))
		b.step = roomDone
		return true
	}
	if b.Pos != 0 {
		if *v.Position != b.Pos {
			c.fail(fmt.Sprintf("%s joined again at position %d, had %d", b.User, *v.Position, b.Pos))
		}
		if b.step == roomJoin {
			b.step = roomPoll
		}
		return true
	}
	b.Pos, b.Ticket = *v.Position, v.Ticket
	b.joinSent, b.joinAnswered = sent, answered
	b.step = roomPoll
	// Every fifth buyer tries to buy at once, while still far from the
	// head (a second of admissions ahead): the gateway must refuse it.
	if b.I%5 == 0 && v.Status == "waiting" && v.Ahead != nil && *v.Ahead >= c.room.Rate {
		return c.cheat(b)
	}
	return true
}

// cheat sends a buy of b with its ticket before any poll said admitted. It
// must be 403 not_admitted, unless b was let in meanwhile (a sold_out or
// a 202 then, of a position the clock had reached).
func (c *Crowd) cheat(b *RoomBuyer) bool {
	hdr := map[string]string{"Flashgate-Ticket": b.Ticket, "Idempotency-Key": "c-" + b.User}
	r, ok := c.rsend(b.I+2, "POST", "/orders", `{"user_id":"`+b.User+`","quantity":1}`, hdr)
	if !ok {
		return false
	}
	answered := time.Now()
	var a BuyAnswer
	_ = json.Unmarshal(r.raw, &a)
	c.count("early-buy", r.code, a.Status)
	switch {
	case r.code == 403 && a.Status == "not_admitted":
	case (r.code == 202 && a.Status == "accepted" || r.code == 410 && a.Status == "sold_out") && b.Pos <= c.headBound(answered):
		if r.code == 202 {
			c.mu.Lock()
			c.acceptLocked(r.from, c.room.sale, b.User, "c-"+b.User, a.OrderID, a.UserID, r.raw)
			c.mu.Unlock()
			b.cheat202 = true
		}
	default:
		c.fail(fmt.Sprintf("%s (position %d, the clock at most %d) bought before admitted: %d %s", b.User, b.Pos, c.headBound(answered), r.code, r.raw))
	}
	return true
}

// headBound is the most positions any base may have let in at at.
func (c *Crowd) headBound(at time.Time) int64 {
	return max(0, (at.UnixMilli()-c.room.Start)*c.room.Rate/1000)
}

// poll asks for b's place at its poll base (or the next ones); a buyer
// whose base gave no answer joins again where it was answered, and must
// find its place.
func (c *Crowd) poll(b *RoomBuyer) bool {
	first := (b.I + 1) % len(c.o.Bases)
	sent := time.Now()
	a, ok := c.rsend(first, "GET", "/queue", "", map[string]string{"Flashgate-Ticket": b.Ticket})
	if !ok {
		return false
	}
	answered := time.Now()
	var v QueueView
	_ = json.Unmarshal(a.raw, &v)
	c.count("poll", a.code, v.Status)
	switch {
	case a.code == 410 && v.Status == "sold_out":
		b.step = roomDone
		return true
	case a.code != 200 || v.Position == nil || *v.Position != b.Pos || v.UserID != b.User || v.Ticket != b.Ticket ||
		(v.Status != "waiting" && v.Status != "admitted"):
		c.fail(fmt.Sprintf("poll of %s (position %d): %d %s", b.User, b.Pos, a.code, a.raw))
		b.step = roomDone
		return true
	}
	admitted := v.Status == "admitted"
	c.mu.Lock()
	c.room.seen = append(c.room.seen, roomSeen{pos: b.Pos, admitted: admitted, sent: sent, answered: answered})
	if admitted {
		c.room.admitted = append(c.room.admitted, Ticket{b.User, b.Ticket})
	}
	c.mu.Unlock()
	if admitted && b.Pos > c.headBound(answered) {
		c.fail(fmt.Sprintf("%s at position %d polled admitted when the clock allowed %d", b.User, b.Pos, c.headBound(answered)))
	}
	if a.from != first && !b.moved {
		b.moved = true
		c.mu.Lock()
		c.room.rejoins++
		c.mu.Unlock()
		if !c.join(b, a.from) {
			return false
		}
	}
	if admitted {
		b.step = roomBuy
		return c.roomBuy(b)
	}
	// Every fifth buyer tries once more to buy while waiting, once the
	// sale has started, a second of admissions from the head.
	if b.I%5 == 0 && !b.cheated && sent.UnixMilli() > c.room.Start && v.Ahead != nil && *v.Ahead >= c.room.Rate {
		b.cheated = true
		if !c.cheat(b) {
			return false
		}
	}
	b.next = time.Now().Add(min(time.Duration(v.PollAfterMS)*time.Millisecond, c.room.PollCap))
	return true
}

// roomBuy sends b's buy, admitted by a poll, with its ticket and its
// Idempotency-Key; an accepted buy is sent once more to another base and
// must come back byte for byte.
func (c *Crowd) roomBuy(b *RoomBuyer) bool {
	hdr := map[string]string{"Flashgate-Ticket": b.Ticket, "Idempotency-Key": "k-" + b.User}
	body := `{"user_id":"` + b.User + `","quantity":1}`
	r, ok := c.rsend(b.I+2, "POST", "/orders", body, hdr)
	if !ok {
		return false
	}
	answered := time.Now()
	b.step = roomDone
	var a BuyAnswer
	_ = json.Unmarshal(r.raw, &a)
	c.count("buy", r.code, a.Status)
	switch {
	case r.code == 202 && a.Status == "accepted":
		if b.Pos > c.headBound(answered) {
			c.fail(fmt.Sprintf("%s at position %d bought when the clock allowed %d", b.User, b.Pos, c.headBound(answered)))
		}
		c.mu.Lock()
		c.acceptLocked(r.from, c.room.sale, b.User, "k-"+b.User, a.OrderID, a.UserID, r.raw)
		c.mu.Unlock()
		again, ok := c.rsend(r.from+1, "POST", "/orders", body, hdr)
		if !ok {
			return false
		}
		if again.code != 202 || !bytes.Equal(r.raw, again.raw) {
			c.fail(fmt.Sprintf("key k-%s replayed on base %d: %d %s; first answer (base %d): %s", b.User, again.from, again.code, again.raw, r.from, r.raw))
		}
		c.replayed(b.User, "k-"+b.User, again)
	case r.code == 410 && a.Status == "sold_out":
	case r.code == 409 && a.Status == "limit_reached" && b.cheat202:
	default:
		c.fail(fmt.Sprintf("buy of %s (position %d, polled admitted): %d %s", b.User, b.Pos, r.code, r.raw))
	}
	return true
}

// checkLocked fails the test on places that are not exactly 1..n, one per
// buyer; on a fifo join answered before another was sent with the larger
// place; then on a poll that saw a position waiting after another poll
// had seen a larger one admitted (the head only moves forward, on every
// base alike: the clock is the same arithmetic everywhere and no join
// moved its anchor during the test, a crowd being always ahead of it).
// c.mu is held.
func (r *room) checkLocked(c *Crowd) {
	t := c.t
	t.Helper()
	byPos := map[int64]string{}
	for _, b := range r.Buyers {
		if prev, dup := byPos[b.Pos]; dup {
			t.Fatalf("position %d given to %s and %s", b.Pos, prev, b.User)
		}
		byPos[b.Pos] = b.User
	}
	for p := int64(1); p <= int64(len(r.Buyers)); p++ {
		if _, ok := byPos[p]; !ok {
			t.Fatalf("no buyer at position %d of %d", p, len(r.Buyers))
		}
	}
	if msg := joinOrder(r.Buyers); msg != "" {
		t.Fatal(msg)
	}
	in, out := r.split()
	sort.Slice(in, func(i, j int) bool { return in[i].answered.Before(in[j].answered) })
	sort.Slice(out, func(i, j int) bool { return out[i].sent.Before(out[j].sent) })
	var top int64 // the largest position seen admitted by answers before out[k] was sent
	i := 0
	for _, w := range out {
		for i < len(in) && in[i].answered.Before(w.sent) {
			top = max(top, in[i].pos)
			i++
		}
		if w.pos < top {
			t.Fatalf("position %d polled waiting (sent %s) after position %d was polled admitted", w.pos, w.sent.Format(time.StampMicro), top)
		}
	}
}

// split returns the polls that saw admitted, and those that saw waiting.
func (r *room) split() (in, out []roomSeen) {
	for _, s := range r.seen {
		if s.admitted {
			in = append(in, s)
		} else {
			out = append(out, s)
		}
	}
	return in, out
}

// summary is the room's part of Check's log line; "" for no room.
func (r *room) summary() string {
	if r == nil {
		return ""
	}
	in, out := r.split()
	return fmt.Sprintf("; %d polls admitted, %d waiting; %d buyers joined again", len(in), len(out), r.rejoins)
}

// joinOrder says which buyer whose first join was answered before
// another's was sent has the larger position (fifo, API.md "Order of
// admission"), "" when none; buyers joined outside the crowd (no times)
// are left out.
func joinOrder(buyers []*RoomBuyer) string {
	var bs []*RoomBuyer
	for _, b := range buyers {
		if !b.joinSent.IsZero() {
			bs = append(bs, b)
		}
	}
	byAnswer := slices.Clone(bs)
	sort.Slice(byAnswer, func(i, j int) bool { return byAnswer[i].joinAnswered.Before(byAnswer[j].joinAnswered) })
	sort.Slice(bs, func(i, j int) bool { return bs[i].joinSent.Before(bs[j].joinSent) })
	var top *RoomBuyer // of the joins answered before b's was sent, the one at the largest position
	i := 0
	for _, b := range bs {
		for i < len(byAnswer) && byAnswer[i].joinAnswered.Before(b.joinSent) {
			if top == nil || byAnswer[i].Pos > top.Pos {
				top = byAnswer[i]
			}
			i++
		}
		if top != nil && top.Pos > b.Pos {
			return fmt.Sprintf("%s joined at position %d after %s's join, at position %d, was answered", b.User, b.Pos, top.User, top.Pos)
		}
	}
	return ""
}

// MaxSeenAdmitted is the largest position a poll saw admitted.
func (c *Crowd) MaxSeenAdmitted() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var top int64
	for _, s := range c.room.seen {
		if s.admitted {
			top = max(top, s.pos)
		}
	}
	return top
}

// Rejoins is the buyers that joined again after a base gave no answer.
func (c *Crowd) Rejoins() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.room.rejoins
}

// RoomBuyers is the room's buyers, to be read once the crowd is done.
func (c *Crowd) RoomBuyers() []*RoomBuyer { return c.room.Buyers }
