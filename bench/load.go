package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

const (
	// ringSize is how many recent requests a duplicate click may repeat.
	ringSize = 1024
	// lateAfter is how far past its scheduled time an open-loop request may
	// leave before it counts as late (timer jitter stays below it).
	lateAfter = time.Millisecond
	// soldOutGrace is how long the load goes on after the 202s added up to
	// the stock without a sold_out answer.
	soldOutGrace = time.Second
)

// spec is one buyer's request: who, and the Idempotency-Key if any.
type spec struct {
	user string
	key  string
}

// load drives the buy requests of one run.
type load struct {
	o        Options
	adm      *admin
	hc       *fasthttp.HostClient
	buyURL   string
	ledger   *ledger
	start    time.Time
	interval float64 // ns between scheduled sends (open loop)
	permA    uint64
	// tokenExp is the exp of the buyer tokens of a run with a JWT secret:
	// past the run's end, so that no token expires while it is used.
	tokenExp int64

	stop     chan struct{}
	halted   atomic.Bool
	stopOnce sync.Once
	full     chan struct{} // closed when the 202s add up to the stock
	fullOnce sync.Once
	tailOnce sync.Once // starts the AfterSoldOut timer
	why      string    // what stopped the load; set once, before stop closes
	haltAt   time.Time // when

	counts     [numOutcomes]atomic.Int64
	codes      [numOutcomes]atomic.Int32 // last HTTP code seen per outcome
	soldOut    atomic.Int64              // ns from start to the sell-out (see soldOutAt), +1; 0: none
	lastAccept atomic.Int64              // ns from start to the latest 202, +1
	fresh      atomic.Uint64             // fresh requests sent (picks the next user)
	keys       atomic.Uint64             // Idempotency-Keys made
	slot       atomic.Uint64             // open loop: next scheduled slot
	late       atomic.Int64
	notSent    atomic.Int64 // errors before the request left (no free connection, dial)
	maxLag     atomic.Int64

	tl *timeline // per-second counts; nil unless Options.Timeline

	ringN atomic.Uint64
	ring  [ringSize]atomic.Pointer[spec]

	errMu    sync.Mutex
	firstErr string
}

func newLoad(o Options, adm *admin) *load {
	u, _ := url.Parse(o.URL) // checked by normalize
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	l := &load{
		o:   o,
		adm: adm,
		hc: &fasthttp.HostClient{
			Addr:                      addr,
			IsTLS:                     u.Scheme == "https",
			MaxConns:                  o.Conns,
			MaxConnWaitTimeout:        o.Timeout,
			MaxIdemponentCallAttempts: 1,
			// A buy that failed on the wire has an unknown outcome; resending
			// it would hide that, so never retry.
			RetryIfErr:               func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
			NoDefaultUserAgentHeader: true,
			MaxResponseBodySize:      64 << 10,
			ReadTimeout:              o.Timeout,
			WriteTimeout:             o.Timeout,
		},
		buyURL: o.URL + "/v1/sales/" + o.Sale + "/orders",
		ledger: newLedger(),
		permA:  coprime(uint64(o.Users)),
		stop:   make(chan struct{}),
		full:   make(chan struct{}),
	}
	if o.Timeline {
		l.tl = &timeline{}
	}
	if o.Rate > 0 {
		l.interval = float64(time.Second) / o.Rate
	}
	if o.JWTSecret != "" {
		l.tokenExp = time.Now().Add(o.MaxDuration + time.Hour).Unix()
	}
	return l
}

// halt stops the load; the first reason wins.
func (l *load) halt(why string) {
	l.stopOnce.Do(func() {
		l.why = why
		l.haltAt = time.Now()
		l.halted.Store(true)
		close(l.stop)
	})
}

// run sends requests until a stop condition, waits for the requests in
// flight, and fills the load part of rep.
func (l *load) run(ctx context.Context, rep *Report) {
	workers := make([]*worker, l.o.Conns)
	hists := make([]*[numOutcomes]*Histogram, len(workers))
	var wg sync.WaitGroup
	l.start = time.Now()
	for i := range workers {
		w := newWorker(l)
		workers[i], hists[i] = w, &w.hist
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run()
			if w.tally != nil {
				w.tally.flush()
			}
		}()
	}
	l.fill(rep, l.await(ctx, wg.Wait), hists)
}

// await waits for a stop condition (ctx, the time limits, a sold_out
// answer or the stock's worth of 202s), then for the workers (wait, which
// returns once every worker has), and returns how long the load ran.
func (l *load) await(ctx context.Context, wait func()) time.Duration {
	limit, by := l.o.MaxDuration, "max-duration"
	if l.o.Duration > 0 && l.o.Duration < limit {
		limit, by = l.o.Duration, "duration"
	}
	var pwg sync.WaitGroup
	if l.o.Progress != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			l.progress()
		}()
	}
	t := time.NewTimer(limit)
	full := l.full
	var grace <-chan time.Time
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			l.halt("interrupt")
			waiting = false
		case <-t.C:
			l.halt(by)
			waiting = false
		case <-l.stop:
			waiting = false
		case <-full:
			full, grace = nil, time.After(soldOutGrace)
		case <-grace:
			l.halt("sold-out")
			waiting = false
		}
	}
	t.Stop()
	wait()
	elapsed := time.Since(l.start)
	pwg.Wait()
	l.hc.CloseIdleConnections()
	return elapsed
}

