package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// The waiting room (API.md "Waiting room", DESIGN.md invariant 11) on real
// processes: gateways killed (SIGKILL) while a crowd waits, and Redis
// restarted under a room. A place lives in Redis and a ticket is signed
// with a key of the sale's, so neither a dead gateway nor a restarted
// Redis may cost a buyer its place, and no buy may pass without an
// admitted ticket of its buyer.
//
// The crowd (roomCrowd) is buyers that each join at one gateway, poll at
// another and buy at a third, as behind a load balancer; a request that
// gets no answer (connection refused, reset, 5xx, 429) goes to the next
// gateway, a buy with the same Idempotency-Key. 32 workers share the
// buyers, each looking after its share in turn, so that every buyer holds
// a place at once, as a crowd does.

const (
	roomBuyers  = 1000
	roomWorkers = 32
	roomStock   = 300
	// roomRate is the sale's admit_per_second: the stock's buyers are let
	// in over about four seconds, so that a kill finds admission going on.
	roomRate = 80
	// roomPollCap caps the pause a poll's poll_after_ms asks for, so that
	// the test stays short.
	roomPollCap = 200 * time.Millisecond
)

// roomView is the part of a queue view the tests read.
type roomView struct {
	Status      string `json:"status"`
	SaleID      string `json:"sale_id"`
	UserID      string `json:"user_id"`
	Ticket      string `json:"ticket"`
	Position    *int64 `json:"position"`
	Ahead       *int64 `json:"ahead"`
	PollAfterMS int64  `json:"poll_after_ms"`
}

// roomAnswer is the part of a buy's answer the tests read.
type roomAnswer struct {
	Status  string `json:"status"`
	OrderID string `json:"order_id"`
	UserID  string `json:"user_id"`
}

// roomBuyer is one buyer of a roomCrowd, looked after by one worker.
type roomBuyer struct {
	i      int
	user   string
	ticket string // the first join's, kept for every later request
	pos    int64
	step   int // roomJoin, roomPoll, roomBuy, roomDone
	next   time.Time
	moved  bool // joined again after a gateway gave no answer
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

// roomSeen is one poll's answer: position and status, and when it was
// sent and answered.
type roomSeen struct {
	pos            int64
	admitted       bool
	sent, answered time.Time
}

// roomCrowd is a waiting room's crowd in front of several gateways.
type roomCrowd struct {
	t      *testing.T
	sale   string
	bases  []string
	client *http.Client
	ctx    context.Context // the buyers' deadline
	// start and rate are the sale's starts_at (Unix ms) and
	// admit_per_second, never changed: no gateway may let position p in
	// before start + p/rate (the clock's anchor is the start, and a join
	// only ever moves it back).
	start, rate int64

	mu       sync.Mutex
	buyers   []*roomBuyer
	seen     []roomSeen
	accepted map[string]string // order id → user
	admitted []roomTicket      // tickets seen admitted, for the intruders
	codes    map[string]int    // "what code status" → count
	bad      []string

	n202      atomic.Int64
	failovers atomic.Int64 // requests answered by another gateway than their first
	rejoins   atomic.Int64
	wg        sync.WaitGroup
}

type roomTicket struct{ user, ticket string }

// newRoomBuyers is n buyers, u0 … u(n-1), none joined yet.
func newRoomBuyers(n int) []*roomBuyer {
	bs := make([]*roomBuyer, n)
	for i := range bs {
		bs[i] = &roomBuyer{i: i, user: "u" + strconv.Itoa(i)}
	}
	return bs
}

// startRoomCrowd starts up to roomWorkers workers over the buyers of sale
// (start and rate its settings: start the starts_at, or for an open
// window a moment before the sale's creation) and returns at once. A
// buyer that holds a place already (pos, ticket) begins by joining again,
// which must answer the same place. The buyers give up
// after three minutes, and that fails the test.
func startRoomCrowd(t *testing.T, gs []*gatewayProc, sale string, start, rate int64, buyers []*roomBuyer) *roomCrowd {
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * roomWorkers}
	c := &roomCrowd{t: t, sale: sale, client: &http.Client{Timeout: 5 * time.Second, Transport: tr},
		start: start, rate: rate, buyers: buyers, accepted: map[string]string{}, codes: map[string]int{}}
	for _, g := range gs {
		c.bases = append(c.bases, "http://"+g.public)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	c.ctx = ctx
	shares := make([][]*roomBuyer, min(roomWorkers, len(buyers)))
	for i, b := range buyers {
		shares[i%len(shares)] = append(shares[i%len(shares)], b)
	}
	for _, share := range shares {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.work(share)
		}()
	}
	go func() { c.wg.Wait(); cancel() }()
	t.Cleanup(func() {
		cancel()
		c.wg.Wait()
		tr.CloseIdleConnections()
	})
	return c
}

