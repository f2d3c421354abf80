package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// worker owns one connection's worth of requests: one in flight at a time.
type worker struct {
	l     *load
	rng   *rand.Rand
	hist  [numOutcomes]*Histogram
	req   *fasthttp.Request
	resp  *fasthttp.Response
	body  []byte
	timer *time.Timer
	tally *tally // nil unless Options.Timeline

	sig *signer // with a JWT secret: the worker's buyer tokens
}

func newWorker(l *load) *worker {
	w := &worker{l: l, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		req: &fasthttp.Request{}, resp: &fasthttp.Response{}}
	w.req.Header.SetMethod(fasthttp.MethodPost)
	w.req.SetRequestURI(l.buyURL)
	w.req.Header.SetContentType("application/json")
	if l.o.JWTSecret != "" {
		w.sig = newSigner(l.o.JWTSecret, l.tokenExp)
	}
	if l.tl != nil {
		w.tally = &tally{t: l.tl}
	}
	return w
}

// authorize sets the request's Authorization to a buyer token for user
// (signer.token).
func (w *worker) authorize(user string) {
	w.req.Header.SetBytesV(fasthttp.HeaderAuthorization, w.sig.token(user))
}

func (w *worker) run() {
	l := w.l
	if l.interval > 0 {
		w.timer = time.NewTimer(time.Hour)
		w.timer.Stop()
		defer w.timer.Stop()
	}
	for !l.halted.Load() {
		var t0 time.Time
		if l.interval > 0 {
			i := l.slot.Add(1) - 1
			due := l.start.Add(time.Duration(float64(i) * l.interval))
			if d := time.Until(due); d > 0 {
				w.timer.Reset(d)
				select {
				case <-w.timer.C:
				case <-l.stop:
					return
				}
			}
			if l.halted.Load() {
				return
			}
			if lag := time.Since(due); lag > lateAfter {
				l.late.Add(1)
				for m := l.maxLag.Load(); int64(lag) > m && !l.maxLag.CompareAndSwap(m, int64(lag)); m = l.maxLag.Load() {
				}
			}
			t0 = due
		}
		w.send(l.next(w.rng), t0)
	}
}

// send sends one buy and records and returns its outcome; t0 is the
// scheduled time in the open loop, zero in the closed loop (then latency
// starts now).
func (w *worker) send(s *spec, t0 time.Time) int {
	l := w.l
	w.body = append(w.body[:0], `{"user_id":"`...)
	w.body = append(w.body, s.user...)
	w.body = append(w.body, `","quantity":1}`...)
	w.req.SetBodyRaw(w.body)
	if w.sig != nil {
		w.authorize(s.user)
	}
	if s.key != "" {
		w.req.Header.Set("Idempotency-Key", s.key)
	} else {
		w.req.Header.Del("Idempotency-Key")
	}
	if t0.IsZero() {
		t0 = time.Now()
	}
	err := l.hc.DoTimeout(w.req, w.resp, l.o.Timeout)
	now := time.Now()
	o := oError
	var body []byte
	if err != nil {
		l.noteErr(err)
		if neverSent(err) {
			l.notSent.Add(1)
		}
	} else {
		body = w.resp.Body()
		o = classify(body)
		l.codes[o].Store(int32(w.resp.StatusCode()))
	}
	if o == oAccepted {
		id := jsonString(body, orderIDKey)
		if len(id) == 0 {
			o = oOther
			l.noteErr(fmt.Errorf("202 without order_id: %q", body))
		} else {
			units := l.ledger.accept(string(id), s.user, 1, s.key)
			since := int64(now.Sub(l.start)) + 1
			for m := l.lastAccept.Load(); since > m && !l.lastAccept.CompareAndSwap(m, since); m = l.lastAccept.Load() {
			}
			if units >= l.o.Stock {
				l.soldOutAt(now, false)
			}
		}
	}
	if o == oSoldOut {
		l.soldOutAt(now, true)
	}
	l.counts[o].Add(1)
	h := w.hist[o]
	if h == nil {
		h = &Histogram{}
		w.hist[o] = h
	}
	h.Record(now.Sub(t0))
	if w.tally != nil {
		w.tally.record(now.Sub(l.start), o, now.Sub(t0))
	}
	return o
}

// neverSent reports whether err happened before the request could reach the
// gateway, so that its outcome is known: nothing was reserved.
func neverSent(err error) bool {
	if errors.Is(err, fasthttp.ErrNoFreeConns) || errors.Is(err, fasthttp.ErrDialTimeout) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
