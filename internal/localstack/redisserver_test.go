package localstack

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func needRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (make up installs it)")
	}
}

// A server of the test's own: it is the process that answers on its port,
// it keeps what it was told across a kill and a start on the same port,
// and a start on a port someone else holds fails as such, with the server
// gone, instead of answering for the other process.
func TestRedisServerOwnPort(t *testing.T) {
	needRedisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartRedisServer(ctx, RedisOptions{Dir: t.TempDir(), Args: []string{"--appendonly", "yes", "--appendfsync", "always", "--save", ""}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := infoField(info, "process_id"), strconv.Itoa(r.Pid()); got != want {
		t.Fatalf("%s answered as process %s, want %s", r.Addr, got, want)
	}
	if err := rdb.Set(ctx, "k", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}

	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if r.Running() {
		t.Fatal("running after Kill")
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "kept" {
		t.Fatalf("after a kill and a start: %q, %v; want %q", v, err, "kept")
	}
	if err := r.Start(ctx); err == nil {
		t.Fatal("a second Start of a running server succeeded")
	}

	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = r.Start(ctx)
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a taken port: %v, want %v", err, errPortTaken)
	}
	if r.Running() {
		t.Fatal("running after a start on a taken port")
	}
}

// In cluster mode the bus has a port of its own, distinct from the
// clients', and the node answers CLUSTER commands.
func TestRedisServerCluster(t *testing.T) {
	needRedisServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartRedisServer(ctx, RedisOptions{Dir: t.TempDir(), Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if r.Bus == "" || r.Bus == r.Addr {
		t.Fatalf("bus %q beside %q", r.Bus, r.Addr)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if infoField(info, "cluster_known_nodes") != "1" {
		t.Errorf("CLUSTER INFO: %q", info)
	}
	c, err := net.DialTimeout("tcp", r.Bus, time.Second)
	if err != nil {
		t.Fatalf("bus %s: %v", r.Bus, err)
	}
	c.Close()
}
