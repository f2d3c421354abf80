package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
)

// The binary's Redis client (newRedis): one address is one Redis, and is
// refused at the first connection when that Redis is a node of a cluster,
// with an error naming the setting to change, instead of a client that
// reaches only that node's slots and answers MOVED (503) for every sale
// elsewhere. Several addresses are a cluster client that reaches every
// slot. The cluster half runs under `make test-cluster`.
func TestRedisClientOneOrCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Default()
	cfg.Redis.Addrs = localstack.RedisAddrs[:1]
	one := newRedis(cfg)
	defer one.Close()
	err := one.Ping(ctx).Err()
	if !localstack.Cluster() {
		if err != nil {
			t.Fatalf("one Redis at %s: %v", cfg.Redis.Addrs[0], err)
		}
		t.Skip("the cluster half needs a Redis Cluster in FLASHGATE_REDIS_ADDRS (make test-cluster)")
	}
	if !errors.Is(err, errClusterNode) {
		t.Fatalf("one node of the cluster (%s) as FLASHGATE_REDIS_ADDRS: PING answered %v, want %v",
			cfg.Redis.Addrs[0], err, errClusterNode)
	}

	cfg.Redis.Addrs = localstack.RedisAddrs
	all := newRedis(cfg)
	prefix := "t" + localstack.RandomHex(6)
	t.Cleanup(func() {
		localstack.DropKeys(t, all, prefix)
		all.Close()
	})
	for i := range 64 {
		key := fmt.Sprintf("%s:{s%d}:meta", prefix, i)
		if err := all.Set(ctx, key, i, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s through the cluster client: %v", key, err)
		}
		if n, err := all.Get(ctx, key).Int(); err != nil || n != i {
			t.Fatalf("GET %s through the cluster client: %d, %v", key, n, err)
		}
	}
}
