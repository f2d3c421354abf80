package main

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		ts := make([]time.Time, len(ms))
		for i, m := range ms {
			ts[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return ts
	}
	for _, tc := range []struct {
		name     string
		ts       []time.Time
		from, to int // ms from t0
		want     time.Duration
	}{
		{"even", at(0, 10, 20, 30, 40), 5, 40, 10 * time.Millisecond},
		{"the gap that straddles from counts", at(0, 10, 90, 100), 50, 100, 80 * time.Millisecond},
		{"a stall up to to counts", at(0, 10, 20), 15, 200, 180 * time.Millisecond},
		{"nothing in the window: from the last one before", at(0, 10), 50, 100, 90 * time.Millisecond},
		{"nothing at all: the whole window", nil, 50, 100, 50 * time.Millisecond},
		{"later ones do not count", at(0, 10, 20, 500), 5, 30, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := t0.Add(time.Duration(tc.from)*time.Millisecond), t0.Add(time.Duration(tc.to)*time.Millisecond)
			if got := longestGap(tc.ts, from, to); got != tc.want {
				t.Errorf("longestGap = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPrimaryOfSlot(t *testing.T) {
	node := func(port int64, role, health string) redis.Node {
		return redis.Node{IP: "127.0.0.1", Port: port, Role: role, Health: health}
	}
	shards := []redis.ClusterShard{
		{Slots: []redis.SlotRange{{Start: 0, End: 5460}}, Nodes: []redis.Node{node(7001, "master", "online"), node(7004, "replica", "online")}},
		// Failed over: the old primary is marked failed, its replica
		// serves the slots.
		{Slots: []redis.SlotRange{{Start: 5461, End: 10922}}, Nodes: []redis.Node{node(7002, "master", "fail"), node(7005, "master", "online")}},
		// Not yet: the dead primary only.
		{Slots: []redis.SlotRange{{Start: 10923, End: 16383}}, Nodes: []redis.Node{node(7003, "master", "fail"), node(7006, "replica", "online")}},
	}
	for slot, want := range map[int64]string{0: "127.0.0.1:7001", 5460: "127.0.0.1:7001", 5461: "127.0.0.1:7005", 12000: "", 16384: ""} {
		if got := primaryOfSlot(shards, slot); got != want {
			t.Errorf("slot %d: %q, want %q", slot, got, want)
		}
	}
}

// TestFailoverSection: each round, the medians and the contract's verdict.
func TestFailoverSection(t *testing.T) {
	r := func(promotion, first202 time.Duration) foRound {
		return foRound{victim: "127.0.0.1:1", promoted: "127.0.0.1:2", victims: 2, others: 4, firstSeen: promotion - 40*time.Millisecond,
			promotion: promotion, first202: first202, gapAll: 15 * time.Millisecond, gapSale: 18 * time.Millisecond,
			baseAll: 12 * time.Millisecond, baseSale: 14 * time.Millisecond, other: map[string]int64{"0 ": 3}}
	}
	s := failoverSection([]foRound{r(3700*time.Millisecond, 5800*time.Millisecond), r(3500*time.Millisecond, 14*time.Second)}, time.Minute)
	for _, want := range []string{
		"| 1 | 3.7s | 2.1s | 5.8s | yes | 15ms / 18ms | 12ms / 14ms |",
		"| 2 | 3.5s | 10.5s | 14s | no |",
		"| median | 3.6s | 6.3s | 9.9s | no |",
		"not held in every round",
		"(other answers: 3 no answer)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
}
