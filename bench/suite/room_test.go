package main

import (
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench"
)

func TestMedianFig(t *testing.T) {
	for _, tc := range []struct {
		in   []roomFig
		want float64
	}{
		{nil, 0},
		{[]roomFig{{v: 5}}, 5},
		{[]roomFig{{v: 9}, {v: 1}, {v: 4}}, 4},
		{[]roomFig{{v: 9}, {v: 1}, {v: 4}, {v: 6}}, 4},
	} {
		if got := medianFig(tc.in).v; got != tc.want {
			t.Errorf("%v: median %v, want %v", tc.in, got, tc.want)
		}
	}
	// The latencies are the median round's own.
	if m := medianFig([]roomFig{{3, 30, 300}, {1, 10, 100}, {2, 20, 200}}); m.p50 != 20 || m.p99 != 200 {
		t.Errorf("median round %+v, want the one of 2", m)
	}
}

// TestRoomSection: the ratios and verdicts of the section come from the
// medians, and a failed fairness check is named.
func TestRoomSection(t *testing.T) {
	figs := map[string][]roomFig{
		rowRoomBare: {{v: 100}, {v: 100}, {v: 100}}, rowRoomPolls: {{v: 90}, {v: 10}, {v: 85}},
		rowRoomReserve: {{v: 50}}, rowRoomJoins: {{v: 20}},
		rowRoomSoldAuth: {{v: 80}}, rowRoomPollAuth: {{v: 40}}, rowRoomJoinAuth: {{v: 20}},
	}
	rho, z := 0.01, 0.7
	fifo := &bench.Report{Users: 5000, Room: &bench.RoomFigures{Mode: "fifo", AdmitPerSecond: 1000, Joined: 5000, Inversions: 3},
		Checks: []bench.Check{{Name: "fifo: joins that did not overlap placed in join order", Result: bench.Fail}}}
	random := &bench.Report{Users: 5000, Room: &bench.RoomFigures{Mode: "random", Joined: 5000, PreStart: 4500, Spearman: &rho, SpearmanZ: &z}}
	s := roomSection(figs, fifo, random, 3, 64, 5*time.Second)
	for _, want := range []string{
		"| polls ÷ bare handler | 0.85× | ≥ 0.8× (met) |",
		"| joins ÷ reserve path | 0.40× | ≥ 0.5× (missed) |",
		"| polls with authentication ÷ sold-out path with authentication | 0.50× |",
		"3 inversions between joins that did not overlap | 0 (missed) | FAIL: fifo: joins that did not overlap placed in join order |",
		"Spearman ρ 0.0100 (z 0.70) over 4500 pre-start joins",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}
