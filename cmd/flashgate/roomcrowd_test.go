package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

// A waiting room's crowd (roomCrowd): buyers that each join at one
// gateway, poll at another and buy at a third, as behind a load balancer;
// a request that gets no answer (connection refused, reset, 5xx, 429) goes
// to the next gateway, a buy with the same Idempotency-Key. 32 workers
// share the buyers, each looking after its share in turn, so that every
// buyer holds a place at once, as a crowd does. Intruders
// (roomIntruders) send meanwhile buys that no gateway may accept.

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
		if c.ctx.Err() != nil {
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

// checkRoomOrders checks a room's sale against MySQL: every row is an
// order a buyer was given (accepted: order id → user), nobody holds more
// than the limit of 1, in MySQL and in Redis.
func checkRoomOrders(t *testing.T, s *stack, sale string, accepted map[string]string) {
	t.Helper()
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
}
