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
// (accepted, refused, failed), p50 and p99 latency per second, and, when
// they were read, the outbox backlog and the sale's rows in MySQL. The
// same report always draws the same bytes. It returns ErrNoTimeline, or
// the first error of w.
func (r *Report) WriteSVG(w io.Writer) error {
	if r.Timeline == nil {
		return ErrNoTimeline
	}
	return r.chart().WriteSVG(w)
}

func (r *Report) chart() *plot.Chart {
	tl := r.Timeline
	// A second's point stands at its middle: the answers of [1 s, 2 s)
	// are drawn at 1.5 s.
	var acc, ref, fail, p50, p99 []plot.Point
	var failed bool
	for _, s := range tl.Seconds {
		x := float64(s.At) + 0.5
		acc = append(acc, plot.Point{X: x, Y: float64(s.Accepted)})
		ref = append(ref, plot.Point{X: x, Y: float64(s.Refused)})
		fail = append(fail, plot.Point{X: x, Y: float64(s.Failed)})
		failed = failed || s.Failed > 0
		if s.Accepted+s.Refused+s.Failed > 0 {
			p50 = append(p50, plot.Point{X: x, Y: ms(s.P50)})
			p99 = append(p99, plot.Point{X: x, Y: ms(s.P99)})
		}
	}
	buys := plot.Panel{Title: "buys per second", Series: []plot.Series{
		{Name: "accepted (202)", Points: acc},
		{Name: "refused (other answers)", Points: ref},
	}}
	if failed {
		buys.Series = append(buys.Series, plot.Series{Name: "failed (no answer)", Points: fail})
	}
	c := &plot.Chart{Title: r.title(), XLabel: "seconds since the load started", Panels: []plot.Panel{
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
	return c
}

func (r *Report) title() string {
	mode := "closed loop"
	if r.Rate > 0 {
		mode = "open loop at " + strconv.FormatFloat(r.Rate, 'f', 0, 64) + " req/s"
	}
	t := fmt.Sprintf("sale %s: stock %d, %d connections, %s; %d requests in %s",
		r.Sale, r.Stock, r.Conns, mode, r.Requests, round(r.Elapsed))
	if r.StoppedBy != "" {
		t += ", stopped by " + r.StoppedBy
	}
	if r.Timeline.Truncated {
		t += " (first hour only)"
	}
	return t
}

func samples(ss []Sample) []plot.Point {
	ps := make([]plot.Point, len(ss))
	for i, s := range ss {
		ps[i] = plot.Point{X: s.At.Seconds(), Y: float64(s.Value)}
	}
	return ps
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
