package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
// and waits until it answers. It is stopped when the test ends.
func startRedis(t *testing.T) *redisProc { return startRedisIn(t, t.TempDir()) }

// startRedisIn is startRedis on the data already in dir (an append-only
// folder put there), which the server reads back before it answers.
func startRedisIn(t *testing.T, dir string) *redisProc {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("no redis-server on PATH (make up installs it): %v", err)
	}
	srv, err := localstack.StartRedisServer(bg(t, time.Minute), localstack.RedisOptions{Dir: dir,
		Args: []string{"--appendonly", "yes", "--appendfsync", "everysec", "--save", ""}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
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

// aofDir is the server's append-only folder (Redis 7's multi-part AOF:
// manifest, base and incremental files; appenddirname's default).
func (r *redisProc) aofDir() string { return filepath.Join(r.srv.Dir(), "appendonlydir") }

// snapshot copies the server's append-only folder, while the server runs,
// into a folder of the test's own, and returns that folder and the cut:
// every write the server answered before the cut is in the copy. Whatever
// it writes after the copy is what restore makes it lose; the last command
// may be cut in the middle, which Redis loads (aof-load-truncated is on by
// default).
//
// With appendfsync everysec Redis may answer a write before it writes it
// to the file (for up to 2 s, while a background fsync is slow), so the
// copy waits for a moment when the server's AOF buffer is empty: what it
// had answered before it was asked is then in the file.
func (r *redisProc) snapshot(t *testing.T) (string, time.Time) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		asked := time.Now()
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatalf("redis-server %s: INFO persistence: %v", r.addr, err)
		}
		if strings.Contains(info, "\naof_buffer_length:0\r") {
			dir := t.TempDir()
			if err := os.CopyFS(filepath.Join(dir, "appendonlydir"), os.DirFS(r.aofDir())); err != nil {
				t.Fatalf("copy of %s: %v", r.aofDir(), err)
			}
			return dir, asked
		}
		if ctx.Err() != nil {
			t.Fatalf("redis-server %s: its AOF buffer was never empty in 10s", r.addr)
		}
	}
}

// restore replaces the append-only folder of the stopped server by the one
// of snapshot's folder; the next start reads that back.
func (r *redisProc) restore(t *testing.T, snapshot string) {
	t.Helper()
	if r.srv.Running() {
		t.Fatalf("restore of redis-server %s while it runs", r.addr)
	}
	if err := os.RemoveAll(r.aofDir()); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(r.aofDir(), os.DirFS(filepath.Join(snapshot, "appendonlydir"))); err != nil {
		t.Fatalf("restore of %s: %v", r.aofDir(), err)
	}
}

// useRedis points the stack's own Redis client at r; the processes get it
// from newStack's extra settings (FLASHGATE_REDIS_ADDRS).
func (s *stack) useRedis(r *redisProc) {
	_ = s.rdb.Close()
	s.rdb = redis.NewClient(&redis.Options{Addr: r.addr})
	s.cfg.Redis.Addrs = []string{r.addr}
}
