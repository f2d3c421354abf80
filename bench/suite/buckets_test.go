package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestBucketFigures(t *testing.T) {
	const hot, moderate = 256, 64
	runAt := func(conns, k int, rate float64, primary ...float64) bucketRun {
		return bucketRun{k: k, conns: conns, rate: rate, primary: primary, calls: []float64{0.01, 0.01, 0.02}, gateway: rate / 1000}
	}
	run := func(k int, rate float64, primary ...float64) bucketRun { return runAt(hot, k, rate, primary...) }
	// The other load's runs, far from the targets: they must change
	// neither the hot sale's figures nor its verdicts, and get none.
	others := []bucketRun{runAt(moderate, 1, 100, 10, 0, 0), runAt(moderate, 3, 90, 9, 9, 9)}
	for _, tc := range []struct {
		name                            string
		runs                            []bucketRun
		busiest, all                    float64 // medians of K = 3
		ratioBusiest, ratioAll          float64
		busiestOK, allOK                bool
		wantBusiestVerdict, wantAllLine string
	}{
		{
			name: "both met",
			// K = 1: one primary does it all, a different one each run.
			runs: []bucketRun{
				run(1, 100, 21, 0, 0), run(3, 90, 7, 8, 7),
				run(3, 80, 7, 7, 9), run(1, 110, 0.1, 22, 0),
				run(1, 90, 0, 0, 18), run(3, 70, 6, 8, 6),
			},
			busiest: 8, all: 22, ratioBusiest: 8.0 / 21, ratioAll: 22.0 / 21,
			busiestOK: true, allOK: true,
		},
		{
			name: "both missed",
			runs: []bucketRun{
				run(1, 100, 20, 0, 0), run(3, 90, 11, 10, 11),
				run(1, 100, 0, 20, 0), run(3, 90, 10, 12, 10),
			},
			busiest: 11.5, all: 32, ratioBusiest: 11.5 / 20, ratioAll: 32.0 / 20,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := append(append([]bucketRun(nil), tc.runs...), others...)
			one, many := figuresOf(runs, bucketsOne, hot), figuresOf(runs, bucketsMany, hot)
			if many.busiest != tc.busiest || many.all != tc.all {
				t.Errorf("K=3 busiest %v, all %v; want %v, %v", many.busiest, many.all, tc.busiest, tc.all)
			}
			busiest, all, _, busiestOK, allOK := bucketRatios(one, many)
			near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
			if !near(busiest, tc.ratioBusiest) || !near(all, tc.ratioAll) || busiestOK != tc.busiestOK || allOK != tc.allOK {
				t.Errorf("ratios %v (%v), %v (%v); want %v (%v), %v (%v)", busiest, busiestOK, all, allOK,
					tc.ratioBusiest, tc.busiestOK, tc.ratioAll, tc.allOK)
			}
			floors := []floorRun{
				// turns ÷ one, busiest and all: 0.42× and 1.20×, 0.40× and
				// 1.15×, 0.37× and 1.02×; the medians 0.40× and 1.15×.
				{one: []float64{10, 0.1, 0.1}, turns: []float64{4, 4.2, 4}},
				{one: []float64{0, 0, 8}, turns: []float64{3, 3, 3.2}},
				{one: []float64{0.2, 12, 0.2}, turns: []float64{4.4, 4, 4.2}},
			}
			sec := bucketsSection(runs, floors, nil, []string{"a", "b", "c"}, 1000, []int{hot, moderate}, time.Second, time.Minute)
			for _, line := range []string{
				fmt.Sprintf("| busiest primary, Redis CPU per order | hot sale, 256 connections | %.2f× | ≤ 0.40× | %s |", tc.ratioBusiest, passMiss(tc.busiestOK)),
				fmt.Sprintf("| all primaries, Redis CPU per order | hot sale, 256 connections | %.2f× | ≤ 1.25× | %s |", tc.ratioAll, passMiss(tc.allOK)),
				"| busiest primary, Redis CPU per order | 64 connections | 0.90× | ≤ 0.40× | (reported) |",
				"| all primaries, Redis CPU per order | 64 connections | 2.70× | ≤ 1.25× | (reported) |",
				"| busiest primary, Redis CPU per order | floor: no buckets, the same script calls in turn on 3 primaries ÷ all on one | 0.40× | | (this machine) |",
				"| all primaries, Redis CPU per order | floor: no buckets, the same script calls in turn on 3 primaries ÷ all on one | 1.15× | | (this machine) |",
			} {
				if !strings.Contains(sec, line) {
					t.Errorf("the section has no line %q:\n%s", line, sec)
				}
			}
		})
	}
	if b, a := floorRatios(nil); b != 0 || a != 0 {
		t.Errorf("no floor runs: ratios %v, %v", b, a)
	}
	if f := figuresOf(nil, bucketsOne, hot); f.runs != 0 || f.busiest != 0 {
		t.Errorf("no runs: %+v", f)
	}
	if _, _, _, bOK, aOK := bucketRatios(bucketFigures{}, bucketFigures{busiest: 1, all: 1}); bOK || aOK {
		t.Error("a K = 1 of nothing met a target")
	}
}

// TestLocalCluster starts the suite's own cluster on a real redis-server:
// keys of every slot land on all three primaries, empty removes them all,
// and close stops the processes and removes their data.
func TestLocalCluster(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (make up installs it)")
	}
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(".run/bench", 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &suite{}
	defer s.stopAll()
	cl, err := s.startCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			cl.close()
		}
	}()
	if len(cl.nodes) != clusterPrimaries {
		t.Fatalf("%d nodes", len(cl.nodes))
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.addrs()})
	defer cc.Close()
	const keys = 300
	for i := range keys {
		if err := cc.Set(ctx, fmt.Sprintf("k%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	for _, n := range cl.nodes {
		size, err := cl.client(n.Addr).DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if size == 0 {
			t.Errorf("node %s holds no key of %d", n.Addr, keys)
		}
		total += size
	}
	if total != keys {
		t.Errorf("the nodes hold %d keys, want %d", total, keys)
	}
	if cpu, err := cl.cpu(0); err != nil || len(cpu) != clusterPrimaries {
		t.Errorf("cpu: %v, %v", cpu, err)
	}
	if err := cl.empty(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.nodes {
		if size, err := cl.client(n.Addr).DBSize(ctx).Result(); err != nil || size != 0 {
			t.Errorf("node %s after empty: %d keys, %v", n.Addr, size, err)
		}
	}
	cl.close()
	closed = true
	for _, n := range cl.nodes {
		if n.Running() {
			t.Errorf("node %s still running after close", n.Addr)
		}
	}
	if _, err := os.Stat(cl.dir); !os.IsNotExist(err) {
		t.Errorf("%s after close: %v", cl.dir, err)
	}
}