// work looks after a share of the buyers until each is done: whichever is
// due takes its next step.
func (c *roomCrowd) work(share []*roomBuyer) {
	for {
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
				c.fail("buyer deadline passed")
				return
			}
		}
		if left == 0 {
			return
		}
		if !due {
			select {
			case <-c.ctx.Done():
				c.fail("buyer deadline passed")
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// stepOf takes b's next step; false when the deadline passed.
func (c *roomCrowd) stepOf(b *roomBuyer) bool {
	switch b.step {
	case roomJoin:
		return c.join(b, b.i%len(c.bases))
	case roomPoll:
		return c.poll(b)
	case roomBuy:
		return c.buy(b)
	}
	return true
}

// join gives b its place through gateway first (or the next ones), or
// finds it again: a buyer joined once has the same position ever after.
func (c *roomCrowd) join(b *roomBuyer, first int) bool {
	sent := time.Now()
	code, raw, _, ok := c.send(first, "POST", "/queue", `{"user_id":"`+b.user+`"}`, nil)
	if !ok {
		return false
	}
	answered := time.Now()
	var v roomView
	_ = json.Unmarshal(raw, &v)
	c.count("join", code, v.Status)
	if code != 200 || v.UserID != b.user || v.Position == nil || v.Ticket == "" || (v.Status != "waiting" && v.Status != "admitted") {
		c.fail(fmt.Sprintf("join of %s: %d %s", b.user, code, raw))
		b.step = roomDone
		return true
	}
	if b.pos != 0 {
		if *v.Position != b.pos {
			c.fail(fmt.Sprintf("%s joined again at position %d, had %d", b.user, *v.Position, b.pos))
		}
		if b.step == roomJoin {
			b.step = roomPoll
		}
		return true
	}
	b.pos, b.ticket = *v.Position, v.Ticket
	b.joinSent, b.joinAnswered = sent, answered
	b.step = roomPoll
	// Every fifth buyer tries to buy at once, while still far from the
	// head (a second of admissions ahead): the gateway must refuse it.
	if b.i%5 == 0 && v.Status == "waiting" && v.Ahead != nil && *v.Ahead >= c.rate {
		return c.cheat(b)
	}
	return true
}

// cheat sends a buy of b with its ticket before any poll said admitted. It
// must be 403 not_admitted, unless b was let in meanwhile (a sold_out or
// a 202 then, of a position the clock had reached).
func (c *roomCrowd) cheat(b *roomBuyer) bool {
	hdr := map[string]string{"Flashgate-Ticket": b.ticket, "Idempotency-Key": "c-" + b.user}
	code, raw, _, ok := c.send(b.i+2, "POST", "/orders", `{"user_id":"`+b.user+`","quantity":1}`, hdr)
	if !ok {
		return false
	}
	answered := time.Now()
	var a roomAnswer
	_ = json.Unmarshal(raw, &a)
	c.count("early-buy", code, a.Status)
	switch {
	case code == 403 && a.Status == "not_admitted":
	case (code == 202 && a.Status == "accepted" || code == 410 && a.Status == "sold_out") && b.pos <= c.headBound(answered):
		if code == 202 {
			c.accept(a, b.user, raw)
			b.cheat202 = true
		}
	default:
		c.fail(fmt.Sprintf("%s (position %d, the clock at most %d) bought before admitted: %d %s", b.user, b.pos, c.headBound(answered), code, raw))
	}
	return true
}

// headBound is the most positions any gateway may have let in at at.
func (c *roomCrowd) headBound(at time.Time) int64 {
	return max(0, (at.UnixMilli()-c.start)*c.rate/1000)
}

// poll asks for b's place at its poll gateway (or the next ones); a buyer
// whose gateway gave no answer joins again where it was answered, and
// must find its place.
func (c *roomCrowd) poll(b *roomBuyer) bool {
	first := (b.i + 1) % len(c.bases)
	sent := time.Now()
	code, raw, from, ok := c.send(first, "GET", "/queue", "", map[string]string{"Flashgate-Ticket": b.ticket})
	if !ok {
		return false
	}
	answered := time.Now()
	var v roomView
	_ = json.Unmarshal(raw, &v)
	c.count("poll", code, v.Status)
	switch {
	case code == 410 && v.Status == "sold_out":
		b.step = roomDone
		return true
	case code != 200 || v.Position == nil || *v.Position != b.pos || v.UserID != b.user || v.Ticket != b.ticket ||
		(v.Status != "waiting" && v.Status != "admitted"):
		c.fail(fmt.Sprintf("poll of %s (position %d): %d %s", b.user, b.pos, code, raw))
		b.step = roomDone
		return true
	}
	admitted := v.Status == "admitted"
	c.mu.Lock()
	c.seen = append(c.seen, roomSeen{pos: b.pos, admitted: admitted, sent: sent, answered: answered})
	if admitted {
		c.admitted = append(c.admitted, roomTicket{b.user, b.ticket})
	}
	c.mu.Unlock()
	if admitted && b.pos > c.headBound(answered) {
		c.fail(fmt.Sprintf("%s at position %d polled admitted when the clock allowed %d", b.user, b.pos, c.headBound(answered)))
	}
	if from != first && !b.moved {
		b.moved = true
		c.rejoins.Add(1)
		if !c.join(b, from) {
			return false
		}
	}
	if admitted {
		b.step = roomBuy
		return c.buy(b)
	}
	// Every fifth buyer tries once more to buy while waiting, once the
	// sale has started, a second of admissions from the head.
	if b.i%5 == 0 && !b.cheated && sent.UnixMilli() > c.start && v.Ahead != nil && *v.Ahead >= c.rate {
		b.cheated = true
		if !c.cheat(b) {
			return false
		}
	}
	b.next = time.Now().Add(min(time.Duration(v.PollAfterMS)*time.Millisecond, roomPollCap))
	return true
}

// buy sends b's buy, admitted by a poll, with its ticket and its
// Idempotency-Key; an accepted buy is sent once more to another gateway
// and must come back byte for byte.
func (c *roomCrowd) buy(b *roomBuyer) bool {
	hdr := map[string]string{"Flashgate-Ticket": b.ticket, "Idempotency-Key": "k-" + b.user}
	body := `{"user_id":"` + b.user + `","quantity":1}`
	code, raw, from, ok := c.send(b.i+2, "POST", "/orders", body, hdr)
	if !ok {
		return false
	}
	answered := time.Now()
	b.step = roomDone
	var a roomAnswer
	_ = json.Unmarshal(raw, &a)
	c.count("buy", code, a.Status)
	switch {
	case code == 202 && a.Status == "accepted":
		if b.pos > c.headBound(answered) {
			c.fail(fmt.Sprintf("%s at position %d bought when the clock allowed %d", b.user, b.pos, c.headBound(answered)))
		}
		c.accept(a, b.user, raw)
		again, raw2, from2, ok := c.send(from+1, "POST", "/orders", body, hdr)
		if !ok {
			return false
		}
		if again != 202 || !bytes.Equal(raw, raw2) {
			c.fail(fmt.Sprintf("key k-%s replayed on gateway %d: %d %s; first answer (gateway %d): %s", b.user, from2, again, raw2, from, raw))
		}
	case code == 410 && a.Status == "sold_out":
	case code == 409 && a.Status == "limit_reached" && b.cheat202:
	default:
		c.fail(fmt.Sprintf("buy of %s (position %d, polled admitted): %d %s", b.user, b.pos, code, raw))
	}
	return true
}

func (c *roomCrowd) accept(a roomAnswer, user string, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.OrderID == "" || a.UserID != user {
		c.bad = append(c.bad, fmt.Sprintf("202 for %s: %s", user, raw))
		return
	}
	if prev, dup := c.accepted[a.OrderID]; dup {
		if prev != user {
			c.bad = append(c.bad, fmt.Sprintf("order %s given to %s and %s", a.OrderID, prev, user))
		}
		return
	}
	c.accepted[a.OrderID] = user
	c.n202.Add(1)
}

// send sends a request on the sale (path after /v1/sales/{sale}) to
// gateway first%n, then the next ones in turn, until one answers with
// neither a 5xx nor a 429; it returns the answer and the gateway that gave
// it, false when the deadline passed first. A request is not bound to the
// deadline: one in flight gets its answer.
func (c *roomCrowd) send(first int, method, path, body string, hdr map[string]string) (int, []byte, int, bool) {
	first %= len(c.bases)
	for attempt := 0; ; attempt++ {
		i := (first + attempt) % len(c.bases)
		code, raw, err := roomDo(c.client, method, c.bases[i]+"/v1/sales/"+c.sale+path, body, hdr)
		if err == nil && code < 500 && code != 429 {
			if attempt > 0 {
				c.failovers.Add(1)
			}
			return code, raw, i, true
		}
		select {
		case <-c.ctx.Done():
			return 0, nil, 0, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func roomDo(c *http.Client, method, url, body string, hdr map[string]string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res.StatusCode, raw, err
}

func (c *roomCrowd) count(what string, code int, status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.codes[what+" "+strconv.Itoa(code)+" "+status]++
}

func (c *roomCrowd) fail(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bad = append(c.bad, msg)
}

// check fails the test on any answer a buyer should never get; then on
// places that are not exactly 1..n, one per buyer; then on a poll that
// saw a position waiting after another poll had seen a larger one
// admitted (the head only moves forward, on every gateway alike: the
// clock is the same arithmetic everywhere and no join moved its anchor
// during the test, a crowd being always ahead of it).
func (c *roomCrowd) check() {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		c.t.Fatalf("%d unexpected answers, first ones: %q", len(c.bad), c.bad[:min(len(c.bad), 10)])
	}
	byPos := map[int64]string{}
	for _, b := range c.buyers {
		if prev, dup := byPos[b.pos]; dup {
			c.t.Fatalf("position %d given to %s and %s", b.pos, prev, b.user)
		}
		byPos[b.pos] = b.user
	}
	for p := int64(1); p <= int64(len(c.buyers)); p++ {
		if _, ok := byPos[p]; !ok {
			c.t.Fatalf("no buyer at position %d of %d", p, len(c.buyers))
		}
	}
	checkJoinOrder(c.t, c.buyers)
	var in, out []roomSeen
	for _, s := range c.seen {
		if s.admitted {
			in = append(in, s)
		} else {
			out = append(out, s)
		}
	}
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
			c.t.Fatalf("position %d polled waiting (sent %s) after position %d was polled admitted", w.pos, w.sent.Format(time.StampMicro), top)
		}
	}
	keys := make([]string, 0, len(c.codes))
	for k := range c.codes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s: %d; ", k, c.codes[k])
	}
	c.t.Logf("answers %s%d polls admitted, %d waiting; %d requests answered by another gateway than their first, %d buyers joined again",
		sb.String(), len(in), len(out), c.failovers.Load(), c.rejoins.Load())
}

// maxSeenAdmitted is the largest position a poll saw admitted.
func (c *roomCrowd) maxSeenAdmitted() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var top int64
	for _, s := range c.seen {
		if s.admitted {
			top = max(top, s.pos)
		}
	}
	return top
}

