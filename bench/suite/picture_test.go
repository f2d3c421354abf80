package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench"
)

// wholeSale is a picture's sale as the cost part takes it: 1000 units
// sold in the first two seconds, sold_out answers for two more, the
// outbox drained and every row in MySQL by the fourth.
func wholeSale() *bench.Report {
	return &bench.Report{Sale: "s", Stock: 1000, Users: 2000, Conns: 64, StoppedBy: "sold-out", Elapsed: 4 * time.Second,
		SoldOutAfter: 1800 * time.Millisecond, MySQLAfter: 3500 * time.Millisecond,
		Timeline: &bench.Timeline{
			Seconds: []bench.Second{
				{At: 0, Accepted: 600, P50: time.Millisecond, P99: 2 * time.Millisecond},
				{At: 1, Accepted: 400, Refused: 300, SoldOut: 300, P50: time.Millisecond, P99: 2 * time.Millisecond},
				{At: 2, Refused: 5000, SoldOut: 5000, P50: 300 * time.Microsecond, P99: time.Millisecond},
				{At: 3, Refused: 5000, SoldOut: 5000, P50: 300 * time.Microsecond, P99: time.Millisecond},
			},
			Outbox: []bench.Sample{{At: 0, Value: 0}, {At: time.Second, Value: 300}, {At: 2 * time.Second, Value: 200}, {At: 3500 * time.Millisecond, Value: 0}},
			Rows:   []bench.Sample{{At: 0, Value: 0}, {At: time.Second, Value: 300}, {At: 2 * time.Second, Value: 800}, {At: 3500 * time.Millisecond, Value: 1000}},
		}}
}

// The report links the cost sale's picture, written beside it, only when
// the sale was measured.
func TestWritePicture(t *testing.T) {
	link := "](" + pictureName + ")"
	tests := []struct {
		name    string
		picture *bench.Report
	}{
		{"cost sale measured", wholeSale()},
		{"not measured", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "docs")
			out := filepath.Join(dir, "benchmarks.md")
			s := &suite{picture: tt.picture, o: options{conns: 1, dur: time.Second}}
			if err := s.write(out, time.Second); err != nil {
				t.Fatal(err)
			}
			md, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			svg, err := os.ReadFile(filepath.Join(dir, pictureName))
			if tt.picture == nil {
				if strings.Contains(string(md), link) || err == nil {
					t.Errorf("no cost sale, yet a picture: linked %v, written %v", strings.Contains(string(md), link), err == nil)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(md), "## The cost sale over time") || !strings.Contains(string(md), link) {
				t.Errorf("benchmarks.md does not show %s:\n%s", pictureName, md)
			}
			if err := xml.Unmarshal(svg, new(struct{})); err != nil {
				t.Errorf("%s is not XML: %v", pictureName, err)
			}
			for _, want := range []string{"sold out (410)", "accepted (202)", "outbox backlog", "orders in MySQL", "sold out at 1.8s", "every order in MySQL at 3.5s"} {
				if !strings.Contains(string(svg), want) {
					t.Errorf("%s does not show %q", pictureName, want)
				}
			}
		})
	}
}

// The picture tells a whole sale, or the report says what it lacks.
func TestPictureGaps(t *testing.T) {
	tests := []struct {
		name   string
		change func(*bench.Report)
		want   string // a gap's start; "" for none
	}{
		{"whole sale", func(*bench.Report) {}, ""},
		{"no timeline", func(r *bench.Report) { r.Timeline = nil }, "no timeline"},
		{"never sold out", func(r *bench.Report) { r.SoldOutAfter = 0 }, "the load never saw"},
		{"stopped at the sell-out", func(r *bench.Report) { r.Timeline.Seconds = r.Timeline.Seconds[:1] }, "the timeline counts 600"},
		{"no crowd after it", func(r *bench.Report) {
			r.Timeline.Seconds = r.Timeline.Seconds[:2]
			r.SoldOutAfter = 2 * time.Second
		}, "no sold_out answer"},
		{"outbox left", func(r *bench.Report) { r.Timeline.Outbox[3].Value = 5 }, "the outbox"},
		{"rows short", func(r *bench.Report) { r.Timeline.Rows[3].Value = 999 }, "the rows in MySQL were not"},
		{"rows went back", func(r *bench.Report) { r.Timeline.Rows[2].Value = 200 }, "the rows in MySQL went back"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := wholeSale()
			tt.change(r)
			gaps := pictureGaps(r)
			if tt.want == "" {
				if len(gaps) > 0 {
					t.Errorf("gaps %q, want none", gaps)
				}
				return
			}
			if !slices.ContainsFunc(gaps, func(g string) bool { return strings.HasPrefix(g, tt.want) }) {
				t.Errorf("gaps %q, want one starting %q", gaps, tt.want)
			}
		})
	}
}
