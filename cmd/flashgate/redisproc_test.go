package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
)

// redisProc is a redis-server of one test's own (localstack.RedisServer),
// on a free loopback port, with its data (the append-only file) in the
// test's temporary folder, so that the test may kill and restart it without
// disturbing the shared one.
type redisProc struct {
	srv  *localstack.RedisServer
	addr string
}

// startRedis starts a redis-server configured as deploy/local/service.sh
// configures the local one (AOF on, fsync every second, no RDB snapshots)
// and waits until it answers. It is stopped when the test ends. The test
// runs on it, one Redis, so it is skipped on a Redis Cluster
// (localstack.PrivateRedis).
func startRedis(t *testing.T) *redisProc { return startRedisIn(t, t.TempDir()) }

// startRedisIn is startRedis on the data already in dir (an append-only
// folder put there), which the server reads back before it answers.
func startRedisIn(t *testing.T, dir string) *redisProc {
	t.Helper()
	srv := localstack.PrivateRedis(t, localstack.RedisOptions{Dir: dir,
		Args: []string{"--appendonly", "yes", "--appendfsync", "everysec", "--save", ""}})
	return &redisProc{srv: srv, addr: srv.Addr}
}

// start starts the stopped server again on its port and its data.
func (r *redisProc) start(t *testing.T) {
	t.Helper()
	if err := r.srv.Start(bg(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// stop shuts the server down cleanly (SIGTERM: it writes out its AOF, as
// service.sh stop does) and waits until it is gone.
func (r *redisProc) stop(t *testing.T) {
	t.Helper()
	if err := r.srv.Stop(); err != nil {
		t.Error(err)
	}
}

// restart stops the server and starts it again on the same port and data:
// what it then holds is what it read back from its append-only file.
func (r *redisProc) restart(t *testing.T) {
	t.Helper()
	r.stop(t)
	r.start(t)
	t.Logf("redis-server %s restarted from its AOF", r.addr)
}

// kill9 kills the server (SIGKILL, as a machine crash would stop it: no
// final write of its append-only file) and waits until it is gone.
func (r *redisProc) kill9(t *testing.T) {
	t.Helper()
	if err := r.srv.Kill(); err != nil {
		t.Fatal(err)
	}
}

// snapshot copies the server's append-only folder, while the server runs,
// into a folder of the test's own, and returns that folder and the cut
// (localstack.RedisServer.SnapshotAOF).
func (r *redisProc) snapshot(t *testing.T) (string, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dir := t.TempDir()
	at, err := r.srv.SnapshotAOF(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, at
}

// restore replaces the append-only folder of the stopped server by the one
// of snapshot's folder; the next start reads that back.
func (r *redisProc) restore(t *testing.T, snapshot string) {
	t.Helper()
	if err := r.srv.RestoreAOF(snapshot); err != nil {
		t.Fatal(err)
	}
}

// useRedis points the stack's own Redis client at r; the processes get it
// from newStack's extra settings (FLASHGATE_REDIS_ADDRS).
func (s *stack) useRedis(r *redisProc) {
	_ = s.rdb.Close()
	s.rdb = redis.NewClient(&redis.Options{Addr: r.addr})
	s.cfg.Redis.Addrs = []string{r.addr}
}

// waitRepaired waits until the sale is checked against MySQL under the
// Redis s.rdb reaches now: meta rid names this Redis's history and hold
// is gone. After a restart, no hold alone is not enough: until a hold pass
// or a script has touched the sale it carries the old history's rid and no
// hold yet, and the next call holds it (the hold script).
func (s *stack) waitRepaired(sale string, timeout time.Duration) {
	s.t.Helper()
	ctx := context.Background()
	localstack.WaitFor(s.t, timeout, "the sale "+sale+" released after its check against MySQL", func() bool {
		info, err := s.rdb.Info(ctx, "replication").Result()
		if err != nil {
			return false
		}
		_, rid, _ := strings.Cut(info, "master_replid:")
		rid, _, _ = strings.Cut(rid, "\r\n")
		m, err := s.rdb.HMGet(ctx, s.keys.Meta(sale), "rid", "hold").Result()
		return err == nil && rid != "" && m[0] == rid && m[1] == nil
	})
}