// roomIntruders send, until stopped, buys that no gateway may accept, to
// each gateway in turn: without a ticket, with a forged ticket, with an
// admitted ticket of another buyer, with another sale's ticket. Each must
// be 403 not_admitted; a gateway that does not answer (killed) is passed
// over.
type roomIntruders struct {
	c       *roomCrowd
	foreign roomTicket // a ticket of another sale's room
	sent    atomic.Int64
	refused atomic.Int64
	stopped chan struct{}
	done    chan struct{}
}

func startRoomIntruders(c *roomCrowd, foreign roomTicket) *roomIntruders {
	r := &roomIntruders{c: c, foreign: foreign, stopped: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	c.t.Cleanup(r.stop)
	return r
}

func (r *roomIntruders) stop() {
	select {
	case <-r.stopped:
	default:
		close(r.stopped)
	}
	<-r.done
}

func (r *roomIntruders) run() {
	defer close(r.done)
	c := r.c
	for n := 0; ; n++ {
		select {
		case <-r.stopped:
			return
		case <-time.After(5 * time.Millisecond):
		}
		user, ticket, what := "x"+strconv.Itoa(n), "", ""
		c.mu.Lock()
		var adm roomTicket
		if len(c.admitted) > 0 {
			adm = c.admitted[n%len(c.admitted)]
		}
		c.mu.Unlock()
		switch n % 5 {
		case 0:
			what = "no ticket"
		case 1:
			what, ticket = "a malformed ticket", "not-a-ticket"
		case 2:
			what, ticket = "another sale's ticket", r.foreign.ticket
			user = r.foreign.user
		case 3:
			if adm.ticket == "" {
				continue
			}
			what, ticket = "an admitted ticket of "+adm.user, adm.ticket
		case 4:
			if adm.ticket == "" {
				continue
			}
			// One character changed in the middle: the MAC must catch it.
			b := []byte(adm.ticket)
			k := len(b) / 2
			if b[k] == 'A' {
				b[k] = 'B'
			} else {
				b[k] = 'A'
			}
			what, ticket, user = "a forged ticket", string(b), adm.user
		}
		hdr := map[string]string{}
		if ticket != "" {
			hdr["Flashgate-Ticket"] = ticket
		}
		base := c.bases[n%len(c.bases)]
		code, raw, err := roomDo(c.client, "POST", base+"/v1/sales/"+c.sale+"/orders", `{"user_id":"`+user+`","quantity":1}`, hdr)
		if err != nil {
			continue // a killed gateway
		}
		r.sent.Add(1)
		var a roomAnswer
		_ = json.Unmarshal(raw, &a)
		if code == 403 && a.Status == "not_admitted" {
			r.refused.Add(1)
			continue
		}
		c.fail(fmt.Sprintf("buy of %s with %s at %s: %d %s", user, what, base, code, raw))
	}
}

// roomSale creates a sale with a waiting room through g's admin API; body
// is the PUT's JSON.
func roomSale(t *testing.T, g *gatewayProc, sale, body string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	code, raw, err := httpDo(c, "PUT", "http://"+g.admin+"/admin/v1/sales/"+sale, body)
	if err != nil || code != 201 {
		t.Fatalf("create sale %s: %d %s %v", sale, code, raw, err)
	}
}

// roomAdminView is the admin view's figures the tests read.
type roomAdminView struct {
	Stock, Sold, Remaining, Joined, Admitted int64
	WaitingRoom                              string `json:"waiting_room"`
}

func roomAdmin(t *testing.T, g *gatewayProc, sale string) roomAdminView {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	code, raw, err := httpDo(c, "GET", "http://"+g.admin+"/admin/v1/sales/"+sale, "")
	var v roomAdminView
	if err != nil || code != 200 || json.Unmarshal([]byte(raw), &v) != nil {
		t.Fatalf("admin view of %s: %d %s %v", sale, code, raw, err)
	}
	return v
}

// joinOnce joins user to sale's room at g and returns the view.
func joinOnce(t *testing.T, c *http.Client, g *gatewayProc, sale, user string) roomView {
	t.Helper()
	code, raw, err := roomDo(c, "POST", "http://"+g.public+"/v1/sales/"+sale+"/queue", `{"user_id":"`+user+`"}`, nil)
	var v roomView
	if err != nil || code != 200 || json.Unmarshal(raw, &v) != nil || v.Position == nil || v.Ticket == "" {
		t.Fatalf("join of %s to %s at %s: %d %s %v", user, sale, g.public, code, raw, err)
	}
	return v
}

// startsAt is a starts_at d from now, to the millisecond, as Unix ms and
// as the admin API takes it.
func roomStartsAt(d time.Duration) (int64, string) {
	at := time.UnixMilli(time.Now().Add(d).UnixMilli())
	return at.UnixMilli(), at.UTC().Format(time.RFC3339Nano)
}

// TestRoomGatewayKill9 guards invariant 11 ("on a sale with a waiting room
// nobody buys without an admission; admissions follow positions") and 6
// past a crash: three gateways on one Redis, a consumer, a fifo room of
// 300 units, per_user_limit 1, admit_per_second 80, a crowd of 1,000
// buyers who join before the start at gateway i%3, poll at i+1 and buy at
// i+2. In the middle of admission gateway 0 is killed (SIGKILL); its
// buyers go on at the others with the tickets they hold, and joining again
// finds their places. Intruders send, throughout, buys without a ticket,
// with a forged one, another buyer's or another sale's. Then:
//
//   - every intruder's buy was 403 not_admitted, and so was every buy sent
//     with a ticket still far from the head;
//   - no 202, and no poll saying admitted, for a position the clock had
//     not reached (start + position/rate), at any gateway;
//   - the places are 1..1000, one per buyer, the same at every gateway and
//     on every join; no poll saw a position waiting after a larger one had
//     been seen admitted;
//   - every 202 is exactly one MySQL row of its buyer, nothing else is
//     there, Redis's sold = MySQL's units = the stock, nobody holds more
//     than one unit; reconcile finds no drift;
//   - once the sale is restocked (so that polls answer again), every
//     ticket polled from the last place to the first sees an admitted
//     prefix 1..k, k at least the largest place seen admitted.
func TestRoomGatewayKill9(t *testing.T) {
	s := newStack(t, "FLASHGATE_LOG_LEVEL=warn")
	gs := []*gatewayProc{s.startGateway(nil), s.startGateway(nil), s.startGateway(nil)}
	s.startConsumers(1)
	const sale = "room"
	start, starts := roomStartsAt(3 * time.Second)
	roomSale(t, gs[1], sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":%d,"starts_at":%q}`,
		roomStock, roomRate, starts))
	// Another sale's room, for a ticket that is genuine but not this sale's.
	roomSale(t, gs[1], "elsewhere", `{"stock":10,"waiting_room":"fifo"}`)
	foreign := joinOnce(t, &http.Client{Timeout: 5 * time.Second}, gs[2], "elsewhere", "x-foreign")

	c := startRoomCrowd(t, gs, sale, start, roomRate, newRoomBuyers(roomBuyers))
	in := startRoomIntruders(c, roomTicket{"x-foreign", foreign.Ticket})

	c.waitAccepted(roomStock/4, time.Minute)
	gs[0].kill9(t)
	at, sentAt := c.n202.Load(), in.sent.Load()
	t.Logf("gateway 0 killed after %d buys accepted, the largest place seen admitted %d", at, c.maxSeenAdmitted())

	c.wg.Wait()
	localstack.WaitFor(t, 10*time.Second, "intruders answered by the living gateways", func() bool { return in.sent.Load() > sentAt+20 })
	in.stop()
	c.check()
	if c.n202.Load() == at {
		t.Fatal("no buy accepted after the kill: admission was over before it")
	}
	if c.rejoins.Load() == 0 {
		t.Fatal("no buyer polled past the dead gateway and joined again")
	}
	if in.refused.Load() != in.sent.Load() || in.sent.Load() == 0 {
		t.Fatalf("intruders: %d of %d refused", in.refused.Load(), in.sent.Load())
	}
	t.Logf("intruders: %d buys, each 403 not_admitted (%d after the kill)", in.sent.Load(), in.sent.Load()-sentAt)

	live := gs[1]
	v := roomAdmin(t, live, sale)
	if v.Joined != roomBuyers || v.Sold != roomStock || v.Remaining != 0 || v.WaitingRoom != "fifo" {
		t.Fatalf("admin view after the crowd: %+v, want %d joined, %d sold", v, roomBuyers, roomStock)
	}
	s.waitDrained(sale, 2*time.Minute)
	c.mu.Lock()
	accepted := maps.Clone(c.accepted)
	c.mu.Unlock()
	if len(accepted) != roomStock {
		t.Fatalf("%d buys accepted, want %d (the stock)", len(accepted), roomStock)
	}
	s.checkExactlyOnce(sale, accepted)
	owners, units := mysqlOwners(t, s, sale)
	for id, user := range owners {
		if got, ok := accepted[id]; !ok || got != user {
			t.Fatalf("order %s of %s is in MySQL; the buyers were given it: %v (%q)", id, user, ok, got)
		}
	}
	for user, n := range units {
		if n > 1 {
			t.Fatalf("%s holds %d units in MySQL, limit 1", user, n)
		}
	}
	s.checkLimit(sale, 1, nil)
	s.checkNoDrift(sale)

	roomCheckPrefix(t, gs[1:], c)
}

