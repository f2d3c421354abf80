// Package plot draws line charts as SVG: stacked panels over one shared x
// axis, each with its own y axis, ticks, polylines and legend. It knows
// nothing of what it draws; bench turns a run into a Chart.
//
// The output is deterministic (the same Chart writes the same bytes), is
// well-formed XML with every text escaped, and copes with empty and
// one-point series. It has no dependencies beyond the standard library.
package plot

import (
	"bufio"
	"encoding/xml"
	"io"
	"math"
	"strconv"
)

// svg writes SVG elements to a buffered writer and keeps its first error,
// so that a chart is drawn without an error check per element.
type svg struct {
	w   *bufio.Writer
	err error
}

func (s *svg) raw(text string) {
	if s.err == nil {
		_, s.err = s.w.WriteString(text)
	}
}

// text writes t escaped for element content and attribute values.
func (s *svg) text(t string) {
	if s.err == nil {
		s.err = xml.EscapeText(s.w, []byte(t))
	}
}

// num writes v with one decimal at most: coordinates need no more, and a
// fixed precision keeps the output the same on every platform.
func (s *svg) num(v float64) {
	s.raw(coord(v))
}

func coord(v float64) string {
	v = math.Round(v*10) / 10
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// label writes a <text> element at (x, y); anchor is start, middle or end.
func (s *svg) label(x, y float64, anchor, class, t string) {
	s.raw(`<text x="`)
	s.num(x)
	s.raw(`" y="`)
	s.num(y)
	s.raw(`" text-anchor="` + anchor + `"`)
	if class != "" {
		s.raw(` class="` + class + `"`)
	}
	s.raw(`>`)
	s.text(t)
	s.raw("</text>\n")
}

// line writes a <line> from (x1, y1) to (x2, y2).
func (s *svg) line(x1, y1, x2, y2 float64, class string) {
	s.raw(`<line x1="`)
	s.num(x1)
	s.raw(`" y1="`)
	s.num(y1)
	s.raw(`" x2="`)
	s.num(x2)
	s.raw(`" y2="`)
	s.num(y2)
	s.raw(`" class="` + class + "\"/>\n")
}

func (s *svg) flush() error {
	if s.err == nil {
		s.err = s.w.Flush()
	}
	return s.err
}

func newSVG(w io.Writer) *svg { return &svg{w: bufio.NewWriter(w)} }
