package localstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisOptions say how to start a RedisServer.
type RedisOptions struct {
	// Dir holds the server's data and its log, redis.log. Required; made
	// absolute (redis-server reads paths after its chdir to it).
	Dir string
	// Args are further settings, as redis-server reads them on its
	// command line ("--appendfsync", "always").
	Args []string
	// Cluster starts the server in cluster mode, its bus on a port of its
	// own (cluster-port) and its node table in Dir/nodes.conf.
	Cluster bool
	// Command makes the command that runs a program (the bench pins the
	// server to CPUs with taskset); it must exec the program itself, so
	// that the server's pid is the command's. exec.Command by default.
	Command func(name string, args ...string) *exec.Cmd
}

// RedisServer is a redis-server process of its starter's own, on free
// loopback ports, so that a test may stop, kill and restart it without
// disturbing the shared one.
type RedisServer struct {
	Addr string // host:port of its clients
	Bus  string // host:port of its cluster bus; "" unless Options.Cluster

	opts   RedisOptions
	cmd    *exec.Cmd
	exited chan struct{}
}

// portAttempts bounds StartRedisServer's tries on fresh ports: a port
// free when chosen may be taken before the server binds it (by another
// test package choosing ports the same way, or a client's source port).
const portAttempts = 5

// redisStartWait bounds one start: the server binds, loads its data and
// answers. An AOF of the tests' size loads in well under a second.
const redisStartWait = 30 * time.Second

// errPortTaken is a start that failed because a port was in use.
var errPortTaken = errors.New("port in use")

