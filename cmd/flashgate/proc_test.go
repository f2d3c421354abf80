package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/retry"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// flashgateBinary builds the binary of this folder once per test binary,
// into a temporary folder that TestMain removes, and returns its path. It
// is built with the race detector when the tests are, so that races in the
// processes show too. It fails tb when the build fails.
func flashgateBinary(tb testing.TB) string {
	tb.Helper()
	binOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			binErr = fmt.Errorf("no go tool on PATH to build the binary: %w", err)
			return
		}
		if binDir, binErr = os.MkdirTemp("", "flashgate-test-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "flashgate")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, gobin, append(args, ".")...).CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		tb.Fatal(binErr)
	}
	return binPath
}

func removeBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// cleanEnv is the test's environment without any FLASHGATE_* variable, so
// that the developer's shell cannot change what the binary sees. Should a
// bad setting ever be accepted, the gateway then binds free ports rather
// than fighting a local one over 8080/8081; the caller's own variables come
// later and win.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLASHGATE_") {
			out = append(out, kv)
		}
	}
	return append(out, "FLASHGATE_HTTP_ADDR=127.0.0.1:0", "FLASHGATE_ADMIN_ADDR=127.0.0.1:0")
}

// serviceEnv is the settings that point a process at cfg's services and
// its corner of them (localstack.Isolated).
func serviceEnv(cfg *config.Config) []string {
	return []string{
		"FLASHGATE_REDIS_ADDRS=" + strings.Join(cfg.Redis.Addrs, ","),
		"FLASHGATE_REDIS_KEY_PREFIX=" + cfg.Redis.KeyPrefix,
		"FLASHGATE_AMQP_URL=" + cfg.AMQP.URL,
		"FLASHGATE_AMQP_EXCHANGE=" + cfg.AMQP.Exchange,
		"FLASHGATE_AMQP_QUEUE=" + cfg.AMQP.Queue,
		"FLASHGATE_MYSQL_DSN=" + cfg.MySQL.DSN,
	}
}

// runFlashgate runs a short-lived `flashgate args...` with cleanEnv plus
// env, bounded by three minutes, and returns its output (stdout and stderr)
// and exit code.
func runFlashgate(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, flashgateBinary(t), args...)
	cmd.Env = append(cleanEnv(), env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return string(out), 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		return string(out), ee.ExitCode()
	}
	t.Fatalf("flashgate %v: %v\n%s", args, err, out)
	return "", -1
}

// proc is a flashgate process started by a test, its stdout and stderr
// captured together.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	err    error // Wait's result, once exited is closed
}

// startProc starts `flashgate args...` with cleanEnv plus env and returns
// at once. When the test ends the process gets SIGTERM if it still runs
// (SIGKILL 15s later); a data race it reported fails the test, and when
// the test failed, the end of its output is logged.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(flashgateBinary(t), args...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

func (p *proc) stop(t *testing.T) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	log := p.out.String()
	if strings.Contains(log, "WARNING: DATA RACE") {
		t.Errorf("%s: data race\n%s", p.name, log)
	} else if t.Failed() {
		if len(log) > 6000 {
			log = "…" + log[len(log)-6000:]
		}
		t.Logf("---- %s (%v) ----\n%s", p.name, p.err, log)
	}
}

// kill9 kills the process (SIGKILL, a crash) and waits until it is gone.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s survives SIGKILL", p.name)
	}
}

// signal sends sig and returns at once.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// waitExit waits up to d for the process to end and returns its exit code
// (-1 when a signal ended it).
func (p *proc) waitExit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("%s still running %v after the signal\n%s", p.name, d, p.out)
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("wait: %v", p.err)
	return -1
}

// gatewayProc is a `flashgate gateway` process and its two listeners.
type gatewayProc struct {
	*proc
	public, admin string // host:port
}

// startGateway starts `flashgate gateway` with cleanEnv plus env, on g's
// addresses (free loopback ports when g is nil; a restart passes the old
// one, so that the gateway comes back where the buyers expect it), and
// waits until its /readyz answers 200. It fails the test when the gateway
// exits or is not ready within 30s.
func startGateway(t *testing.T, g *gatewayProc, env []string) *gatewayProc {
	t.Helper()
	if g == nil {
		a := freeAddrs(t, 2)
		g = &gatewayProc{public: a[0], admin: a[1]}
	}
	g.proc = startProc(t, "gateway", slices.Concat(env, []string{"FLASHGATE_HTTP_ADDR=" + g.public, "FLASHGATE_ADMIN_ADDR=" + g.admin}), "gateway")
	c := &http.Client{Timeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := retry.Until(ctx, poll, func(context.Context) error {
		select {
		case <-g.exited:
			return retry.Stop(fmt.Errorf("gateway exited at start: %v", g.err))
		default:
		}
		res, err := c.Get("http://" + g.public + "/readyz")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", res.Status)
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatalf("gateway not ready: %v\n%s", err, g.out)
	}
	return g
}

// soloGateway starts a gateway on a corner of Redis and RabbitMQ of its
// own (localstack.Isolated), with no consumer behind it, logging warnings
// only; env comes last and wins.
func soloGateway(t *testing.T, env ...string) *gatewayProc {
	t.Helper()
	cfg := localstack.Isolated(t)
	return startGateway(t, nil, slices.Concat(serviceEnv(cfg), []string{"FLASHGATE_LOG_LEVEL=warn"}, env))
}

// poll paces the tests' waits for a condition.
var poll = retry.Backoff{Min: 50 * time.Millisecond, Max: 50 * time.Millisecond}

var errNotYet = errors.New("not yet")

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago (localstack.FreeAddrs).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs, err := localstack.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string { return freeAddrs(t, 1)[0] }

func httpDo(c *http.Client, method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return res.StatusCode, b.String(), nil
}