// fill fills the load part of rep from the workers' histograms, once the
// load has stopped.
func (l *load) fill(rep *Report, elapsed time.Duration, hists []*[numOutcomes]*Histogram) {
	rep.StoppedBy = l.why
	rep.Interrupted = l.why == "interrupt"
	rep.Elapsed = elapsed
	var all Histogram
	for o := range numOutcomes {
		var h Histogram
		for _, wh := range hists {
			h.Merge(wh[o])
		}
		if h.Count() == 0 {
			continue
		}
		all.Merge(&h)
		rep.Outcomes = append(rep.Outcomes, outcomeOf(outcomeNames[o], int(l.codes[o].Load()), &h))
	}
	rep.All = outcomeOf("all", 0, &all)
	rep.Requests = int64(all.Count())
	if s := elapsed.Seconds(); s > 0 {
		rep.Throughput = float64(rep.Requests) / s
	}
	if n := l.soldOut.Load(); n > 0 {
		rep.SoldOutAfter = time.Duration(n - 1)
	}
	if n := l.lastAccept.Load(); n > 0 {
		rep.LastAcceptAfter = time.Duration(n - 1)
	}
	rep.Late, rep.MaxLag = l.late.Load(), time.Duration(l.maxLag.Load())
	if l.interval > 0 {
		// Slots due before the stop that no connection was free to send.
		due := int64(math.Ceil(float64(l.haltAt.Sub(l.start)) / l.interval))
		rep.Unsent = max(due-rep.Requests, 0)
	}
	rep.unanswered = l.counts[oError].Load() - l.notSent.Load()
	rep.FirstError = l.firstErr
	if l.tl != nil {
		rep.Timeline = &Timeline{Seconds: l.tl.seconds(), Truncated: l.tl.truncated}
	}
}

// progress writes a status line once a second until the load stops.
func (l *load) progress() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var prev int64
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		var b strings.Builder
		var total int64
		for o := range numOutcomes {
			total += l.counts[o].Load()
		}
		fmt.Fprintf(&b, "%5.1fs %8d req/s", time.Since(l.start).Seconds(), total-prev)
		prev = total
		for o := range numOutcomes {
			if n := l.counts[o].Load(); n > 0 {
				fmt.Fprintf(&b, "  %s %d", outcomeNames[o], n)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		if l.adm != nil { // a raw load has no sale to read
			if v, err := l.adm.view(ctx, l.o.Sale); err == nil {
				fmt.Fprintf(&b, "  remaining %d", v.Remaining)
			}
		}
		cancel()
		b.WriteByte('\n')
		fmt.Fprint(l.o.Progress, b.String())
	}
}

// next returns the request to send: a duplicate of a recent one with
// probability DupRatio (half of those that had an Idempotency-Key repeat
// it; the others are the same buyer clicking again without one), otherwise
// the next buyer's first click, half of them with a fresh key.
func (l *load) next(rng *rand.Rand) *spec {
	if l.o.DupRatio > 0 && rng.Float64() < l.o.DupRatio {
		if n := l.ringN.Load(); n > 0 {
			back := rng.Uint64N(min(n, ringSize))
			if p := l.ring[(n-1-back)%ringSize].Load(); p != nil {
				if p.key != "" && rng.Uint32()&1 == 0 {
					return p
				}
				return &spec{user: p.user}
			}
		}
	}
	// Users in a fixed pseudo-random order, each once per round.
	i := l.fresh.Add(1) - 1
	n := uint64(l.o.Users)
	s := &spec{user: "u" + strconv.FormatUint(i%n*l.permA%n, 10)}
	if !l.o.NoKeys && rng.Uint32()&1 == 0 {
		s.key = "k" + strconv.FormatUint(l.keys.Add(1), 10)
	}
	j := l.ringN.Add(1) - 1
	l.ring[j%ringSize].Store(s)
	return s
}

func (l *load) noteErr(err error) {
	l.errMu.Lock()
	if l.firstErr == "" {
		l.firstErr = err.Error()
	}
	l.errMu.Unlock()
}

// soldOutAt notes that the sale was seen sold out at t: the first sold_out
// answer (answer true), or the 202 that took the last unit, whichever came
// first. A sold_out answer stops the load at once; 202s for the whole stock
// stop it a grace period later (see run), so that a gateway that oversells
// has the chance to show it, and a sale whose buyers all reached their
// limit (they get limit_reached, never sold_out) still stops. With
// Options.AfterSoldOut either stops it that long after the sell-out.
func (l *load) soldOutAt(t time.Time, answer bool) {
	since := int64(t.Sub(l.start)) + 1
	for m := l.soldOut.Load(); (m == 0 || since < m) && !l.soldOut.CompareAndSwap(m, since); m = l.soldOut.Load() {
	}
	if !l.o.UntilSoldOut {
		return
	}
	if l.o.AfterSoldOut > 0 {
		// The crowd goes on: the halt comes a tail's length after the
		// sell-out, whichever way it was seen first.
		l.tailOnce.Do(func() { time.AfterFunc(l.o.AfterSoldOut, func() { l.halt("sold-out") }) })
		return
	}
	if answer {
		l.halt("sold-out")
	} else {
		l.fullOnce.Do(func() { close(l.full) })
	}
}

// coprime returns a multiplier coprime with n, near n/φ, so that i·a mod n
// visits every user once per n fresh requests, in a scattered order.
func coprime(n uint64) uint64 {
	if n <= 2 {
		return 1
	}
	a := uint64(float64(n)*0.6180339887) | 1
	for gcd(a, n) != 1 {
		a++
	}
	return a
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
