package plot

import (
	"io"
	"math"
)

// Point is one value of a series at x.
type Point struct{ X, Y float64 }

// finite reports whether the point can be drawn: a NaN or an infinity
// is left out of the line, as if it had not been given.
func (p Point) finite() bool {
	return !math.IsNaN(p.X) && !math.IsInf(p.X, 0) && !math.IsNaN(p.Y) && !math.IsInf(p.Y, 0)
}

// Series is one line of a panel, drawn in the order of its points.
type Series struct {
	Name   string
	Points []Point
}

// Panel is one plot of the chart: its own y axis, the chart's x axis.
type Panel struct {
	Title  string
	Series []Series
}

// Marker is a moment on the x axis: a dashed line across every panel,
// named in the first.
type Marker struct {
	X     float64
	Label string
}

// Chart is a column of panels that share the x axis (XLabel under the
// last one).
type Chart struct {
	Title    string
	Subtitle string // a second, smaller line under the title
	XLabel   string
	Panels   []Panel
	Markers  []Marker
}

// Layout, in pixels.
const (
	width       = 960
	panelHeight = 190
	titleHeight = 52
	panelGap    = 44 // above each panel: its title
	marginLeft  = 70
	marginRight = 190 // the legend
	bottom      = 48  // x tick labels and the x label
	legendLine  = 18
)

// palette colours the series of a panel in order, then again.
var palette = []string{"#1b7837", "#c51b7d", "#2166ac", "#e08214", "#542788", "#4d4d4d"}

// WriteSVG writes the chart as one SVG document. It returns the first
// error of w. It is safe for concurrent use on distinct writers: it reads
// the chart, never changes it.
func (c *Chart) WriteSVG(w io.Writer) error {
	s := newSVG(w)
	height := titleHeight + len(c.Panels)*(panelGap+panelHeight) + bottom
	if len(c.Panels) == 0 {
		height = titleHeight + panelGap + bottom
	}
	s.raw(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	s.raw(`<svg xmlns="http://www.w3.org/2000/svg" width="`)
	s.num(width)
	s.raw(`" height="`)
	s.num(float64(height))
	s.raw(`" viewBox="0 0 `)
	s.num(width)
	s.raw(` `)
	s.num(float64(height))
	s.raw("\" font-family=\"sans-serif\" font-size=\"12\">\n")
	s.raw("<style>.grid{stroke:#ddd;stroke-width:1}.axis{stroke:#333;stroke-width:1}" +
		".title{font-size:16px;font-weight:bold}.ptitle{font-size:13px;font-weight:bold}.muted{fill:#777}" +
		".mark{stroke:#b2182b;stroke-width:1;stroke-dasharray:4 3}.mlabel{fill:#b2182b}" +
		"polyline{fill:none;stroke-width:1.5;stroke-linejoin:round}</style>\n")
	s.raw(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	s.label(marginLeft, 24, "start", "title", c.Title)
	s.label(marginLeft, 42, "start", "muted", c.Subtitle)

	lo, hi := c.xRange()
	x := newAxis(lo, hi, marginLeft, width-marginRight)
	top := float64(titleHeight)
	for i := range c.Panels {
		top += panelGap
		c.Panels[i].draw(s, x, top)
		c.drawMarkers(s, x, top, i == 0)
		top += panelHeight
	}
	// x tick labels and the x label, under the last panel.
	for _, t := range x.ticks() {
		s.label(x.pos(t), top+16, "middle", "", x.format(t))
	}
	s.label((x.from+x.to)/2, top+36, "middle", "", c.XLabel)
	s.raw("</svg>\n")
	return s.flush()
}

// xRange is the smallest and largest x of every point of every panel
// and of every marker; 0, 0 when there is none.
func (c *Chart) xRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, p := range c.Panels {
		for _, sr := range p.Series {
			for _, pt := range sr.Points {
				if pt.finite() {
					lo, hi = min(lo, pt.X), max(hi, pt.X)
				}
			}
		}
	}
	for _, m := range c.Markers {
		if (Point{X: m.X}).finite() {
			lo, hi = min(lo, m.X), max(hi, m.X)
		}
	}
	if lo > hi {
		return 0, 0
	}
	return lo, hi
}

// draw draws the panel below top: frame, grid, ticks, lines, legend.
func (p *Panel) draw(s *svg, x axis, top float64) {
	bot := top + panelHeight
	s.label(x.from, top-10, "start", "ptitle", p.Title)
	ylo, yhi, has := 0.0, 0.0, false // every panel's y axis starts at 0 or below
	for _, sr := range p.Series {
		for _, pt := range sr.Points {
			if pt.finite() {
				ylo, yhi, has = min(ylo, pt.Y), max(yhi, pt.Y), true
			}
		}
	}
	y := newAxis(ylo, yhi, bot, top)
	for _, t := range y.ticks() {
		py := y.pos(t)
		s.line(x.from, py, x.to, py, "grid")
		s.label(x.from-6, py+4, "end", "", y.format(t))
	}
	for _, t := range x.ticks() {
		px := x.pos(t)
		s.line(px, top, px, bot, "grid")
	}
	s.line(x.from, bot, x.to, bot, "axis")
	s.line(x.from, top, x.from, bot, "axis")
	if !has {
		s.label((x.from+x.to)/2, (top+bot)/2, "middle", "muted", "no data")
	}
	for i, sr := range p.Series {
		colour := palette[i%len(palette)]
		pts := make([]Point, 0, len(sr.Points))
		for _, pt := range sr.Points {
			if pt.finite() {
				pts = append(pts, pt)
			}
		}
		switch len(pts) {
		case 0:
		case 1:
			// A polyline of one point draws nothing: a dot does.
			s.raw(`<circle cx="`)
			s.num(x.pos(pts[0].X))
			s.raw(`" cy="`)
			s.num(y.pos(pts[0].Y))
			s.raw(`" r="2.5" fill="` + colour + "\"/>\n")
		default:
			s.raw(`<polyline stroke="` + colour + `" points="`)
			for j, pt := range pts {
				if j > 0 {
					s.raw(" ")
				}
				s.num(x.pos(pt.X))
				s.raw(",")
				s.num(y.pos(pt.Y))
			}
			s.raw("\"/>\n")
		}
		// Legend, right of the panel.
		ly := top + 12 + float64(i)*legendLine
		s.raw(`<rect x="`)
		s.num(x.to + 14)
		s.raw(`" y="`)
		s.num(ly - 6)
		s.raw(`" width="20" height="3" fill="` + colour + "\"/>\n")
		s.label(x.to+40, ly, "start", "", sr.Name)
	}
}

// drawMarkers draws the markers across the panel below top, and their
// labels when named (the first panel), one under the other so that two
// close moments stay readable: right of the line in the left half of the
// plot, left of it in the right half, never over the legend.
func (c *Chart) drawMarkers(s *svg, x axis, top float64, named bool) {
	for i, m := range c.Markers {
		if !(Point{X: m.X}).finite() {
			continue
		}
		px := x.pos(m.X)
		s.line(px, top, px, top+panelHeight, "mark")
		if !named {
			continue
		}
		ly := top + 12 + float64(i)*legendLine
		if px > (x.from+x.to)/2 {
			s.label(px-4, ly, "end", "mlabel", m.Label)
		} else {
			s.label(px+4, ly, "start", "mlabel", m.Label)
		}
	}
}
