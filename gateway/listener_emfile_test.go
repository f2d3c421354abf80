package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/process"
	"github.com/flashgate/flashgate/scripts"
)

// A gateway process under a low open-file limit (TestGatewayChild, run by
// TestAcceptSurvivesEMFILE as a child of the test binary): it keeps
// accepting past EMFILE and serves once the flood is gone.

// The child process of TestAcceptSurvivesEMFILE: a gateway under a low
// open-file limit, set before it starts (mode "before") or after (mode
// "after", as prlimit on a running process would). It prints its addresses,
// serves until its standard input closes, and fails (a non-zero exit, as the
// flashgate binary's would be) if Run returns before that.
func TestGatewayChild(t *testing.T) {
	mode := os.Getenv(childModeEnv)
	if mode == "" {
		t.Skip("runs only as the child process of TestAcceptSurvivesEMFILE")
	}
	limit, err := strconv.ParseUint(os.Getenv(childNofileEnv), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	lower := func() {
		// Soft and hard: the gateway's own raise must not undo it.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
			t.Fatal(err)
		}
	}
	if mode == "before" {
		lower()
	}
	cfg := config.Default()
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Admin.Token = testToken
	cfg.Redis.Addrs = strings.Split(redisAddr(), ",")
	cfg.Redis.KeyPrefix = "t" + localstack.RandomHex(6)
	cfg.HTTP.ReadTimeout = 2 * time.Second
	cfg.Shutdown.DrainDelay = 0
	cfg.Shutdown.Timeout = 10 * time.Second
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(zapcore.InfoLevel)
	zc.OutputPaths = []string{"stderr"}
	log, err := zc.Build()
	if err != nil {
		t.Fatal(err)
	}
	ro := scripts.ClientOptions(cfg.Redis)
	ro.PoolSize = 8
	rdb := scripts.NewClient(ro)
	defer rdb.Close()
	defer localstack.DropKeys(t, rdb, cfg.Redis.KeyPrefix)
	// The gateway process's parts (process.Gateway) but the relay.
	parts, err := process.NewGateway(cfg, process.GatewayDeps{Log: log, Redis: rdb, NoRelay: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parts.Loader.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Deps{Log: log, Sales: parts.Sales, Loader: parts.Loader, Reload: parts.Reload, Metrics: parts.WriteMetrics})
	if err != nil {
		t.Fatal(err)
	}
	if mode == "after" {
		lower()
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- parts.Run(ctx, srv) }()
	fmt.Printf("listening %s %s\n", srv.Addr(), srv.AdminAddr())
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case err := <-done:
		t.Fatalf("gateway stopped on its own: %v", err)
	case <-eof:
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("gateway Run: %v", err)
	}
}

const (
	childModeEnv   = "FLASHGATE_TEST_GATEWAY_CHILD"
	childNofileEnv = "FLASHGATE_TEST_GATEWAY_NOFILE"
)

// gatewayChild is a running TestGatewayChild.
type gatewayChild struct {
	cmd           *exec.Cmd
	stdin         io.WriteCloser
	public, admin string
	exited        chan struct{} // closed once the process ended
	waitErr       error
	acceptRetried chan struct{} // closed at the first "accept failed" line
	mu            sync.Mutex
	stderr        bytes.Buffer
}

func startGatewayChild(t *testing.T, mode string, nofile int) *gatewayChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGatewayChild$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childNofileEnv+"="+strconv.Itoa(nofile))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &gatewayChild{cmd: cmd, stdin: stdin, exited: make(chan struct{}), acceptRetried: make(chan struct{})}
	var pipes sync.WaitGroup
	pipes.Add(1)
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if strings.Contains(line, "accept failed; retrying") {
				once.Do(func() { close(p.acceptRetried) })
			}
		}
	}()
	addrs := make(chan string, 1)
	pipes.Add(1)
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "listening ") {
				addrs <- strings.TrimPrefix(line, "listening ")
			}
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
		}
	}()
	go func() {
		pipes.Wait() // Wait closes the pipes: read them to the end first
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-p.exited
			t.Errorf("the gateway process did not stop; killed")
		}
	})
	select {
	case a := <-addrs:
		p.public, p.admin, _ = strings.Cut(a, " ")
	case <-p.exited:
		t.Fatalf("the gateway process ended at start: %v\n%s", p.waitErr, p.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway process did not start\n%s", p.output())
	}
	return p
}