// StartRedisServer starts a redis-server on free loopback ports and waits
// until the process it started, not another on that port, answers with
// its data loaded. When a port turns out taken it tries fresh ones.
func StartRedisServer(ctx context.Context, o RedisOptions) (*RedisServer, error) {
	if o.Dir == "" {
		return nil, errors.New("localstack: RedisOptions.Dir is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	o.Dir = dir
	if o.Command == nil {
		o.Command = exec.Command
	}
	r := &RedisServer{opts: o}
	ports := 1
	if o.Cluster {
		ports = 2
	}
	for attempt := 1; ; attempt++ {
		addrs, err := FreeAddrs(ports)
		if err != nil {
			return nil, err
		}
		r.Addr = addrs[0]
		if o.Cluster {
			r.Bus = addrs[1]
		}
		err = r.Start(ctx)
		if err == nil || !errors.Is(err, errPortTaken) || attempt == portAttempts {
			return r, err
		}
	}
}

// PrivateRedis is StartRedisServer for a test: a redis-server of the
// test's own, stopped (cleanly) when the test ends, the test failed when it
// cannot start (redis-server missing included: `make up` installs it) or
// does not stop. A server of one Redis (not o.Cluster) skips the test on a
// Redis Cluster (SingleRedisOnly): the test then runs on its own single
// Redis, not on the cluster, and the cluster run would only repeat the
// single one.
func PrivateRedis(tb testing.TB, o RedisOptions) *RedisServer {
	tb.Helper()
	if !o.Cluster {
		SingleRedisOnly(tb, "the test runs on a redis-server of its own")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("no redis-server on PATH (make up installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartRedisServer(ctx, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := r.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return r
}

// Start starts the server again on its ports and its data (after Stop or
// Kill), and waits until it answers with that data loaded. A port taken
// meanwhile is an error; the process is then gone.
func (r *RedisServer) Start(ctx context.Context) error {
	if r.Running() {
		return fmt.Errorf("redis-server %s: already running", r.Addr)
	}
	if err := os.MkdirAll(r.opts.Dir, 0o755); err != nil {
		return err
	}
	logPath := r.LogPath()
	var logFrom int64
	if fi, err := os.Stat(logPath); err == nil {
		logFrom = fi.Size()
	}
	args := append([]string(nil), r.opts.Args...)
	args = append(args, "--bind", "127.0.0.1", "--port", port(r.Addr), "--dir", r.opts.Dir,
		"--daemonize", "no", "--logfile", logPath)
	if r.opts.Cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-port", port(r.Bus),
			"--cluster-config-file", "nodes.conf")
	}
	r.cmd = r.opts.Command("redis-server", args...)
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	r.exited = make(chan struct{})
	cmd, exited := r.cmd, r.exited
	go func() { _ = cmd.Wait(); close(exited) }()

	ctx, cancel := context.WithTimeout(ctx, redisStartWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := redisInfo(ctx, r.Addr)
		if err == nil && infoField(info, "process_id") == strconv.Itoa(cmd.Process.Pid) &&
			infoField(info, "loading") == "0" {
			return nil
		}
		select {
		case <-exited:
			tail := logTail(logPath, logFrom)
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("redis-server %s (bus %q): %w: %s", r.Addr, r.Bus, errPortTaken, tail)
			}
			return fmt.Errorf("redis-server %s exited at its start (%v): %s", r.Addr, cmd.ProcessState, tail)
		case <-ctx.Done():
			_ = r.Kill()
			return fmt.Errorf("redis-server %s did not answer in time (last: %v; see %s)", r.Addr, err, logPath)
		case <-tick.C:
		}
	}
}

// Running reports whether the server's process has not exited.
func (r *RedisServer) Running() bool {
	if r.exited == nil {
		return false
	}
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// Pid is the server's process id (the last one's, once it has exited).
func (r *RedisServer) Pid() int {
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

// Dir is the server's data folder, absolute.
func (r *RedisServer) Dir() string { return r.opts.Dir }

// LogPath is the server's log file.
func (r *RedisServer) LogPath() string { return filepath.Join(r.opts.Dir, "redis.log") }

// Stop shuts the server down cleanly (SIGTERM: it writes out its AOF, as
// `make down` does) and waits until it is gone: 30 s, then SIGKILL.
func (r *RedisServer) Stop() error {
	if !r.Running() {
		return nil
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
		return nil
	case <-time.After(30 * time.Second):
	}
	_ = r.Kill()
	return fmt.Errorf("redis-server %s still running 30s after SIGTERM; killed it", r.Addr)
}

// Kill kills the server (SIGKILL, as a machine crash stops it: no last
// write of its append-only file) and waits until it is gone.
func (r *RedisServer) Kill() error {
	if !r.Running() {
		return nil
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-r.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("redis-server %s survives SIGKILL", r.Addr)
	}
}

// redisInfo asks addr for INFO server and persistence on a connection of
// its own, in RESP: no client library, which would log every refused dial
// while the server starts.
func redisInfo(ctx context.Context, addr string) (string, error) {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "*3\r\n$4\r\nINFO\r\n$6\r\nserver\r\n$11\r\npersistence\r\n"); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	head = strings.TrimRight(head, "\r\n")
	if !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("INFO: %q", head)
	}
	n, err := strconv.Atoi(head[1:])
	if err != nil || n < 0 || n > 1<<20 {
		return "", fmt.Errorf("INFO: %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// infoField is the value of one field of an INFO answer, "" when absent.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// logTail is the last lines the server wrote to its log from offset on.
func logTail(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if from <= int64(len(b)) {
		b = b[from:]
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// port is the port of a host:port address.
func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// aofDir is the server's append-only folder (Redis 7's multi-part AOF:
// manifest, base and incremental files; appenddirname's default).
func (r *RedisServer) aofDir() string { return filepath.Join(r.opts.Dir, "appendonlydir") }

// SnapshotAOF copies the running server's append-only folder into
// dir/appendonlydir and returns when it asked for the copy: every write
// the server answered before then is in the copy. Whatever it writes after
// is what RestoreAOF makes it lose: a machine crash's lost second. The last
// command may be cut in the middle, which Redis loads (aof-load-truncated
// is on by default).
//
// With appendfsync everysec Redis may answer a write before it writes it
// to the file (for up to 2 s, while a background fsync is slow), so the
// copy waits, within ctx, for a moment when the server's AOF buffer is
// empty: what it had answered before it was asked is then in the file.
func (r *RedisServer) SnapshotAOF(ctx context.Context, dir string) (time.Time, error) {
	for {
		asked := time.Now()
		info, err := redisInfo(ctx, r.Addr)
		if err != nil {
			return asked, fmt.Errorf("redis-server %s: INFO: %w", r.Addr, err)
		}
		if infoField(info, "aof_buffer_length") == "0" {
			if err := os.CopyFS(filepath.Join(dir, "appendonlydir"), os.DirFS(r.aofDir())); err != nil {
				return asked, fmt.Errorf("copy of %s: %w", r.aofDir(), err)
			}
			return asked, nil
		}
		if ctx.Err() != nil {
			return asked, fmt.Errorf("redis-server %s: its AOF buffer was never empty: %w", r.Addr, ctx.Err())
		}
	}
}

// RestoreAOF replaces the stopped server's append-only folder by the copy
// SnapshotAOF put in dir; the next Start reads it back.
func (r *RedisServer) RestoreAOF(dir string) error {
	if r.Running() {
		return fmt.Errorf("restore of redis-server %s while it runs", r.Addr)
	}
	if err := os.RemoveAll(r.aofDir()); err != nil {
		return err
	}
	if err := os.CopyFS(r.aofDir(), os.DirFS(filepath.Join(dir, "appendonlydir"))); err != nil {
		return fmt.Errorf("restore of %s: %w", r.aofDir(), err)
	}
	return nil
}
