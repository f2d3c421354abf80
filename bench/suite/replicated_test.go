package main

import (
	"strings"
	"testing"
	"time"
)

func TestReplicaState(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=7004,state=wait_bgsave,offset=0,lag=0\r\n" +
		"slave1:ip=127.0.0.1,port=7005,state=online,offset=1234,lag=0\r\n" +
		"master_repl_offset:1234\r\n"
	for _, tc := range []struct{ addr, state, offset string }{
		{"127.0.0.1:7004", "wait_bgsave", "0"},
		{"127.0.0.1:7005", "online", "1234"},
		{"127.0.0.1:7006", "", ""},
	} {
		if state, offset := replicaState(info, tc.addr); state != tc.state || offset != tc.offset {
			t.Errorf("%s: %q at %q, want %q at %q", tc.addr, state, offset, tc.state, tc.offset)
		}
	}
	if got := infoValue(info, "master_repl_offset"); got != "1234" {
		t.Errorf("master_repl_offset %q", got)
	}
}

// TestReplicatedSection: the medians of each mode, the ratio against its
// target and what a replicated buy adds.
func TestReplicatedSection(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	runs := []replRun{
		{replicas: 0, rate: 40000, perCall: 25, p50: ms(1.4), p99: ms(3.3)},
		{replicas: 1, rate: 34000, perCall: 31, waitsPerCall: 1, p50: ms(1.9), p99: ms(3.8)},
		{replicas: 1, rate: 30000, perCall: 30, waitsPerCall: 1, p50: ms(2.0), p99: ms(4.0), unconfirmed: 2},
		{replicas: 0, rate: 42000, perCall: 26, p50: ms(1.4), p99: ms(3.2)},
	}
	def, on := replFiguresOf(runs, 0), replFiguresOf(runs, 1)
	if def.rate != 41000 || on.rate != 32000 || len(def.runs) != 2 || len(on.runs) != 2 {
		t.Fatalf("medians %+v, %+v", def, on)
	}
	s := replicatedSection(def, on, "ext4", 64, 5*time.Second, time.Minute)
	for _, want := range []string{
		"| min_replicas 0 (default) | 40000, 42000 | 41000 | 1.4ms | 3.25ms | 25.5 | 0.00 |",
		"| min_replicas 1 (replicated) | 34000, 30000 | 32000 | 1.95ms | 3.9ms | 30.5 | 1.00 |",
		"| replicated ÷ default, orders/s | 0.78× | ≥ 0.8× (missed) |",
		"| p50 a replicated buy adds | +550µs (1.4ms → 1.95ms) |",
		"| p99 a replicated buy adds | +650µs (3.25ms → 3.9ms) |",
		"2 round(s)",
		"redis.timeout): 2 in all",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}
