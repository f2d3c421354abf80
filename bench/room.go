package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	adminapi "github.com/flashgate/flashgate/admin"
)

// A run with a waiting room (Options.WaitingRoom): every buyer joins the
// sale's queue once, polls it at the pace the gateway's poll_after_ms
// asks, and buys once its view says admitted, with its ticket. The
// workers are the run's Conns, each one request in flight; a buyer between
// two requests is an entry of roomSched, never a goroutine. What each
// buyer saw (its join's send and answer times, its place, when it was
// first seen admitted, its buy's outcome) is kept for the fairness checks
// of roomfigures.go.

const (
	// maxRoomUsers bounds the buyers of a run with a waiting room: the run
	// keeps a record of each.
	maxRoomUsers = 2_000_000
	// lateShare: one buyer in lateShare of a random room's joins only
	// lateDelay after the start, to check that those queue behind the
	// pre-queue.
	lateShare = 10
	lateDelay = 250 * time.Millisecond
	// pollDefault is the pause before the next poll when a view names
	// none; retryDefault after a 429 or 503 without Retry-After.
	pollDefault  = time.Second
	retryDefault = time.Second
	// maxTries bounds the requests of one step of one buyer that got no
	// answer, a 429 or a 503.
	maxTries = 5
	// TicketHeader carries a buyer's ticket on a poll and on a buy.
	TicketHeader = "Flashgate-Ticket"
)

// Steps of a buyer.
const (
	stepJoin = iota
	stepPoll
	stepBuy
	stepDone
)

// roomBuyer is what the run knows of one buyer. Only the worker serving
// the buyer's turn touches it; the scheduler's channel and lock order the
// turns. Times are ns since the load's start; 0: not yet.
type roomBuyer struct {
	ticket       string
	joinSent     int64 // the first join request's
	joinAnswered int64 // the answer that gave a place
	position     int64 // 0: none given yet
	lastWaiting  int64 // send time of the latest poll answered waiting
	admittedAt   int64 // answer time of the first view saying admitted
	passUntil    int64
	step         uint8
	tries        uint8
	moved        bool // the position changed once given
	outcome      int8 // of the buy; -1: none
	keyed        int8 // the buy carries an Idempotency-Key: 1 yes, -1 no, 0 not yet decided
}

// roomLoad is the load of a run with a waiting room.
type roomLoad struct {
	*load
	sched   *roomSched
	buyers  []roomBuyer
	joinURL string
	startAt int64 // the sale's starts_at, ns since the load's start; ≤ 0: open at once
	left    atomic.Int64

	joins, joinFails, polls, pollFails, pollRefused atomic.Int64
	admitted, notAdmittedInPass, notAdmittedLate    atomic.Int64
	firstJoin, lastJoin, crowdJoined                atomic.Int64
	noRoom                                          atomic.Bool // a join answered 409 conflict
}

func newRoomLoad(l *load) *roomLoad {
	r := &roomLoad{load: l, buyers: make([]roomBuyer, l.o.Users),
		joinURL: l.o.URL + "/v1/sales/" + l.o.Sale + "/queue"}
	for i := range r.buyers {
		r.buyers[i].outcome = -1
	}
	r.left.Store(int64(len(r.buyers)))
	return r
}

func (r *roomLoad) since() int64 { return int64(time.Since(r.start)) }

func roomUser(i int32) string { return "u" + strconv.Itoa(int(i)) }

