package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench"
)

// The report links the main run's picture, written beside it, only when
// the main run was measured.
func TestWritePicture(t *testing.T) {
	link := "](" + pictureName + ")"
	tests := []struct {
		name    string
		picture *bench.Report
	}{
		{"main run measured", &bench.Report{Sale: "s", Timeline: &bench.Timeline{
			Seconds: []bench.Second{{At: 0, Accepted: 10, P50: time.Millisecond, P99: 2 * time.Millisecond}},
			Outbox:  []bench.Sample{{At: 0, Value: 0}, {At: time.Second, Value: 10}},
		}}},
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
					t.Errorf("no main run, yet a picture: linked %v, written %v", strings.Contains(string(md), link), err == nil)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(md), "!["+"buys") || !strings.Contains(string(md), link) {
				t.Errorf("benchmarks.md does not show %s:\n%s", pictureName, md)
			}
			if err := xml.Unmarshal(svg, new(struct{})); err != nil {
				t.Errorf("%s is not XML: %v", pictureName, err)
			}
		})
	}
}
