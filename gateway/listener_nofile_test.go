package gateway

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
)

// The listeners and the open-file limit, without a process of their own:
// the connection caps derived from it, and the accept loop's retry when a
// lack of descriptors fails an accept (listener_emfile_test.go runs a
// gateway process at the limit).

func TestConnCaps(t *testing.T) {
	tests := []struct {
		name          string
		nofile        uint64
		redis         int
		public, admin int
	}{
		{name: "ulimit 1024", nofile: 1024, redis: 65, public: 728, admin: 103},
		{name: "ulimit 256", nofile: 256, redis: 65, public: 47, admin: 16},
		{name: "limit below the reserve", nofile: 64, redis: 65, public: minConns, admin: minConns},
		{name: "large limit", nofile: 1 << 20, redis: 65, public: 1<<20 - fdReserve - 65 - maxAdminConns, admin: maxAdminConns},
		{name: "unlimited", nofile: 0, redis: 65, public: 1<<20 - fdReserve - 65 - maxAdminConns, admin: maxAdminConns},
		{name: "above the derived ceiling", nofile: 1 << 40, redis: 0, public: 1<<20 - fdReserve - maxAdminConns, admin: maxAdminConns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			public, admin := connCaps(tt.nofile, tt.redis)
			if public != tt.public || admin != tt.admin {
				t.Errorf("connCaps(%d, %d) = %d, %d; want %d, %d", tt.nofile, tt.redis, public, admin, tt.public, tt.admin)
			}
			if n := tt.nofile; n > fdReserve+uint64(tt.redis)+2*minConns && uint64(public+admin+fdReserve+tt.redis) > n {
				t.Errorf("both listeners full need %d descriptors, more than the limit %d", public+admin+fdReserve+tt.redis, n)
			}
		})
	}
}

// A configured http.max_conns above what the open-file limit allows is
// lowered to the derived cap; one below it is kept.
func TestMaxConnsClampedToOpenFileLimit(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// A pool per Redis node, and the announcements' connection: the
	// gateway's reserve of descriptors for Redis (Server.deriveConnCaps).
	nodes := len(localstack.RedisAddrs)
	derived, _ := connCaps(lim.Max, nodes*config.Default().Redis.PoolSize+nodes)
	g := startGateway(t, func(c *config.Config) { c.HTTP.MaxConns = 10_000_000 })
	if got := g.srv.publicLn.max; got != int64(derived) {
		t.Errorf("max_conns 10000000 under an open-file limit of %d: cap %d, want %d", lim.Max, got, derived)
	}
	g = startGateway(t, func(c *config.Config) { c.HTTP.MaxConns = 100 })
	if got := g.srv.publicLn.max; got != 100 {
		t.Errorf("max_conns 100: cap %d", got)
	}
}

// fakeListener fails Accept with errs, one per call, then accepts for real.
type fakeListener struct {
	net.Listener
	errs []error
}

func (f *fakeListener) Accept() (net.Conn, error) {
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	return f.Listener.Accept()
}

// Accept retries what a lack of resources fails with, and returns what a
// closed listener does.
func TestAcceptRetriesResourceErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opErr := func(e error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	fake := &fakeListener{Listener: ln, errs: []error{opErr(syscall.EMFILE), opErr(syscall.ENFILE), opErr(syscall.ENOBUFS), opErr(syscall.ENOMEM)}}
	l := newLimitedListener(fake, "test", 10, 0, zap.NewNop())
	defer l.Close()
	c := dialFrom(t, "", ln.Addr().String())
	defer c.Close()
	got, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept after EMFILE, ENFILE, ENOBUFS, ENOMEM: %v", err)
	}
	got.Close()
	if n := l.acceptRetries.Load(); n != 4 {
		t.Errorf("%d retries, want 4", n)
	}

	// A Close while Accept backs off ends it, with the error fasthttp's
	// Serve takes for a clean stop.
	fake.errs = []error{opErr(syscall.EMFILE)}
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	for l.acceptRetries.Load() < 5 {
		time.Sleep(time.Millisecond)
	}
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}
