package localstack

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/scripts"
)

// DeleteKeys removes every key of a prefix, wherever the keys live: on a
// Redis Cluster (FLASHGATE_REDIS_ADDRS with several addresses) keys of 64
// hash tags spread over every primary, and a SCAN of one node or one UNLINK
// of all of them (CROSSSLOT) would leave some behind. Keys of another
// prefix stay.
func TestDeleteKeysEveryPrimary(t *testing.T) {
	rdb := Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix, other := "t"+RandomHex(6), "t"+RandomHex(6)
	t.Cleanup(func() { DropKeys(t, rdb, other) })
	var keys []string
	for i := range 64 {
		keys = append(keys, fmt.Sprintf("%s:{s%d}:meta", prefix, i), fmt.Sprintf("%s:{s%d}:users", prefix, i))
	}
	keys = append(keys, prefix+":sales", prefix+":events")
	pipe := rdb.Pipeline()
	for _, k := range keys {
		pipe.Set(ctx, k, "1", time.Hour)
	}
	pipe.Set(ctx, other+":{s0}:meta", "1", time.Hour)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}

	held := keysByNode(t, ctx, rdb, prefix)
	if Cluster() {
		if len(held) < 2 {
			t.Fatalf("the keys are on %d primaries: the test does not span the cluster (%v)", len(held), held)
		}
		t.Logf("keys per primary before: %v", held)
	}
	if err := DeleteKeys(ctx, rdb, prefix); err != nil {
		t.Fatalf("DeleteKeys: %v", err)
	}
	if left := keysByNode(t, ctx, rdb, prefix); len(left) > 0 {
		t.Fatalf("keys left after DeleteKeys, per primary: %v", left)
	}
	for _, k := range keys {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatalf("%s still exists", k)
		}
	}
	if n := rdb.Exists(ctx, other+":{s0}:meta").Val(); n != 1 {
		t.Fatalf("a key of another prefix was deleted")
	}
}

// keysByNode counts the keys under prefix on each primary.
func keysByNode(t *testing.T, ctx context.Context, rdb redis.UniversalClient, prefix string) map[string]int {
	t.Helper()
	var mu sync.Mutex
	out := map[string]int{}
	err := scripts.ForEachPrimary(ctx, rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
		n := 0
		iter := node.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		if n > 0 {
			mu.Lock()
			out[addr] = n
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
