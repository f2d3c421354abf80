package localstack

// The one launcher of a program as a process of its own: the flashgate
// binary (a gateway, a consumer) for the tests of cmd/flashgate and for the
// bench suite, which is not a test (Launch takes a context; LaunchT is the
// thin wrapper for a test), and bench's bare server.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/retry"
)

// LaunchOptions says what Launch starts and how it knows it is ready.
type LaunchOptions struct {
	// Name names the process in errors and in a test's log.
	Name string
	// Bin is the program (Build's output for flashgate) and Args its
	// arguments, for flashgate the role first: "gateway", "consumer".
	Bin  string
	Args []string
	// Env comes after CleanEnv and wins over it; Public and Admin, when
	// set, come last: a gateway's two listeners (FLASHGATE_HTTP_ADDR and
	// FLASHGATE_ADMIN_ADDR).
	Env           []string
	Public, Admin string
	// Ready is a URL that Launch polls (every 50 ms, up to ReadyWait, 30 s
	// by default) until it answers 200, or any status under 500 with
	// AnyAnswer (the bare server answers a buy's 202 or 410); "" for no
	// wait. A process that exits meanwhile fails the launch at once.
	Ready     string
	AnyAnswer bool
	ReadyWait time.Duration
	// Log receives stdout and stderr together; nil discards them.
	Log io.Writer
	// Command makes the command that runs a program (the bench pins its
	// servers with taskset); exec.Command by default. The process's pid
	// must be the command's.
	Command func(name string, args ...string) *exec.Cmd
	// StopWait bounds Stop's wait after SIGTERM before SIGKILL; 15 s by
	// default.
	StopWait time.Duration
}

// Process is a program started by Launch. Its methods are safe for
// concurrent use.
type Process struct {
	Name          string
	Public, Admin string // a gateway's listeners, as given to Launch
	cmd           *exec.Cmd
	stopWait      time.Duration
	exited        chan struct{}
	err           error // Wait's result, once exited is closed
}

// Launch starts o.Bin with CleanEnv, o.Env and the gateway's addresses,
// and waits until o.Ready answers (within ctx). It returns an error, the
// process stopped, when the program cannot start, exits first or is not
// ready in time. The process outlives ctx: Stop or Kill ends it.
func Launch(ctx context.Context, o LaunchOptions) (*Process, error) {
	mk := o.Command
	if mk == nil {
		mk = exec.Command
	}
	p := &Process{Name: o.Name, Public: o.Public, Admin: o.Admin, cmd: mk(o.Bin, o.Args...), stopWait: o.StopWait, exited: make(chan struct{})}
	if p.Name == "" {
		p.Name = strings.Join(append([]string{o.Bin}, o.Args...), " ")
	}
	if p.stopWait == 0 {
		p.stopWait = 15 * time.Second
	}
	env := append(CleanEnv(), o.Env...)
	if o.Public != "" {
		env = append(env, "FLASHGATE_HTTP_ADDR="+o.Public)
	}
	if o.Admin != "" {
		env = append(env, "FLASHGATE_ADMIN_ADDR="+o.Admin)
	}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = o.Log, o.Log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	if o.Ready == "" {
		return p, nil
	}
	if err := p.waitReady(ctx, o); err != nil {
		p.Stop()
		return nil, fmt.Errorf("%s not ready: %w", p.Name, err)
	}
	return p, nil
}

// waitReady polls o.Ready until it answers as o asks.
func (p *Process) waitReady(ctx context.Context, o LaunchOptions) error {
	wait := o.ReadyWait
	if wait == 0 {
		wait = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	c := &http.Client{Timeout: time.Second}
	return retry.Until(ctx, retry.Backoff{Min: 50 * time.Millisecond, Max: 50 * time.Millisecond}, func(ctx context.Context) error {
		select {
		case <-p.exited:
			return retry.Stop(fmt.Errorf("exited at start: %v", p.err))
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.Ready, nil)
		if err != nil {
			return retry.Stop(err)
		}
		res, err := c.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode == http.StatusOK || (o.AnyAnswer && res.StatusCode < 500) {
			return nil
		}
		return fmt.Errorf("%s: %s", o.Ready, res.Status)
	}, nil)
}

// Cmd is the process's command (its Process holds the pid).
func (p *Process) Cmd() *exec.Cmd { return p.cmd }

// Pid is the process's id, for /proc reads.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited; Err is then Wait's result.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit (exec.Cmd.Wait's result) once Exited is
// closed, nil before.
func (p *Process) Err() error {
	select {
	case <-p.exited:
		return p.err
	default:
		return nil
	}
}

// Signal sends sig and returns at once.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits for the exit, up to StopWait, then kills
// it (SIGKILL) and waits. It blocks until the process is gone, is safe to
// call twice and after Kill, and returns the exit's error from Wait (nil
// for a clean exit).
func (p *Process) Stop() error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(p.stopWait):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return p.err
}

// Kill kills the process (SIGKILL, a crash) and waits up to 10 s until it
// is gone; it returns an error when it is not.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s survives SIGKILL", p.Name)
	}
}

// Wait waits up to d for the process to end and returns its exit code
// (-1 when a signal ended it); an error when it still runs or its end
// cannot be read.
func (p *Process) Wait(d time.Duration) (int, error) {
	select {
	case <-p.exited:
	case <-time.After(d):
		return 0, fmt.Errorf("%s still running after %v", p.Name, d)
	}
	if p.err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, fmt.Errorf("wait: %w", p.err)
}

// LaunchT is Launch for a test: it fails tb when the launch fails (the
// output so far in the message when Log is an *Output), and when the test
// ends it stops the process (Stop), fails tb when the output shows a data
// race the process reported, and logs the output's end when tb failed.
// Without a Log the output is kept in an Output of its own.
func LaunchT(tb testing.TB, o LaunchOptions) *Process {
	tb.Helper()
	if o.Log == nil {
		o.Log = &Output{}
	}
	out, _ := o.Log.(*Output)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := Launch(ctx, o)
	if err != nil {
		if out != nil {
			tb.Fatalf("%v\n%s", err, out)
		}
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		p.Stop()
		if out == nil {
			return
		}
		log := out.String()
		if strings.Contains(log, "WARNING: DATA RACE") {
			tb.Errorf("%s: data race\n%s", p.Name, log)
		} else if tb.Failed() {
			if len(log) > 6000 {
				log = "…" + log[len(log)-6000:]
			}
			tb.Logf("---- %s (%v) ----\n%s", p.Name, p.err, log)
		}
	})
	return p
}

// CleanEnv is this process's environment without any FLASHGATE_* variable,
// so that the developer's shell cannot change what a launched binary sees,
// and with both listeners on free ports (127.0.0.1:0): should a bad setting
// ever be accepted, a gateway then binds free ports rather than fighting a
// local one over 8080/8081. A caller's own variables come later and win.
func CleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLASHGATE_") {
			out = append(out, kv)
		}
	}
	return append(out, "FLASHGATE_HTTP_ADDR=127.0.0.1:0", "FLASHGATE_ADMIN_ADDR=127.0.0.1:0")
}

// Build builds the Go package pkg (a folder, "." or "./cmd/flashgate")
// into out with go build's extra flags (-race, -trimpath), within ctx, and
// returns go build's output in the error when it fails.
func Build(ctx context.Context, out, pkg string, flags ...string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("no go tool on PATH to build %s: %w", pkg, err)
	}
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	if b, err := exec.CommandContext(ctx, gobin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// Output is a process's stdout and stderr as they come, safe for
// concurrent use.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
