package localstack

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSlotRanges(t *testing.T) {
	if got, want := fmt.Sprint(SlotRanges(3)), "[[0 5460] [5461 10922] [10923 16383]]"; got != want {
		t.Errorf("3 primaries: %s, want %s (redis-cli --cluster create's split)", got, want)
	}
	for _, n := range []int{1, 2, 3, 5, 7, 16} {
		r := SlotRanges(n)
		if len(r) != n {
			t.Fatalf("%d primaries: %d ranges", n, len(r))
		}
		next := 0
		for i, s := range r {
			if s[0] != next || s[1] < s[0] {
				t.Fatalf("%d primaries: range %d is %v after slot %d", n, i, s, next-1)
			}
			next = s[1] + 1
		}
		if next != ClusterSlots {
			t.Errorf("%d primaries: the ranges end at %d, want %d", n, next-1, ClusterSlots-1)
		}
	}
}

func TestClusterHealthy(t *testing.T) {
	ok := "cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\ncluster_known_nodes:3\r\ncluster_size:3\r\n"
	for _, tc := range []struct {
		name, info string
		want       bool
	}{
		{"ok", ok, true},
		{"state fail", strings.Replace(ok, "cluster_state:ok", "cluster_state:fail", 1), false},
		{"a node not met yet", strings.Replace(ok, "cluster_known_nodes:3", "cluster_known_nodes:2", 1), false},
		{"slots not all seen", strings.Replace(ok, "cluster_slots_ok:16384", "cluster_slots_ok:10923", 1), false},
		{"no slots line", strings.Replace(ok, "cluster_slots_ok:16384\r\n", "", 1), false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClusterHealthy(tc.info, 3); got != tc.want {
				t.Errorf("ClusterHealthy = %v, want %v", got, tc.want)
			}
		})
	}
}

// A cluster of the test's own: every node serves its range of slots and
// says the cluster is ok; a cluster client reaches keys of every slot,
// which land on every primary; Stop stops every node.
func TestRedisCluster(t *testing.T) {
	needRedisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := StartRedisCluster(ctx, ClusterOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	if len(c.Nodes) != 3 || len(c.Addrs()) != 3 {
		t.Fatalf("%d nodes, addresses %v; want 3 by default", len(c.Nodes), c.Addrs())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	const keys = 300
	for i := range keys {
		if err := cc.Set(ctx, fmt.Sprintf("k%d", i), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	for i, n := range c.Nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr})
		info, err := rdb.ClusterInfo(ctx).Result()
		if err != nil || !ClusterHealthy(info, 3) {
			t.Errorf("node %s: CLUSTER INFO %q, %v", n.Addr, info, err)
		}
		shards, err := rdb.ClusterShards(ctx).Result()
		want := SlotRanges(3)[i]
		if err != nil || !servesRange(shards, n.Addr, want) {
			t.Errorf("node %s: CLUSTER SHARDS %+v, %v; want it to serve %v", n.Addr, shards, err, want)
		}
		size, err := rdb.DBSize(ctx).Result()
		rdb.Close()
		if err != nil || size == 0 {
			t.Errorf("node %s holds %d keys of %d (%v)", n.Addr, size, keys, err)
		}
		total += size
	}
	if total != keys {
		t.Errorf("the nodes hold %d keys, want %d", total, keys)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for _, n := range c.Nodes {
		if n.Running() {
			t.Errorf("node %s running after Stop", n.Addr)
		}
	}
}

// servesRange tells whether CLUSTER SHARDS says addr serves the slots r.
func servesRange(shards []redis.ClusterShard, addr string, r [2]int) bool {
	for _, sh := range shards {
		if len(sh.Slots) != 1 || sh.Slots[0].Start != int64(r[0]) || sh.Slots[0].End != int64(r[1]) {
			continue
		}
		for _, n := range sh.Nodes {
			if n.Role == "master" && strconv.FormatInt(n.Port, 10) == port(addr) {
				return true
			}
		}
	}
	return false
}
