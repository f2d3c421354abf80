package bench

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/flashgate/flashgate/bench/plot"
)

// ErrNoTimeline is returned by WriteSVG for a report of a run made
// without Options.Timeline.
var ErrNoTimeline = errors.New("bench: no timeline in the report (Options.Timeline, --svg)")

// WriteSVG draws the run over time as one SVG document: buys per second
// (all answers, accepted, sold out, other refusals, failed), p50 and p99
// latency per second, and, when they were read, the outbox backlog and
// the sale's rows in MySQL, with the moments the sale sold out and every
// order was in MySQL marked across them. The same report always draws the
// same bytes. It returns ErrNoTimeline, or the first error of w.
func (r *Report) WriteSVG(w io.Writer) error {
	if r.Timeline == nil {
		return ErrNoTimeline
	}
	return r.chart().WriteSVG(w)
}

func (r *Report) chart() *plot.Chart {
	tl := r.Timeline
	var all, acc, so, ref, fail, p50, p99 []plot.Point
	var soldOut, refused, failed bool
	// Each second's rate is drawn as a step over its stretch, not a point
	// in its middle: a line from one middle to the next would show the
	// first sold_out answers before the sell-out.
	for _, rt := range perSecond(tl.Seconds, r.Elapsed) {
		from, to := rt.x-rt.w/2, rt.x+rt.w/2
		step := func(ps []plot.Point, y float64) []plot.Point {
			return append(ps, plot.Point{X: from, Y: y}, plot.Point{X: to, Y: y})
		}
		all = step(all, rt.accepted+rt.refused+rt.failed)
		acc = step(acc, rt.accepted)
		so = step(so, rt.soldOut)
		ref = step(ref, rt.refused-rt.soldOut)
		fail = step(fail, rt.failed)
		soldOut, refused, failed = soldOut || rt.soldOut > 0, refused || rt.refused > rt.soldOut, failed || rt.failed > 0
	}
	end := r.Elapsed.Seconds()
	for _, s := range tl.Seconds {
		if s.Accepted+s.Refused+s.Failed == 0 {
			continue
		}
		x := float64(s.At) + 0.5
		if r.Elapsed > 0 && end > float64(s.At) && end < float64(s.At+1) {
			x = (float64(s.At) + end) / 2
		}
		p50 = append(p50, plot.Point{X: x, Y: ms(s.P50)})
		p99 = append(p99, plot.Point{X: x, Y: ms(s.P99)})
	}
	buys := plot.Panel{Title: "buys per second", Series: []plot.Series{
		{Name: "all answers", Points: all},
		{Name: "accepted (202)", Points: acc},
	}}
	if soldOut {
		buys.Series = append(buys.Series, plot.Series{Name: "sold out (410)", Points: so})
	}
	if refused || !soldOut {
		buys.Series = append(buys.Series, plot.Series{Name: "refused (other answers)", Points: ref})
	}
	if failed {
		buys.Series = append(buys.Series, plot.Series{Name: "failed (no answer)", Points: fail})
	}
	c := &plot.Chart{Title: "sale " + r.Sale, Subtitle: r.subtitle(), XLabel: "seconds since the load started", Panels: []plot.Panel{
		buys,
		{Title: "latency per second (ms)", Series: []plot.Series{{Name: "p50", Points: p50}, {Name: "p99", Points: p99}}},
	}}
	if len(tl.Outbox) > 0 {
		c.Panels = append(c.Panels, plot.Panel{Title: "outbox backlog (orders not yet published)",
			Series: []plot.Series{{Name: "outbox pending", Points: samples(tl.Outbox)}}})
	}
	if len(tl.Rows) > 0 {
		c.Panels = append(c.Panels, plot.Panel{Title: "orders in MySQL (rows of the sale)",
			Series: []plot.Series{{Name: "rows", Points: samples(tl.Rows)}}})
	}
	if r.SoldOutAfter > 0 {
		c.Markers = append(c.Markers, plot.Marker{X: r.SoldOutAfter.Seconds(), Label: "sold out at " + round(r.SoldOutAfter)})
	}
	if at := r.allRowsAt(); at > 0 {
		c.Markers = append(c.Markers, plot.Marker{X: at.Seconds(), Label: "every order in MySQL at " + round(at)})
	}
	return c
}

// allRowsAt is when every order was in MySQL: the first reading of the
// rows that saw them all, when it came before the run's own wait saw them
// (MySQLAfter, which begins once the load has stopped); 0 when they never
// were.
func (r *Report) allRowsAt() time.Duration {
	if r.MySQLAfter <= 0 {
		return 0
	}
	rows := r.Timeline.Rows
	if n := len(rows); n > 0 {
		for _, s := range rows {
			if s.Value == rows[n-1].Value && s.At < r.MySQLAfter {
				return s.At
			}
		}
	}
	return r.MySQLAfter
}

func (r *Report) subtitle() string {
	mode := "closed loop"
	if r.Rate > 0 {
		mode = "open loop at " + strconv.FormatFloat(r.Rate, 'f', 0, 64) + " req/s"
	}
	t := fmt.Sprintf("stock %d, %d connections, %s; %d requests in %s",
		r.Stock, r.Conns, mode, r.Requests, round(r.Elapsed))
	if r.StoppedBy != "" {
		t += ", stopped by " + r.StoppedBy
	}
	if r.Timeline.Truncated {
		t += " (first hour only)"
	}
	return t
}

// rate is the answers of a stretch of the load, per second, drawn at x,
// the stretch's middle, over w seconds; soldOut is of refused.
type rate struct{ x, accepted, refused, soldOut, failed, w float64 }

// perSecond turns the seconds into rates: the answers of [1 s, 2 s) are
// drawn at 1.5 s. The load's last second is a part of one, from its start
// to elapsed (0: unknown, taken as whole): its counts become a rate over
// that part, and a part under a quarter of a second (the answers still in
// flight when the load stopped) joins the second before it, so that a few
// answers neither draw a cliff nor, divided by a sliver, a spike.
func perSecond(secs []Second, elapsed time.Duration) []rate {
	end := elapsed.Seconds()
	var out []rate
	for i, s := range secs {
		from, to := float64(s.At), float64(s.At+1)
		a, rf, so, f := float64(s.Accepted), float64(s.Refused), float64(s.SoldOut), float64(s.Failed)
		if elapsed > 0 && end > from && end < to {
			to = end
			if end-from < 0.25 && i > 0 && secs[i-1].At == s.At-1 {
				p := secs[i-1]
				from = float64(p.At)
				a, rf, so, f = a+float64(p.Accepted), rf+float64(p.Refused), so+float64(p.SoldOut), f+float64(p.Failed)
				out = out[:len(out)-1]
			}
		}
		w := to - from
		out = append(out, rate{x: (from + to) / 2, accepted: a / w, refused: rf / w, soldOut: so / w, failed: f / w, w: w})
	}
	return out
}

func samples(ss []Sample) []plot.Point {
	ps := make([]plot.Point, len(ss))
	for i, s := range ss {
		ps[i] = plot.Point{X: s.At.Seconds(), Y: float64(s.Value)}
	}
	return ps
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
