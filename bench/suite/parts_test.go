package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every part can be run alone by its name, and an unknown name is refused
// before anything is built.
func TestParts(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range parts {
		if p.name == "" || p.measure == nil || seen[p.name] {
			t.Errorf("part %q: empty, without a measure, or named twice", p.name)
		}
		seen[p.name] = true
		if !strings.Contains(partList(), `"`+p.name+`"`) {
			t.Errorf("-only's help does not name %q", p.name)
		}
	}
	// The names the Makefile, the docs and earlier runs use.
	for _, name := range []string{"auth", "cost", "zeroloss", "buckets", "scale", "trickle", "room", "replicated", "failover"} {
		if !seen[name] {
			t.Errorf("no part %q", name)
		}
	}
	t.Chdir(t.TempDir())
	err := run(context.Background(), options{only: "nope"})
	if err == nil || !strings.Contains(err.Error(), `-only "nope"`) {
		t.Errorf("run -only nope: %v", err)
	}
	if _, statErr := os.Stat(".run"); !os.IsNotExist(statErr) {
		t.Errorf("run -only nope built something: %v", statErr)
	}
}

// The flags' defaults are make bench's.
func TestOptionDefaults(t *testing.T) {
	o, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := options{out: "docs/benchmarks.md", dur: 5 * time.Second, conns: 64, orders: 20000, drainRuns: 3,
		costOrders: 150_000, costRuns: 3, costConsumers: 2, costPlacements: "pinned,unpinned", bucketRuns: 3, bucketConns: 256, bucketStock: 1_000_000,
		zeroLossRuns: 2, scaleSales: 10000, scaleFiller: 1_000_000, scaleIdle: 30 * time.Second,
		trickleSales: 10000, trickleRate: 2000, trickleRuns: 3, roomRuns: 3, roomUsers: 5000,
		replicatedRuns: 3, failoverRuns: 2}
	if o != want {
		t.Errorf("defaults %+v,\nwant %+v", o, want)
	}
	if o, err = parseOptions([]string{"-only", "cost", "-skip-cost", "-cost-runs", "1"}); err != nil || o.only != "cost" || !o.skipCost || o.costRuns != 1 {
		t.Errorf("parsed %+v, %v", o, err)
	}
}

// A row is held to the row it was given as its baseline, whatever the
// names: two rows of one name in two groups stay apart.
func TestRowBaseline(t *testing.T) {
	s := newSuite(options{conns: 1, dur: time.Second})
	first := s.add(row{group: "a", name: "same", value: 100, unit: "req/s"})
	s.add(row{group: "b", name: "same", value: 400, unit: "req/s"})
	s.add(row{group: "a", name: "held", value: 150, unit: "req/s", baseline: first, target: 2})
	s.add(row{group: "a", name: "none", value: 150, unit: "req/s"})
	s.add(row{group: "a", name: "cost", value: 180, unit: "req/s", baseline: first, atMost: 1.5})
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := s.write(out, time.Second); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| a | held | 150 req/s |  |  | 1.50× same | ≥ 2.0× (missed) |",
		"| a | none | 150 req/s |  |  |  |  |",
		"| a | cost | 180 req/s |  |  | 1.80× same | ≤ 1.5× (missed) |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
