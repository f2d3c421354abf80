package scripts_test

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// One address is one Redis: a client of it works on a plain Redis, and is
// refused at the first connection, naming the setting to change, when the
// server is a node of a Redis Cluster (one started in cluster mode here,
// so that the refusal is tested on every run). The caller's OnConnect runs
// after the check, only on a connection the check let through.
func TestNewClientOneAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var connects atomic.Int64
	count := func(context.Context, *redis.Conn) error { connects.Add(1); return nil }

	one := scripts.NewClient(redis.UniversalOptions{Addrs: localstack.RedisAddrs[:1], OnConnect: count})
	defer one.Close()
	if _, ok := one.(*redis.Client); !ok {
		t.Fatalf("one address: a %T, want a *redis.Client", one)
	}
	err := one.Ping(ctx).Err()
	switch {
	case localstack.Cluster() && !errors.Is(err, scripts.ErrClusterNode):
		t.Errorf("a node of the test cluster (%s): PING answered %v, want ErrClusterNode", localstack.RedisAddrs[0], err)
	case !localstack.Cluster() && err != nil:
		t.Errorf("one Redis at %s: %v", localstack.RedisAddrs[0], err)
	case !localstack.Cluster() && connects.Load() == 0:
		t.Error("the caller's OnConnect did not run")
	}

	srv, err := localstack.StartRedisServer(ctx, localstack.RedisOptions{Dir: t.TempDir(), Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	connects.Store(0)
	node := scripts.NewClient(redis.UniversalOptions{Addrs: []string{srv.Addr}, OnConnect: count, MaxRetries: -1})
	defer node.Close()
	if err := node.Ping(ctx).Err(); !errors.Is(err, scripts.ErrClusterNode) {
		t.Errorf("a cluster node as the one address: PING answered %v, want ErrClusterNode", err)
	}
	if n := connects.Load(); n != 0 {
		t.Errorf("the caller's OnConnect ran %d times on refused connections", n)
	}
}

// Several addresses are a cluster client that reaches every slot. The test
// runs under a cluster's FLASHGATE_REDIS_ADDRS only.
func TestNewClientCluster(t *testing.T) {
	if !localstack.Cluster() {
		t.Skip("needs a Redis Cluster in FLASHGATE_REDIS_ADDRS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := redis.UniversalOptions{Addrs: localstack.RedisAddrs}
	all := scripts.NewClient(o)
	defer all.Close()
	if _, ok := all.(*redis.ClusterClient); !ok {
		t.Fatalf("%d addresses: a %T, want a *redis.ClusterClient", len(o.Addrs), all)
	}
	if err := localstack.Ping(ctx, all); err != nil {
		t.Fatal(err)
	}
}

// The binary's options: the settings' addresses and credentials, the
// timeout on every wait, context deadlines honoured, two retries.
func TestClientOptions(t *testing.T) {
	c := config.Default().Redis
	c.Addrs = []string{"10.0.0.1:7001", "10.0.0.2:7002"}
	c.Username, c.Password = "gw", "secret"
	c.Timeout = 750 * time.Millisecond
	c.PoolSize = 7
	want := redis.UniversalOptions{Addrs: c.Addrs, Username: "gw", Password: "secret",
		DialTimeout: 750 * time.Millisecond, ReadTimeout: 750 * time.Millisecond, WriteTimeout: 750 * time.Millisecond,
		PoolTimeout: 750 * time.Millisecond, ContextTimeoutEnabled: true, PoolSize: 7, MaxRetries: 2}
	if got := scripts.ClientOptions(c); !reflect.DeepEqual(got, want) {
		t.Errorf("ClientOptions = %+v,\nwant %+v", got, want)
	}
}