// run drives the buyers until a stop condition and fills the load part of
// rep (the buys' outcomes); startsAt is the sale's start, zero for an
// open window.
func (r *roomLoad) run(ctx context.Context, rep *Report, startsAt time.Time) []*roomWorker {
	r.start = time.Now()
	users, late, lateAt := len(r.buyers), len(r.buyers), int64(0)
	if !startsAt.IsZero() {
		r.startAt = int64(startsAt.Sub(r.start))
		if r.o.WaitingRoom == adminapi.RoomRandom && users >= 2 {
			late = users - max(users/lateShare, 1)
			lateAt = r.startAt + int64(lateDelay)
		}
	}
	r.sched = newRoomSched(r.start, users, late, lateAt)
	workers := make([]*roomWorker, r.o.Conns)
	hists := make([]*[numOutcomes]*Histogram, len(workers))
	var wg sync.WaitGroup
	for i := range workers {
		w := newRoomWorker(r)
		workers[i], hists[i] = w, &w.hist
		wg.Go(func() {
			w.run()
			if w.tally != nil {
				w.tally.flush()
			}
		})
	}
	wg.Go(func() { r.sched.run(r.stop) })
	r.fill(rep, r.await(ctx, wg.Wait), hists)
	return workers
}

// done ends a buyer's part; the last one stops the load.
func (r *roomLoad) done(b *roomBuyer) {
	b.step = stepDone
	if r.left.Add(-1) == 0 {
		r.halt("every buyer done")
	}
}

// roomWorker serves buyers' turns, one request at a time: its buys go
// through the embedded worker (outcomes, ledger, timeline as any run's),
// its joins and polls through requests of its own.
type roomWorker struct {
	*worker
	r                  *roomLoad
	join, poll         *fasthttp.Request
	qresp              *fasthttp.Response
	joinHist, pollHist Histogram
}

func newRoomWorker(r *roomLoad) *roomWorker {
	w := &roomWorker{worker: newWorker(r.load), r: r, join: &fasthttp.Request{}, poll: &fasthttp.Request{}, qresp: &fasthttp.Response{}}
	w.join.Header.SetMethod(fasthttp.MethodPost)
	w.join.SetRequestURI(r.joinURL)
	w.join.Header.SetContentType("application/json")
	w.poll.Header.SetMethod(fasthttp.MethodGet)
	w.poll.SetRequestURI(r.joinURL)
	return w
}

func (w *roomWorker) run() {
	for {
		select {
		case i := <-w.r.sched.ready:
			if w.l.halted.Load() {
				return
			}
			w.turn(i)
		case <-w.l.stop:
			return
		}
	}
}

// turn serves buyer i's next step.
func (w *roomWorker) turn(i int32) {
	b := &w.r.buyers[i]
	switch b.step {
	case stepJoin:
		w.queue(i, b, w.join, &w.joinHist)
	case stepPoll:
		w.queue(i, b, w.poll, &w.pollHist)
	case stepBuy:
		w.buy(i, b)
	}
}

