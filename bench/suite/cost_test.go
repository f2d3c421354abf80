package main

import (
	"os"
	"testing"
	"time"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=50,usec=2000,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=10,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"not a stat line\r\n"
	got := parseCommandStats(info, 100)
	for name, want := range map[string]cmdCost{"EVALSHA": {0.5, 20}, "CONFIG|RESETSTAT": {0.01, 0.1}} {
		if got[name] != want {
			t.Errorf("%s: got %+v, want %+v", name, got[name], want)
		}
	}
	if len(got) != 2 {
		t.Errorf("got %d commands, want 2: %v", len(got), got)
	}
}

// TestProcCPU reads this process's CPU before and after burning some: it
// must not go down, and must count at least part of what was burnt.
func TestProcCPU(t *testing.T) {
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	busy0, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	after, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	busy1, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	if after <= before || busy1 <= busy0 {
		t.Errorf("CPU %v → %v, machine busy %v → %v after %d spins", before, after, busy0, busy1, x)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("pid -1: no error")
	}
}

func TestMedian(t *testing.T) {
	runs := []*costRun{{rate: 3}, {rate: 1}, {rate: 2}, {rate: 10}}
	mid, lo, hi := medianOfRuns(runs, func(r *costRun) float64 { return r.rate })
	if mid != 2.5 || lo != 1 || hi != 10 {
		t.Errorf("median %v (%v–%v), want 2.5 (1–10)", mid, lo, hi)
	}
}