// roomCheckPrefix restocks the crowd's sold-out sale, so that its polls
// answer again, and polls every ticket once, from the last place to the
// first, at the given gateways in turn: the head only grows, so what is
// admitted must be a prefix 1..k, and k covers every place seen admitted.
func roomCheckPrefix(t *testing.T, gs []*gatewayProc, c *roomCrowd) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	code, raw, err := httpDo(hc, "POST", "http://"+gs[0].admin+"/admin/v1/sales/"+c.sale+"/restock", `{"quantity":1000}`)
	if err != nil || code != 200 {
		t.Fatalf("restock: %d %s %v", code, raw, err)
	}
	buyers := slices.Clone(c.buyers)
	sort.Slice(buyers, func(i, j int) bool { return buyers[i].pos > buyers[j].pos })
	for _, g := range gs {
		localstack.WaitFor(t, 10*time.Second, "polls answered again after the restock at "+g.public, func() bool {
			code, _, err := roomDo(hc, "GET", "http://"+g.public+"/v1/sales/"+c.sale+"/queue", "", map[string]string{"Flashgate-Ticket": buyers[0].ticket})
			return err == nil && code == 200
		})
	}
	seenTop := c.maxSeenAdmitted()
	var k int64 // the first place seen admitted, polling from the last
	for n, b := range buyers {
		g := gs[n%len(gs)]
		code, raw, err := roomDo(hc, "GET", "http://"+g.public+"/v1/sales/"+c.sale+"/queue", "", map[string]string{"Flashgate-Ticket": b.ticket})
		var v roomView
		if err != nil || code != 200 || json.Unmarshal(raw, &v) != nil || v.Position == nil || *v.Position != b.pos {
			t.Fatalf("final poll of %s (position %d) at %s: %d %s %v", b.user, b.pos, g.public, code, raw, err)
		}
		switch {
		case v.Status == "admitted" && k == 0:
			k = b.pos
		case v.Status != "admitted" && k != 0:
			t.Fatalf("position %d waiting after position %d was admitted (polled from the last place to the first): %s", b.pos, k, raw)
		}
	}
	if k < seenTop {
		t.Fatalf("admitted at the end: 1..%d; a poll during the crowd saw position %d admitted", k, seenTop)
	}
	t.Logf("at the end positions 1..%d of %d admitted; the largest seen admitted during the crowd %d", k, len(buyers), seenTop)
}

