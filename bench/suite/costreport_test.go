package main

import (
	"strings"
	"testing"
	"time"
)

// fakeRun is a cost run whose figures are all given: servers all, the
// bare handler at the sale's rate atRate.
func fakeRun(p placement, all, atRate float64) *costRun {
	return &costRun{place: p, servers: all, bareAtRate: atRate, bare: atRate / 2, bareClient: 1, rate: 1000,
		perOrder: map[string]float64{procGateway: atRate, procRedis: 2, procConsumer: atRate / 5, procRabbit: 1, procMariaDB: 1, procClient: 1},
		shared:   &sharedBase{lean: 1, mariadb: 1, broker: 1, brokerPub: 2000}}
}

// hasLines fails t for each of lines that text lacks.
func hasLines(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, l) {
			t.Errorf("the section lacks %q:\n%s", l, text)
		}
	}
}

// Each placement has its table: medians with their min–max, ratios taken
// in each run, and the targets with how many runs kept them.
func TestCostSection(t *testing.T) {
	runs := []*costRun{
		fakeRun(pinnedPlace, 30, 10), fakeRun(unpinnedPlace, 70, 10),
		fakeRun(unpinnedPlace, 90, 10), fakeRun(pinnedPlace, 40, 10),
		fakeRun(pinnedPlace, 36, 9), fakeRun(unpinnedPlace, 80, 10),
	}
	md := costSection(runs, costSetup{orders: 100, consumers: 2, conns: 64, bareDur: 3 * time.Second, took: time.Minute})
	hasLines(t, md,
		"### Pinned, 3 run(s)",
		"### Unpinned, 3 run(s)",
		// pinned: 30/10, 36/9, 40/10 → 3, 4, 4 at the sale's rate; 6, 8, 8 closed loop.
		"| **all servers** | 36.0 (30.0–40.0) | bare fasthttp handler at the sale's request rate, per request | 10.0 (9.0–10.0) | 4.00× (3.00×–4.00×) | ≤ 3.5× | no (1 of 3 runs) |",
		"| **all servers** | 36.0 (30.0–40.0) | bare fasthttp handler, closed loop, per request | 5.0 (4.5–5.0) | 8.00× (6.00×–8.00×) | ≤ 5× | no (0 of 3 runs) |",
		// unpinned: 70/5, 80/5, 90/5 closed loop.
		"| **all servers** | 80.0 (70.0–90.0) | bare fasthttp handler, closed loop, per request | 5.0 | 16.00× (14.00×–18.00×) | ≤ 8× | no (0 of 3 runs) |",
		"| Redis | 2.0 | lean reserve script, 16 per call, per reservation | 1.0 | 2.00× | ≤ 2× | yes (3 of 3 runs) |",
		"| consumer (2) | 2.0 (1.8–2.0) | bare fasthttp handler at the sale's request rate, per request | 10.0 (9.0–10.0) | 0.20× | ≤ 0.3× | yes (3 of 3 runs) |",
		"pinned 30.0, 3.00×, 1000; unpinned 70.0, 7.00×, 1000",
	)
	if strings.Count(md, "≤ 3.5×") != 1 {
		t.Errorf("the 3.5× target is pinned only:\n%s", md)
	}
}

// The paired section gives after ÷ before within each pair, and says a
// change is beyond the noise only when every pair agrees.
func TestCostPairSection(t *testing.T) {
	pair := func(before, after float64) costPair {
		return costPair{place: unpinnedPlace, before: fakeRun(unpinnedPlace, before, 10), after: fakeRun(unpinnedPlace, after, 10)}
	}
	setup := costPairSetup{before: "/old", after: "/new", costSetup: costSetup{orders: 100, consumers: 1, conns: 64}}
	md := costPairSection([]costPair{pair(100, 80), pair(120, 90), pair(90, 81), pair(100, 99), pair(100, 90)}, setup)
	hasLines(t, md,
		"before is `/old`, after is `/new`",
		"### Unpinned, 5 pair(s)",
		"| **all servers** | 100.0 (90.0–120.0) | 90.0 (80.0–99.0) | 0.90× (0.75×–0.99×) | 5 of 5 | gain |",
		"| Redis | 2.0 | 2.0 | 1.00× | 0 of 5 | within the noise |",
		"100.0 → 80.0; 120.0 → 90.0; 90.0 → 81.0; 100.0 → 99.0; 100.0 → 90.0",
	)
	md = costPairSection([]costPair{pair(100, 80), pair(120, 90), pair(90, 81)}, setup)
	hasLines(t, md, "| 0.80× (0.75×–0.90×) | 3 of 3 | too few pairs to tell (3; 5 or more) |")
	md = costPairSection([]costPair{pair(100, 80), pair(120, 130), pair(90, 81), pair(100, 90), pair(100, 90)}, setup)
	hasLines(t, md, "| 4 of 5 | within the noise |")
}

func TestParsePlacements(t *testing.T) {
	tests := []struct {
		list string
		want []placement
		bad  bool
	}{
		{"pinned,unpinned", []placement{pinnedPlace, unpinnedPlace}, false},
		{"unpinned", []placement{unpinnedPlace}, false},
		{" unpinned , pinned", []placement{unpinnedPlace, pinnedPlace}, false},
		{"pinned,pinned", nil, true},
		{"", nil, true},
		{"both", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			got, err := parsePlacements(tt.list)
			if (err != nil) != tt.bad || len(got) != len(tt.want) {
				t.Fatalf("%v, %v; want %v (error %v)", got, err, tt.want, tt.bad)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("[%d] %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// The load moves onto the CPUs asked and back where it was.
func TestPlaceLoad(t *testing.T) {
	if !canPin() {
		t.Skip("no taskset or a single CPU")
	}
	was, err := ownCPUs()
	if err != nil {
		t.Fatal(err)
	}
	back, err := placeLoad("1")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ownCPUs(); got != "1" {
		t.Errorf("placed on %q, want 1", got)
	}
	back()
	if got, _ := ownCPUs(); got != was {
		t.Errorf("back on %q, want %q", got, was)
	}
}
