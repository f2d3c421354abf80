package main

import (
	"bytes"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"

	"github.com/redis/go-redis/v9"
)

// gatewayProc is a `flashgate gateway` process started by a test, on free
// loopback ports and its own Redis key prefix.
type gatewayProc struct {
	cmd           *exec.Cmd
	public, admin string // host:port
	prefix        string
	stderr        *lockedBuffer
	exited        chan struct{}
	err           error // Wait's result, once exited is closed
}

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

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dropRedisKeys deletes every key under prefix from the local Redis.
func dropRedisKeys(t *testing.T, prefix string) {
	rdb := redis.NewClient(&redis.Options{Addr: localstack.RedisAddr})
	defer rdb.Close()
	localstack.DropKeys(t, rdb, prefix)
}

// dropTopology deletes the queues and exchanges declared for c.
func dropTopology(t *testing.T, c config.AMQP) {
	localstack.DropTopology(t, c.URL, []string{c.Queue, broker.DeadLetter(c.Queue)},
		[]string{c.Exchange, broker.DeadLetter(c.Exchange)})
}

// startGatewayProc starts the binary and waits until /readyz answers 200.
// The process is killed when the test ends, if it still runs.
func startGatewayProc(t *testing.T, bin string, env ...string) *gatewayProc {
	t.Helper()
	p := &gatewayProc{public: freeAddr(t), admin: freeAddr(t), prefix: "p" + localstack.RandomHex(6),
		stderr: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, "gateway")
	// Its own exchange and queue: its relay must not feed the orders of a
	// test into the queue of `make run`.
	p.cmd.Env = append(cleanEnv(), "FLASHGATE_HTTP_ADDR="+p.public, "FLASHGATE_ADMIN_ADDR="+p.admin,
		"FLASHGATE_REDIS_KEY_PREFIX="+p.prefix, "FLASHGATE_LOG_LEVEL=warn",
		"FLASHGATE_AMQP_EXCHANGE="+p.prefix, "FLASHGATE_AMQP_QUEUE="+p.prefix)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		dropRedisKeys(t, p.prefix)
		dropTopology(t, config.AMQP{URL: localstack.AMQPURL, Exchange: p.prefix, Queue: p.prefix})
	})
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := c.Get("http://" + p.public + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("gateway exited at start: %v\n%s", p.err, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not ready after 20s\n%s", p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// signal sends sig and returns at once.
func (p *gatewayProc) signal(t *testing.T, sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// waitExit waits up to d for the process to end and returns its exit code.
func (p *gatewayProc) waitExit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("gateway still running %v after the signal\n%s", d, p.stderr)
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