// waitAccepted waits until n buys have been accepted in all; an answer
// no buyer should get fails the test at once.
func (c *roomCrowd) waitAccepted(n int, timeout time.Duration) {
	c.t.Helper()
	localstack.WaitFor(c.t, timeout, fmt.Sprintf("%d buys accepted", n), func() bool {
		c.mu.Lock()
		bad := len(c.bad)
		c.mu.Unlock()
		return bad > 0 || c.n202.Load() >= int64(n)
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		c.t.Fatalf("%d unexpected answers, first ones: %q", len(c.bad), c.bad[:min(len(c.bad), 10)])
	}
}

// TestRoomRedisRestart guards the waiting room across a restart of Redis
// (the test's own redis-server, AOF on, as `make up` runs it): a gateway
// and a consumer, a fifo room of 100 units for 150 buyers at 20 admitted
// a second. The 150 join; the first 20, once admitted, buy. Redis is
// stopped and started again on its data. Then:
//
//   - every ticket given before the restart polls 200 with its position,
//     at the gateway that gave it and at a gateway started after the
//     restart, which reads the room (its ticket key, its clock) from the
//     restarted Redis;
//   - every buyer joining again finds its place; the admin view counts
//     150 joined; a buy without an admitted ticket is 403 not_admitted;
//   - the crowd then goes on through both gateways: the 20 early buyers'
//     keys answer their first 202, the others are let in and buy as
//     before, in order of place, none before the clock allows (as in
//     TestRoomGatewayKill9); every 202 is exactly one MySQL row, Redis's
//     sold = MySQL's units = the stock, nobody over the limit, no drift.
func TestRoomRedisRestart(t *testing.T) {
	r := startRedis(t)
	s := newStack(t, "FLASHGATE_REDIS_ADDRS="+r.addr, "FLASHGATE_LOG_LEVEL=warn")
	s.useRedis(r)
	g := s.startGateway(nil)
	s.startConsumers(1)
	const sale, n, stock, rate, early = "aofroom", 150, 100, 20, 20
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	// An open window: the clock starts at the sale's creation, after this.
	start := time.Now().UnixMilli()
	roomSale(t, g, sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":%d}`, stock, rate))
	roomSale(t, g, "elsewhere", `{"stock":10,"waiting_room":"fifo"}`)
	foreign := joinOnce(t, hc, g, "elsewhere", "x-foreign")

	// One after the other: buyer i is at position i+1.
	buyers := newRoomBuyers(n)
	for _, b := range buyers {
		v := joinOnce(t, hc, g, sale, b.user)
		b.pos, b.ticket = *v.Position, v.Ticket
		if b.pos != int64(b.i+1) {
			t.Fatalf("%s joined %d-th at position %d", b.user, b.i+1, b.pos)
		}
	}
	localstack.WaitFor(t, 30*time.Second, fmt.Sprintf("position %d admitted", early), func() bool {
		_, v, _ := pollTicket(t, hc, g, sale, buyers[early-1])
		return v.Status == "admitted"
	})
	firsts := map[string]string{} // user → order id
	for _, b := range buyers[:early] {
		code, raw, err := roomDo(hc, "POST", "http://"+g.public+"/v1/sales/"+sale+"/orders", `{"user_id":"`+b.user+`","quantity":1}`,
			map[string]string{"Flashgate-Ticket": b.ticket, "Idempotency-Key": "k-" + b.user})
		var a roomAnswer
		if err != nil || code != 202 || json.Unmarshal(raw, &a) != nil || a.OrderID == "" {
			t.Fatalf("buy of %s (position %d, admitted) before the restart: %d %s %v", b.user, b.pos, code, raw, err)
		}
		firsts[b.user] = a.OrderID
	}

	r.restart(t)
	localstack.WaitFor(t, 30*time.Second, "gateway ready after the Redis restart", func() bool {
		code, _, err := httpDo(hc, "GET", "http://"+g.public+"/readyz", "")
		return err == nil && code == 200
	})
	ctx := context.Background()
	localstack.WaitFor(t, time.Minute, "the sale released after its check against MySQL", func() bool {
		h, err := s.rdb.HExists(ctx, s.keys.Meta(sale), "hold").Result()
		return err == nil && !h
	})
	// A gateway that knew nothing before the restart: what it knows of
	// the room it reads from the restarted Redis.
	g2 := s.startGateway(nil)
	gs := []*gatewayProc{g, g2}
	for _, b := range buyers {
		for _, gw := range gs {
			code, v, raw := pollTicket(t, hc, gw, sale, b)
			if code != 200 || v.Position == nil || *v.Position != b.pos || v.UserID != b.user {
				t.Fatalf("poll of %s (position %d) after the restart at %s: %d %s", b.user, b.pos, gw.public, code, raw)
			}
		}
		v := joinOnce(t, hc, gs[b.i%2], sale, b.user)
		if *v.Position != b.pos {
			t.Fatalf("%s joined again after the restart at position %d, had %d", b.user, *v.Position, b.pos)
		}
	}
	if v := roomAdmin(t, g2, sale); v.Joined != n || v.WaitingRoom != "fifo" || v.Sold != early {
		t.Fatalf("admin view after the restart: %+v, want %d joined, %d sold", v, n, early)
	}
	for _, gw := range gs {
		for _, hdr := range []map[string]string{nil, {"Flashgate-Ticket": foreign.Ticket}} {
			code, raw, err := roomDo(hc, "POST", "http://"+gw.public+"/v1/sales/"+sale+"/orders", `{"user_id":"x-foreign","quantity":1}`, hdr)
			if err != nil || code != 403 || !strings.Contains(string(raw), `"not_admitted"`) {
				t.Fatalf("buy without a ticket of this sale at %s after the restart: %d %s %v", gw.public, code, raw, err)
			}
		}
	}

	c := startRoomCrowd(t, gs, sale, start, rate, buyers)
	in := startRoomIntruders(c, roomTicket{"x-foreign", foreign.Ticket})
	c.wg.Wait()
	in.stop()
	c.check()
	if in.refused.Load() != in.sent.Load() || in.sent.Load() == 0 {
		t.Fatalf("intruders: %d of %d refused", in.refused.Load(), in.sent.Load())
	}
	c.mu.Lock()
	accepted := maps.Clone(c.accepted)
	c.mu.Unlock()
	for user, id := range firsts {
		if accepted[id] != user {
			t.Fatalf("%s's key after the restart did not answer its first order %s", user, id)
		}
	}
	if len(accepted) != stock {
		t.Fatalf("%d buys accepted, want %d (the stock)", len(accepted), stock)
	}
	s.waitDrained(sale, 2*time.Minute)
	s.checkExactlyOnce(sale, accepted)
	owners, units := mysqlOwners(t, s, sale)
	for id, user := range owners {
		if got, ok := accepted[id]; !ok || got != user {
			t.Fatalf("order %s of %s is in MySQL; the buyers were given it: %v (%q)", id, user, ok, got)
		}
	}
	for user, u := range units {
		if u > 1 {
			t.Fatalf("%s holds %d units in MySQL, limit 1", user, u)
		}
	}
	s.checkLimit(sale, 1, nil)
	s.checkNoDrift(sale)
	roomCheckPrefix(t, gs, c)
}

// checkJoinOrder fails t when a buyer whose first join was answered
// before another's was sent has the larger position (fifo, API.md "Order
// of admission"); buyers joined outside the crowd (no times) are left
// out.
func checkJoinOrder(t *testing.T, buyers []*roomBuyer) {
	t.Helper()
	var bs []*roomBuyer
	for _, b := range buyers {
		if !b.joinSent.IsZero() {
			bs = append(bs, b)
		}
	}
	byAnswer := slices.Clone(bs)
	sort.Slice(byAnswer, func(i, j int) bool { return byAnswer[i].joinAnswered.Before(byAnswer[j].joinAnswered) })
	sort.Slice(bs, func(i, j int) bool { return bs[i].joinSent.Before(bs[j].joinSent) })
	var top *roomBuyer // of the joins answered before b's was sent, the one at the largest position
	i := 0
	for _, b := range bs {
		for i < len(byAnswer) && byAnswer[i].joinAnswered.Before(b.joinSent) {
			if top == nil || byAnswer[i].pos > top.pos {
				top = byAnswer[i]
			}
			i++
		}
		if top != nil && top.pos > b.pos {
			t.Fatalf("%s joined at position %d after %s's join, at position %d, was answered", b.user, b.pos, top.user, top.pos)
		}
	}
}

// roomJoinAll joins the users, one after the other, at g and returns them
// as buyers holding their places.
func roomJoinAll(t *testing.T, c *http.Client, g *gatewayProc, sale string, users []string) []*roomBuyer {
	t.Helper()
	bs := make([]*roomBuyer, len(users))
	for i, u := range users {
		v := joinOnce(t, c, g, sale, u)
		bs[i] = &roomBuyer{i: i, user: u, pos: *v.Position, ticket: v.Ticket}
	}
	return bs
}

// pollTicket polls b's ticket at g.
func pollTicket(t *testing.T, c *http.Client, g *gatewayProc, sale string, b *roomBuyer) (int, roomView, string) {
	t.Helper()
	code, raw, err := roomDo(c, "GET", "http://"+g.public+"/v1/sales/"+sale+"/queue", "", map[string]string{"Flashgate-Ticket": b.ticket})
	if err != nil {
		t.Fatalf("poll of %s at %s: %v", b.user, g.public, err)
	}
	var v roomView
	_ = json.Unmarshal(raw, &v)
	return code, v, string(raw)
}

// roomBuyOnce sends b's buy with its ticket and key at g, again while it
// is answered 503 (a sale held until its check against MySQL), for up to
// a minute.
func roomBuyOnce(t *testing.T, c *http.Client, g *gatewayProc, sale string, b *roomBuyer, key string) (int, roomAnswer, string) {
	t.Helper()
	var (
		code int
		raw  []byte
		err  error
	)
	localstack.WaitFor(t, time.Minute, "an answer other than 503 to "+b.user+"'s buy", func() bool {
		code, raw, err = roomDo(c, "POST", "http://"+g.public+"/v1/sales/"+sale+"/orders", `{"user_id":"`+b.user+`","quantity":1}`,
			map[string]string{"Flashgate-Ticket": b.ticket, "Idempotency-Key": key})
		return err == nil && code != 503
	})
	var a roomAnswer
	_ = json.Unmarshal(raw, &a)
	return code, a, string(raw)
}

// TestRoomRedisRollback: Redis crashes (kill -9) and comes back from a
// copy of its append-only folder taken while 30 of 50 buyers had joined
// (rollbackStack, as TestRedisRollbackAfterBurst): the 20 later joins are
// lost, though their buyers hold tickets and, all 50 admitted, bought.
// A lost join may be lost as a place, never as a unit sold twice:
//
//   - every ticket still polls 200 at its position (the sale's key was in
//     the copy); the 30 kept buyers join again at their places, and the
//     admin view counts 30 joined;
//   - every buyer's key answers its first order; a buy with a new key is
//     409 limit_reached, for a lost joiner too;
//   - newcomers join, are let in and buy; a lost joiner joining again
//     gets a place behind what Redis holds;
//   - MySQL holds every 202 once and nothing else, Redis's sold = MySQL's
//     units, nobody over the limit, no drift.
func TestRoomRedisRollback(t *testing.T) {
	r, s, g := rollbackStack(t)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	const sale, stock, rate = "rbroom", 100, 50
	roomSale(t, g, sale, fmt.Sprintf(`{"stock":%d,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":%d}`, stock, rate))
	kept := roomJoinAll(t, hc, g, sale, userIDs("u", 30))
	cut, _ := r.snapshot(t)
	lost := roomJoinAll(t, hc, g, sale, userIDs("v", 20))
	all := slices.Concat(kept, lost)
	for i, b := range all {
		if b.pos != int64(i+1) {
			t.Fatalf("%s joined %d-th at position %d", b.user, i+1, b.pos)
		}
	}
	localstack.WaitFor(t, 30*time.Second, "every buyer admitted", func() bool {
		_, v, _ := pollTicket(t, hc, g, sale, all[len(all)-1])
		return v.Status == "admitted"
	})
	accepted := map[string]string{} // order id → user
	firsts := map[string]string{}   // user → order id
	for _, b := range all {
		code, a, raw := roomBuyOnce(t, hc, g, sale, b, "k-"+b.user)
		if code != 202 || a.OrderID == "" {
			t.Fatalf("buy of %s (position %d, admitted): %d %s", b.user, b.pos, code, raw)
		}
		firsts[b.user], accepted[a.OrderID] = a.OrderID, b.user
	}
	s.waitDrained(sale, 2*time.Minute)

	rb := s.rollBack(r, cut, sale)
	if rb.meta["joined"] != "30" || rb.sold != 0 {
		t.Fatalf("harness: the copy holds joined %q, sold %d; it was taken after the 30th join, before any buy", rb.meta["joined"], rb.sold)
	}
	for _, b := range all {
		if code, v, raw := pollTicket(t, hc, g, sale, b); code != 200 || v.Position == nil || *v.Position != b.pos {
			t.Fatalf("poll of %s (position %d) after the rollback: %d %s", b.user, b.pos, code, raw)
		}
	}
	for _, b := range kept {
		if v := joinOnce(t, hc, g, sale, b.user); *v.Position != b.pos {
			t.Fatalf("%s joined again after the rollback at position %d, had %d", b.user, *v.Position, b.pos)
		}
	}
	if v := roomAdmin(t, g, sale); v.Joined != int64(len(kept)) {
		t.Fatalf("admin view after the rollback: %+v, want %d joined", v, len(kept))
	}
	// Never a unit twice: the first key answers the first order, a new
	// key finds the buyer's unit (the sale is checked against MySQL
	// before it sells again: 503 meanwhile, sent again).
	for _, b := range all {
		if code, a, raw := roomBuyOnce(t, hc, g, sale, b, "k-"+b.user); code != 202 || a.OrderID != firsts[b.user] {
			t.Fatalf("%s's key after the rollback: %d %s; first order %s", b.user, code, raw, firsts[b.user])
		}
		if code, a, raw := roomBuyOnce(t, hc, g, sale, b, "again-"+b.user); code != 409 || a.Status != "limit_reached" {
			t.Fatalf("%s (position %d, its join lost: %v) bought again after the rollback: %d %s", b.user, b.pos, slices.Contains(lost, b), code, raw)
		}
	}
	// Newcomers take places after what Redis kept; a lost joiner joining
	// again gets a place behind them.
	fresh := roomJoinAll(t, hc, g, sale, userIDs("n", 10))
	for i, b := range fresh {
		if b.pos <= int64(len(kept)) || i > 0 && b.pos <= fresh[i-1].pos {
			t.Fatalf("newcomer %s joined %d-th at position %d, after %d places kept", b.user, i+1, b.pos, len(kept))
		}
	}
	again := joinOnce(t, hc, g, sale, lost[0].user)
	if *again.Position <= fresh[len(fresh)-1].pos {
		t.Fatalf("%s, its join lost, joined again at position %d, not behind the newcomers (last at %d)", lost[0].user, *again.Position, fresh[len(fresh)-1].pos)
	}
	t.Logf("after the rollback: newcomers at positions %d..%d; %s, whose join at %d was lost, joins again at %d",
		fresh[0].pos, fresh[len(fresh)-1].pos, lost[0].user, lost[0].pos, *again.Position)
	localstack.WaitFor(t, 30*time.Second, "the newcomers admitted", func() bool {
		_, v, _ := pollTicket(t, hc, g, sale, fresh[len(fresh)-1])
		return v.Status == "admitted"
	})
	for _, b := range fresh {
		code, a, raw := roomBuyOnce(t, hc, g, sale, b, "k-"+b.user)
		if code != 202 || a.OrderID == "" {
			t.Fatalf("buy of newcomer %s (position %d, admitted): %d %s", b.user, b.pos, code, raw)
		}
		accepted[a.OrderID] = b.user
	}

	s.waitSettled(sale, 2*time.Minute)
	s.checkExactlyOnce(sale, accepted)
	owners, units := mysqlOwners(t, s, sale)
	for id, user := range owners {
		if got, ok := accepted[id]; !ok || got != user {
			t.Fatalf("order %s of %s is in MySQL; the buyers were given it: %v (%q)", id, user, ok, got)
		}
	}
	for user, u := range units {
		if u > 1 {
			t.Fatalf("%s holds %d units in MySQL, limit 1", user, u)
		}
	}
	s.checkLimit(sale, 1, nil)
	if v := roomAdmin(t, g, sale); v.Sold != int64(len(accepted)) || v.Stock != stock {
		t.Fatalf("admin view at the end: %+v, want sold %d", v, len(accepted))
	}
	s.checkNoDrift(sale)
}

// TestRoomRollbackClock: an admin's change of admit_per_second, answered
// 200, is lost with Redis's last second (kill -9, the copy taken before
// it). Gateway A, which made the change, holds the lost clock (rate 1000);
// Redis, the admin view and gateway B, started after the crash, hold the
// copy's (rate 1). Both gateways must come to answer a ticket alike: the
// waiting room admits "at admit_per_second for the whole sale (all
// gateways together)", in position order.
//
// It fails today, so it is skipped: gateway A keeps the clock of the
// greater version (rooms.store, sale.Newer) on every re-read, Missed
// included, and the copy's version is older, so A admits at 1,000 a
// second, its buyers' buys are 202 there and 403 not_admitted at B, until
// the next change of the clock (a rate change, or a join finding the room
// empty), which may never come during the sale. Remove the skip with the
// fix.
func TestRoomRollbackClock(t *testing.T) {
	t.Skip("known bug: a gateway keeps a clock that Redis lost (see the test's comment); remove this skip with the fix")
	r, s, ga := rollbackStack(t)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	const sale, n = "rbclock", 100
	roomSale(t, ga, sale, `{"stock":200,"per_user_limit":1,"waiting_room":"fifo","admit_per_second":1}`)
	bs := roomJoinAll(t, hc, ga, sale, userIDs("u", n))
	last := bs[n-1]
	cut, _ := r.snapshot(t)
	if code, raw, err := httpDo(hc, "PUT", "http://"+ga.admin+"/admin/v1/sales/"+sale, `{"admit_per_second":1000}`); err != nil || code != 200 {
		t.Fatalf("rate change: %d %s %v", code, raw, err)
	}
	localstack.WaitFor(t, 10*time.Second, "the last place admitted at 1,000 a second", func() bool {
		_, v, _ := pollTicket(t, hc, ga, sale, last)
		return v.Status == "admitted"
	})
	s.rollBack(r, cut, sale)
	localstack.WaitFor(t, 30*time.Second, "gateway A ready after the crash", func() bool {
		code, _, err := httpDo(hc, "GET", "http://"+ga.public+"/readyz", "")
		return err == nil && code == 200
	})
	gb := s.startGateway(nil)
	v := roomAdmin(t, gb, sale)
	t.Logf("after the crash Redis holds %d joined, %d admitted", v.Joined, v.Admitted)
	var a, b string
	defer func() {
		if t.Failed() {
			t.Logf("the last place's last polls:\nA: %s\nB: %s", a, b)
		}
	}()
	localstack.WaitFor(t, 30*time.Second, "gateways A and B answering the last place alike", func() bool {
		_, va, rawA := pollTicket(t, hc, ga, sale, last)
		_, vb, rawB := pollTicket(t, hc, gb, sale, last)
		a, b = rawA, rawB
		return va.Status == vb.Status
	})
}