// queue sends buyer i's join (req is w.join) or poll (w.poll) and acts on
// the answer.
func (w *roomWorker) queue(i int32, b *roomBuyer, req *fasthttp.Request, hist *Histogram) {
	r, user := w.r, roomUser(i)
	isJoin := req == w.join
	if isJoin {
		w.body = append(append(append(w.body[:0], `{"user_id":"`...), user...), `"}`...)
		req.SetBodyRaw(w.body)
	} else {
		req.Header.Set(TicketHeader, b.ticket)
	}
	if w.sig != nil {
		req.Header.SetBytesV(fasthttp.HeaderAuthorization, w.sig.token(user))
	}
	sent := r.since()
	if isJoin {
		r.joins.Add(1)
		if b.joinSent == 0 {
			b.joinSent = sent
		}
		for f := r.firstJoin.Load(); f == 0 && !r.firstJoin.CompareAndSwap(0, sent); f = r.firstJoin.Load() {
		}
	} else {
		r.polls.Add(1)
	}
	err := r.hc.DoTimeout(req, w.qresp, r.o.Timeout)
	ans := r.since()
	hist.Record(time.Duration(ans - sent))
	fail := func() {
		if isJoin {
			r.joinFails.Add(1)
		} else {
			r.pollFails.Add(1)
		}
	}
	if err != nil {
		r.noteErr(err)
		fail()
		w.retry(i, b, ans, retryDefault)
		return
	}
	body := w.qresp.Body()
	switch status := string(jsonString(body, statusKey)); status {
	case "waiting", "admitted":
		v, ok := parseView(body, r.start)
		if !ok {
			r.noteErr(errView(body))
			fail()
			r.done(b)
			return
		}
		b.tries = 0
		if isJoin {
			b.joinAnswered = ans
			// The crowd's rate: the late joiners of a random room, held
			// back until after the start, are not part of it.
			if int(i) < r.sched.late {
				for m := r.lastJoin.Load(); ans > m && !r.lastJoin.CompareAndSwap(m, ans); m = r.lastJoin.Load() {
				}
				r.crowdJoined.Add(1)
			}
		}
		if len(v.ticket) > 0 && string(v.ticket) != b.ticket {
			b.ticket = string(v.ticket)
		}
		if v.position > 0 {
			if b.position != 0 && b.position != v.position {
				b.moved = true
			}
			b.position = v.position
		}
		if status == "admitted" {
			if b.admittedAt == 0 {
				b.admittedAt = ans
				r.admitted.Add(1)
			}
			b.passUntil = v.passUntil
			b.step = stepBuy
			r.sched.at(i, ans)
			return
		}
		if v.position > 0 {
			// Seen waiting at a place; a random room's pre-queue before
			// its start has none, and is behind nobody yet.
			b.lastWaiting = sent
		}
		b.step = stepPoll
		r.sched.at(i, ans+int64(v.pollAfter))
	case "sold_out":
		r.soldOutAt(time.Now(), true)
		r.done(b)
	case "ended":
		r.halt("ended")
	case "conflict":
		// A sale without a waiting room: nothing of this run can work.
		r.noRoom.Store(true)
		r.noteErr(errView(body))
		r.halt("no waiting room")
	case "rate_limited", "unavailable":
		fail()
		w.retry(i, b, ans, retryAfterOf(w.qresp))
	case "not_admitted":
		// A poll's ticket refused: the ticket the gateway itself gave.
		r.pollRefused.Add(1)
		r.noteErr(errView(body))
		r.done(b)
	default:
		fail()
		r.noteErr(errView(body))
		r.done(b)
	}
}

// retry asks for buyer i's step again after wait, up to maxTries.
func (w *roomWorker) retry(i int32, b *roomBuyer, now int64, wait time.Duration) {
	b.tries++
	if b.tries >= maxTries {
		w.r.done(b)
		return
	}
	w.r.sched.at(i, now+int64(wait))
}

// buy sends buyer i's buy with its ticket; half the buyers send an
// Idempotency-Key (none with NoKeys), as a run without a room does, the
// same one again when a 429 or 503 has the buy sent again. A buy that got
// no answer is not sent again: its outcome is unknown, as in any run.
func (w *roomWorker) buy(i int32, b *roomBuyer) {
	r := w.r
	s := &spec{user: roomUser(i)}
	if b.keyed == 0 {
		b.keyed = -1
		if !r.o.NoKeys && w.rng.Uint32()&1 == 0 {
			b.keyed = 1
		}
	}
	if b.keyed > 0 {
		s.key = "k" + s.user
	}
	w.req.Header.Set(TicketHeader, b.ticket)
	o := w.send(s, time.Time{})
	ans := r.since()
	b.outcome = int8(o)
	switch o {
	case oRateLimited, oUnavailable:
		if ans < b.passUntil {
			w.retry(i, b, ans, retryDefault/5)
			return
		}
	case oNotAdmitted:
		// The answer came within the pass the gateway announced: its
		// check must have seen the pass valid.
		if ans < b.passUntil {
			r.notAdmittedInPass.Add(1)
		} else {
			r.notAdmittedLate.Add(1)
		}
	}
	r.done(b)
}

// retryAfterOf is the wait a 429's Retry-After asks for, else retryDefault.
func retryAfterOf(resp *fasthttp.Response) time.Duration {
	if n, err := strconv.Atoi(string(resp.Header.Peek(fasthttp.HeaderRetryAfter))); err == nil && n > 0 && n < 60 {
		return time.Duration(n) * time.Second
	}
	return retryDefault
}