func (p *gatewayChild) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// alive fails the test if the process has ended.
func (p *gatewayChild) alive(t *testing.T, when string) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("%s: the gateway process ended: %v\n%s", when, p.waitErr, p.output())
	default:
	}
}

// stop closes the child's standard input and fails unless it exits cleanly.
func (p *gatewayChild) stop(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	select {
	case <-p.exited:
		if p.waitErr != nil {
			t.Errorf("the gateway process failed: %v\n%s", p.waitErr, p.output())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the gateway process did not stop")
	}
}

// Finding 1: past the open-file limit, accept4 failed with EMFILE, fasthttp's
// Serve returned, and the gateway process exited (~1,009 idle connections
// under ulimit -n 1024). Now the accept loop backs off and retries, and the
// default cap, derived from the limit, refuses a flood in JSON before it
// gets there. Each row runs a gateway process under a limit of 256 open
// files and opens 400 connections to it; the process stays up, and once
// they close a buyer is served.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	const nofile, conns = 256, 400
	tests := []struct {
		name, mode string
	}{
		// The caps were derived from the high limit; the process runs out of
		// descriptors and the accept loop must ride it out.
		{name: "limit lowered after start", mode: "after"},
		// The caps fit the limit: the flood is refused 503 in JSON, and
		// the process never runs out.
		{name: "limit at start", mode: "before"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startGatewayChild(t, tt.mode, nofile)
			client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			do := func(method, url, body string, hdr map[string]string) (int, string) {
				req, _ := http.NewRequest(method, url, strings.NewReader(body))
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				res, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v\n%s", method, url, err, p.output())
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b)
			}
			if code, body := do("PUT", "http://"+p.admin+"/admin/v1/sales/fd", `{"stock":5,"per_user_limit":5}`, auth); code != 201 {
				t.Fatalf("create sale: %d %s", code, body)
			}

			flood := make([]net.Conn, 0, conns)
			defer func() {
				for _, c := range flood {
					c.Close()
				}
			}()
			for range conns {
				flood = append(flood, dialFrom(t, "", p.public))
			}
			var statuses map[string]int
			switch tt.mode {
			case "after":
				select {
				case <-p.acceptRetried:
				case <-p.exited:
					t.Fatalf("the gateway process ended under the flood: %v\n%s", p.waitErr, p.output())
				case <-time.After(30 * time.Second):
					t.Fatalf("the flood did not run the process out of descriptors\n%s", p.output())
				}
			case "before":
				// Every connection is answered: refused at once (503), or
				// accepted and cut by the read timeout (408).
				statuses = readAll(flood, 30*time.Second)
				if statuses["unavailable"] == 0 || statuses["request_timeout"] == 0 ||
					statuses["unavailable"]+statuses["request_timeout"] != conns {
					t.Errorf("answers %v, want only unavailable and request_timeout, %d in all", statuses, conns)
				}
				select {
				case <-p.acceptRetried:
					t.Errorf("the derived cap let the process run out of descriptors\n%s", p.output())
				default:
				}
			}
			p.alive(t, "under the flood")
			for _, c := range flood {
				c.Close()
			}
			flood = nil
			if code, body := do("POST", "http://"+p.public+"/v1/sales/fd/orders", `{"user_id":"after-flood"}`, nil); code != 202 {
				t.Errorf("buy after the flood: %d %s", code, body)
			}
			p.alive(t, "after the flood")
			p.stop(t)
		})
	}
}
