package nemesis

// The run's processes: gateways and consumers of the flashgate binary,
// each reaching its servers through proxies of its own.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
)

// Servers are the addresses of the run's servers and the corner of them
// that is the run's own: a Redis (the run may restart it), a RabbitMQ
// exchange and queue, a MySQL database.
type Servers struct {
	Redis     string // host:port
	KeyPrefix string
	AMQPURL   string
	Exchange  string
	Queue     string
	MySQLDSN  string
}

// Proc is one flashgate process of the run, which the nemesis may kill and
// start again. Its methods are safe for concurrent use.
type Proc struct {
	Name   string
	Role   string // "gateway" or "consumer"
	Public string // a gateway's listeners
	Admin  string

	opts localstack.LaunchOptions
	mu   sync.Mutex
	p    *localstack.Process
	out  *localstack.Output
}

// Stack is the run's processes and the network between them and the
// servers.
type Stack struct {
	Net      *Net
	Gateways []*Proc
	Procs    []*Proc // gateways, then consumers
}

// StackOptions says what a Stack starts.
type StackOptions struct {
	Bin       string
	Servers   Servers
	Gateways  int
	Consumers int
	// Env is added to every process's settings.
	Env []string
}

// StartStack makes the proxies and starts the processes; the test's
// cleanup stops the processes, then the proxies.
func StartStack(t *testing.T, o StackOptions) *Stack {
	t.Helper()
	s := &Stack{Net: NewNet()}
	t.Cleanup(s.Net.Close)
	for i := range o.Gateways {
		s.add(t, o, "gateway", fmt.Sprintf("gateway-%d", i+1))
	}
	for i := range o.Consumers {
		s.add(t, o, "consumer", fmt.Sprintf("consumer-%d", i+1))
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, p := range s.Procs {
			wg.Go(func() { p.stop(t) })
		}
		wg.Wait()
	})
	var wg sync.WaitGroup
	errs := make([]error, len(s.Procs))
	for i, p := range s.Procs {
		wg.Go(func() { errs[i] = p.Start(context.Background()) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// add makes a process's proxies and its settings.
func (s *Stack) add(t *testing.T, o StackOptions, role, name string) {
	t.Helper()
	srv := o.Servers
	redisAddr, err := s.Net.Proxy(name+"/redis", srv.Redis)
	if err != nil {
		t.Fatal(err)
	}
	amqpURL, err := proxied(s.Net, name+"/rabbitmq", srv.AMQPURL)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := mysql.ParseDSN(srv.MySQLDSN)
	if err != nil {
		t.Fatal(err)
	}
	if dc.Addr, err = s.Net.Proxy(name+"/mysql", dc.Addr); err != nil {
		t.Fatal(err)
	}
	env := append([]string{
		"FLASHGATE_REDIS_ADDRS=" + redisAddr,
		"FLASHGATE_REDIS_KEY_PREFIX=" + srv.KeyPrefix,
		"FLASHGATE_AMQP_URL=" + amqpURL,
		"FLASHGATE_AMQP_EXCHANGE=" + srv.Exchange,
		"FLASHGATE_AMQP_QUEUE=" + srv.Queue,
		"FLASHGATE_MYSQL_DSN=" + dc.FormatDSN(),
		"FLASHGATE_RELAY_CLAIM_AFTER=1s",
		"FLASHGATE_RELAY_POLL=20ms",
		"FLASHGATE_SHUTDOWN_TIMEOUT=5s",
		"FLASHGATE_DRAIN_DELAY=0s",
		"FLASHGATE_LOG_LEVEL=warn",
	}, o.Env...)
	p := &Proc{Name: name, Role: role, out: &localstack.Output{}}
	p.opts = localstack.LaunchOptions{Name: name, Bin: o.Bin, Args: []string{role}, Env: env, Log: p.out, StopWait: 10 * time.Second}
	if role == "gateway" {
		addrs, err := localstack.FreeAddrs(2)
		if err != nil {
			t.Fatal(err)
		}
		p.Public, p.Admin = addrs[0], addrs[1]
		p.opts.Public, p.opts.Admin = p.Public, p.Admin
		p.opts.Ready = "http://" + p.Public + "/readyz"
		p.opts.ReadyWait = time.Minute
		s.Gateways = append(s.Gateways, p)
	}
	s.Procs = append(s.Procs, p)
}

// proxied is the AMQP URL raw with its host replaced by a proxy's, named
// name, in front of it.
func proxied(n *Net, name, raw string) (string, error) {
	u, err := url.Parse(strings.Split(raw, ",")[0])
	if err != nil {
		return "", fmt.Errorf("AMQP URL: %w", err)
	}
	host := u.Host
	if u.Port() == "" {
		host += ":5672"
	}
	addr, err := n.Proxy(name, host)
	if err != nil {
		return "", err
	}
	u.Host = addr
	return u.String(), nil
}

// Start starts the process (a gateway: until /readyz answers 200), within
// ctx.
func (p *Proc) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p != nil {
		select {
		case <-p.p.Exited():
		default:
			return fmt.Errorf("%s: already running", p.Name)
		}
	}
	lp, err := localstack.Launch(ctx, p.opts)
	if err != nil {
		return err
	}
	p.p = lp
	return nil
}

// Kill kills the process (kill -9) and waits until it is gone.
func (p *Proc) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p == nil {
		return nil
	}
	return p.p.Kill()
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p == nil {
		return fmt.Errorf("%s: not started", p.Name)
	}
	return p.p.Signal(sig)
}

// Exited reports whether the process has ended since it was started.
func (p *Proc) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p == nil {
		return true
	}
	select {
	case <-p.p.Exited():
		return true
	default:
		return false
	}
}

// Output is what the process wrote, over all its starts.
func (p *Proc) Output() string { return p.out.String() }

// stop stops the process (SIGTERM, then SIGKILL), failing t on a data race
// it reported, and logging its output's end when t failed.
func (p *Proc) stop(t *testing.T) {
	p.mu.Lock()
	if p.p != nil {
		p.p.Stop()
	}
	p.mu.Unlock()
	log := p.out.String()
	if strings.Contains(log, "WARNING: DATA RACE") {
		t.Errorf("%s: data race\n%s", p.Name, log)
	} else if t.Failed() {
		if len(log) > 4000 {
			log = "…" + log[len(log)-4000:]
		}
		t.Logf("---- %s ----\n%s", p.Name, log)
	}
}

// defaultServers is the run's corner of the local services (Isolated:
// key prefix, exchange and queue; Database: a scratch database) with
// redisAddr, the run's own Redis.
func defaultServers(t *testing.T, redisAddr string) (Servers, *config.Config) {
	cfg := localstack.Isolated(t)
	cfg.MySQL.DSN = localstack.Database(t)
	cfg.Redis.Addrs = []string{redisAddr}
	return Servers{Redis: redisAddr, KeyPrefix: cfg.Redis.KeyPrefix, AMQPURL: cfg.AMQP.URL,
		Exchange: cfg.AMQP.Exchange, Queue: cfg.AMQP.Queue, MySQLDSN: cfg.MySQL.DSN}, cfg
}
