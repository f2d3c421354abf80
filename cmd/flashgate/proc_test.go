package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/retry"
)

// cleanEnv is localstack.CleanEnv: the test's environment without any
// FLASHGATE_* variable, both listeners on free ports.
func cleanEnv() []string { return localstack.CleanEnv() }

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
	cmd := exec.CommandContext(ctx, localstack.Binary(t), args...)
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

// proc is a flashgate process started by a test (localstack.LaunchT), its
// stdout and stderr captured together in out. A test may also fill one
// by hand around a command of its own (cmd, exited closed once err is
// Wait's result).
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
// the test failed, the end of its output is logged (localstack.LaunchT).
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	return launchProc(t, localstack.LaunchOptions{Name: name, Bin: localstack.Binary(t), Args: args, Env: env})
}

// launchProc launches o (localstack.LaunchT) with its output in the
// proc's out.
func launchProc(t *testing.T, o localstack.LaunchOptions) *proc {
	t.Helper()
	p := &proc{name: o.Name, out: &lockedBuffer{}, exited: make(chan struct{})}
	o.Log = p.out
	lp := localstack.LaunchT(t, o)
	p.cmd = lp.Cmd()
	go func() {
		<-lp.Exited()
		p.err = lp.Err()
		close(p.exited)
	}()
	return p
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
	g.proc = launchProc(t, localstack.LaunchOptions{Name: "gateway", Bin: localstack.Binary(t), Args: []string{"gateway"}, Env: env,
		Public: g.public, Admin: g.admin, Ready: "http://" + g.public + "/readyz"})
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

// lockedBuffer is a process's output as it comes (localstack.Output).
type lockedBuffer = localstack.Output

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
