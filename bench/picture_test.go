package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/sale.svg from the synthetic run")

// syntheticRun is a sale of 1000 units over 5 seconds: buys rise, sell
// out in the third second, sold-out answers take over (a few other
// refusals among them); the outbox fills and drains, the rows catch up.
func syntheticRun() *Report {
	return &Report{Sale: `bench-<&"x">`, Stock: 1000, Conns: 64, Requests: 9000, Elapsed: 4500 * time.Millisecond, StoppedBy: "sold-out",
		SoldOutAfter: 2100 * time.Millisecond, MySQLAfter: 4 * time.Second,
		Timeline: &Timeline{
			Seconds: []Second{
				{At: 0, Accepted: 300, Refused: 20, P50: 800 * time.Microsecond, P99: 3 * time.Millisecond},
				{At: 1, Accepted: 500, Refused: 40, Failed: 2, P50: 900 * time.Microsecond, P99: 4 * time.Millisecond},
				{At: 2, Accepted: 200, Refused: 2500, SoldOut: 2450, P50: 400 * time.Microsecond, P99: 2 * time.Millisecond},
				{At: 3, Refused: 3000, SoldOut: 3000, P50: 300 * time.Microsecond, P99: 1500 * time.Microsecond},
				{At: 4, Refused: 2438, SoldOut: 2438, P50: 300 * time.Microsecond, P99: 1200 * time.Microsecond},
			},
			Outbox: []Sample{{0, 0}, {time.Second, 250}, {2 * time.Second, 400}, {3 * time.Second, 90}, {4 * time.Second, 0}},
			Rows:   []Sample{{0, 0}, {time.Second, 50}, {2 * time.Second, 400}, {3 * time.Second, 910}, {4 * time.Second, 1000}},
		}}
}

func svgOf(t *testing.T, r *Report) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
	return b.Bytes()
}

// The picture of a synthetic run is the committed one, byte for byte
// (go test ./bench/ -run TestSaleSVGGolden -update rewrites it).
func TestSaleSVGGolden(t *testing.T) {
	got := svgOf(t, syntheticRun())
	path := filepath.Join("testdata", "sale.svg")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the SVG of the synthetic run differs from %s (-update rewrites it)", path)
	}
	if again := svgOf(t, syntheticRun()); !bytes.Equal(got, again) {
		t.Error("two drawings of the same run differ")
	}
}

func TestSaleSVGEdges(t *testing.T) {
	tests := []struct {
		name string
		tl   *Timeline
	}{
		{"empty", &Timeline{}},
		{"one second", &Timeline{Seconds: []Second{{At: 0, Accepted: 3, P50: time.Millisecond, P99: time.Millisecond}}}},
		{"one sample each", &Timeline{Outbox: []Sample{{At: time.Second, Value: 4}}, Rows: []Sample{{At: 0, Value: 0}}}},
		{"silent seconds", &Timeline{Seconds: []Second{{At: 0}, {At: 1}}, Truncated: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svgOf(t, &Report{Sale: "s", Timeline: tt.tl})
		})
	}
	if err := (&Report{}).WriteSVG(io.Discard); !errors.Is(err, ErrNoTimeline) {
		t.Errorf("without a timeline: %v, want ErrNoTimeline", err)
	}
}

// Workers' seconds merge into one series: counts add up by second, gaps
// are zeros, and the latency quantiles come within a bucket's width.
func TestTimelineMerge(t *testing.T) {
	tl := &timeline{}
	a, b := &tally{t: tl}, &tally{t: tl}
	for range 99 {
		a.record(100*time.Millisecond, oAccepted, time.Millisecond)
	}
	a.record(900*time.Millisecond, oSoldOut, 100*time.Millisecond)
	b.record(500*time.Millisecond, oSoldOut, time.Millisecond)
	b.record(2500*time.Millisecond, oError, 5*time.Second)
	a.flush()
	b.flush()
	b.flush() // nothing left: no effect
	got := tl.seconds()
	if len(got) != 3 {
		t.Fatalf("%d seconds, want 3: %+v", len(got), got)
	}
	type counts struct{ acc, ref, soldOut, fail int64 }
	want := []counts{{99, 2, 2, 0}, {0, 0, 0, 0}, {0, 0, 0, 1}}
	for i, w := range want {
		if c := (counts{got[i].Accepted, got[i].Refused, got[i].SoldOut, got[i].Failed}); c != w || got[i].At != i {
			t.Errorf("second %d: %+v, want at %d %+v", i, got[i], i, w)
		}
	}
	near := func(name string, d, want time.Duration) {
		if d < want-want/16 || d > want+want/16 {
			t.Errorf("%s %v, want %v ± 1/16", name, d, want)
		}
	}
	near("p50 of second 0", got[0].P50, time.Millisecond)
	near("p99 of second 0", got[0].P99, time.Millisecond)
	near("p99 of second 2", got[2].P99, 5*time.Second)
}

// Past maxSeconds nothing more is kept, and the timeline says so.
func TestTimelineBounded(t *testing.T) {
	tl := &timeline{}
	w := &tally{t: tl}
	w.record(maxSeconds*time.Second+time.Millisecond, oAccepted, time.Millisecond)
	w.flush()
	if len(tl.seconds()) != 0 || !tl.truncated {
		t.Errorf("a second past the bound: %d seconds kept, truncated %v", len(tl.seconds()), tl.truncated)
	}
}

// Whole seconds are their counts; the last, partial one a rate over its
// part, or folded into the second before it when it is a sliver.
func TestPerSecond(t *testing.T) {
	secs := func(n ...int64) []Second {
		var ss []Second
		for i, a := range n {
			ss = append(ss, Second{At: i, Accepted: a, Refused: 2 * a, SoldOut: a})
		}
		return ss
	}
	tests := []struct {
		name    string
		secs    []Second
		elapsed time.Duration
		want    []rate
	}{
		{"whole seconds", secs(10, 20), 2 * time.Second, []rate{{0.5, 10, 20, 10, 0, 1}, {1.5, 20, 40, 20, 0, 1}}},
		{"elapsed unknown", secs(10, 20), 0, []rate{{0.5, 10, 20, 10, 0, 1}, {1.5, 20, 40, 20, 0, 1}}},
		{"half a second", secs(10, 20), 1500 * time.Millisecond, []rate{{0.5, 10, 20, 10, 0, 1}, {1.25, 40, 80, 40, 0, 0.5}}},
		{"sliver", secs(10, 2), 1100 * time.Millisecond, []rate{{0.55, 12 / 1.1, 24 / 1.1, 12 / 1.1, 0, 1.1}}},
		{"sliver alone", secs(2), 100 * time.Millisecond, []rate{{0.05, 20, 40, 20, 0, 0.1}}},
		{"empty", nil, time.Second, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := perSecond(tt.secs, tt.elapsed)
			if len(got) != len(tt.want) {
				t.Fatalf("%+v, want %+v", got, tt.want)
			}
			for i, w := range tt.want {
				g := got[i]
				if math.Abs(g.x-w.x) > 1e-9 || math.Abs(g.accepted-w.accepted) > 1e-9 || math.Abs(g.refused-w.refused) > 1e-9 ||
					math.Abs(g.soldOut-w.soldOut) > 1e-9 || g.failed != w.failed || math.Abs(g.w-w.w) > 1e-9 {
					t.Errorf("[%d] %+v, want %+v", i, g, w)
				}
			}
		})
	}
}
