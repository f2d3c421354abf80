package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

// wellFormed fails t unless doc parses as XML to its end.
func wellFormed(t *testing.T, doc []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
	}
}

func TestChartWellFormed(t *testing.T) {
	hostile := `<b>&"quoted"'</b> ]]> <!--`
	tests := []struct {
		name  string
		chart Chart
	}{
		{"no panels", Chart{Title: "empty"}},
		{"empty panel", Chart{Title: "t", Panels: []Panel{{Title: "nothing"}}}},
		{"empty series", Chart{Panels: []Panel{{Title: "p", Series: []Series{{Name: "a"}}}}}},
		{"one point", Chart{Panels: []Panel{{Title: "p", Series: []Series{{Name: "a", Points: []Point{{X: 3, Y: 7}}}}}}}},
		{"flat", Chart{Panels: []Panel{{Title: "p", Series: []Series{{Name: "a", Points: []Point{{X: 0, Y: 5}, {X: 1, Y: 5}}}}}}}},
		{"all zero", Chart{Panels: []Panel{{Title: "p", Series: []Series{{Name: "a", Points: []Point{{X: 0, Y: 0}, {X: 0, Y: 0}}}}}}}},
		{"escaped text", Chart{Title: hostile, XLabel: hostile, Panels: []Panel{{Title: hostile, Series: []Series{{Name: hostile, Points: []Point{{X: 0, Y: 1}, {X: 1, Y: 2}}}}}}}},
		{"not finite", Chart{Panels: []Panel{{Title: "p", Series: []Series{{Name: "a", Points: []Point{{X: 0, Y: math.Inf(1)}, {X: 1, Y: math.NaN()}}}}}}}},
		{"large and negative", Chart{Panels: []Panel{{Title: "p", Series: []Series{{Name: "a", Points: []Point{{X: -2, Y: -3e6}, {X: 60, Y: 1.2e9}}}}}}}},
		{"many series", Chart{Panels: []Panel{{Title: "p", Series: make([]Series, 9)}}}},
		{"markers", Chart{Markers: []Marker{{X: 2, Label: hostile}, {X: math.NaN(), Label: "nan"}, {X: 2.1, Label: "next"}},
			Panels: []Panel{{Title: "p", Series: []Series{{Name: "a", Points: []Point{{X: 0, Y: 1}, {X: 1, Y: 2}}}}}, {Title: "q"}}}},
		{"marker alone", Chart{Markers: []Marker{{X: 5, Label: "m"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a, b bytes.Buffer
			if err := tt.chart.WriteSVG(&a); err != nil {
				t.Fatal(err)
			}
			wellFormed(t, a.Bytes())
			if err := tt.chart.WriteSVG(&b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Error("two writes of the same chart differ")
			}
			if strings.Contains(a.String(), "NaN") || strings.Contains(a.String(), "Inf") {
				t.Errorf("a coordinate is not a number:\n%s", a.String())
			}
		})
	}
}

// Text reaches the reader as written: escaped in the file, whole once parsed.
func TestChartTextEscaped(t *testing.T) {
	title := `a < b & "c" > 'd'`
	var buf bytes.Buffer
	c := Chart{Title: title, Panels: []Panel{{Title: "p", Series: []Series{{Name: "s&p", Points: []Point{{X: 0, Y: 1}}}}}}}
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Texts []string `xml:"text"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{title: false, "s&p": false}
	for _, s := range doc.Texts {
		if _, ok := want[s]; ok {
			want[s] = true
		}
	}
	for s, seen := range want {
		if !seen {
			t.Errorf("text %q not in the parsed SVG (texts: %q)", s, doc.Texts)
		}
	}
}

func TestAxisTicks(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float64
		want   []string
	}{
		{"seconds", 0, 9.3, []string{"0", "2", "4", "6", "8", "10"}},
		{"thousands", 0, 52000, []string{"0", "10k", "20k", "30k", "40k", "50k", "60k"}},
		{"millions", 0, 3.4e6, []string{"0", "1M", "2M", "3M", "4M"}},
		{"fractions", 0, 0.37, []string{"0", "0.1", "0.2", "0.3", "0.4"}},
		{"degenerate", 0, 0, []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAxis(tt.lo, tt.hi, 0, 100)
			var got []string
			for _, v := range a.ticks() {
				got = append(got, a.format(v))
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("ticks %q, want %q", got, tt.want)
			}
		})
	}
}

// A marker widens the x axis to its moment, is drawn across every panel
// and named once.
func TestChartMarkers(t *testing.T) {
	c := Chart{Markers: []Marker{{X: 12, Label: "sold out"}}, Panels: []Panel{
		{Title: "a", Series: []Series{{Name: "s", Points: []Point{{X: 0, Y: 1}, {X: 5, Y: 2}}}}},
		{Title: "b"},
	}}
	if lo, hi := c.xRange(); lo != 0 || hi != 12 {
		t.Errorf("x range %v–%v, want 0–12", lo, hi)
	}
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), `class="mark"`); n != 2 {
		t.Errorf("%d marker lines, want one per panel (2)", n)
	}
	if n := strings.Count(buf.String(), ">sold out<"); n != 1 {
		t.Errorf("the marker is named %d times, want once", n)
	}
}
