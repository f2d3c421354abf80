package gateway

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/promtext"
	"github.com/flashgate/flashgate/retry"
)

// limitedListener is what fasthttp's Serve accepts from. It adds what Serve
// lacks against hostile clients:
//
//   - Accept survives running out of file descriptors (EMFILE, ENFILE) and
//     kernel memory: it backs off and retries, as net/http's Server does,
//     instead of returning the error, on which Serve (and with it the
//     process) would stop. The connection waits in the kernel's backlog
//     meanwhile.
//   - It caps the connections open at once, and those of one client
//     address, and answers one over a cap itself with a complete JSON
//     response of the contract (fasthttp's own refusal is text/plain).
//
// It is safe for concurrent use, and so are its connections' Close.
type limitedListener struct {
	net.Listener
	name  string
	max   int64 // open connections at once
	perIP int   // per client address; 0: off
	log   *zap.Logger

	open atomic.Int64
	mu   sync.Mutex
	byIP map[netip.Addr]int // guarded by mu; nil when perIP is 0

	refusedFull, refusedIP, acceptRetries atomic.Uint64
	fullLog, ipLog, acceptLog             rateLog

	ctx    context.Context // ends at Close, cutting a backoff short
	cancel context.CancelFunc
	once   sync.Once
	err    error
}

var (
	_ net.Listener = (*limitedListener)(nil)
	_ net.Conn     = (*limitedConn)(nil)
)

func newLimitedListener(ln net.Listener, name string, maxConns, perIP int, log *zap.Logger) *limitedListener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &limitedListener{Listener: ln, name: name, max: int64(maxConns), perIP: perIP, log: log, ctx: ctx, cancel: cancel}
	if perIP > 0 {
		l.byIP = map[netip.Addr]int{}
	}
	return l
}

// Accept returns the next connection within the caps. It blocks until one
// arrives; it returns an error only when the listener is closed (or on an
// error no retry can fix), never for a lack of descriptors.
func (l *limitedListener) Accept() (net.Conn, error) {
	// From net/http's Server.Serve: 5ms doubling to 1s.
	backoff := retry.Backoff{Min: 5 * time.Millisecond, Max: time.Second}
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if l.ctx.Err() != nil || !retryableAccept(err) {
				return nil, err
			}
			d := backoff.Next()
			l.acceptRetries.Add(1)
			if n, ok := l.acceptLog.due(); ok {
				l.log.Warn("accept failed; retrying (raise the open-file limit or lower http.max_conns)",
					zap.String("listener", l.name), zap.Error(err), zap.Duration("in", d), zap.Uint64("failures_since_last_log", n))
			}
			if !retry.Sleep(l.ctx, d) {
				// fasthttp's Serve ends cleanly on this error's text.
				return nil, net.ErrClosed
			}
			continue
		}
		backoff.Reset()
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// retryableAccept tells a lack of resources, which passes, from a closed
// listener. Go's poller already retries ECONNABORTED and EINTR itself.
func retryableAccept(err error) bool {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// admit counts c in, or refuses it and returns nil. A client over its own
// limit is told so (429) whatever the total, since it is its own doing.
func (l *limitedListener) admit(c net.Conn) *limitedConn {
	key := clientKey(c.RemoteAddr())
	if l.perIP > 0 {
		l.mu.Lock()
		n := l.byIP[key]
		if n >= l.perIP {
			l.mu.Unlock()
			l.refusedIP.Add(1)
			if n, ok := l.ipLog.due(); ok {
				l.log.Warn("connection refused: client over http.max_conns_per_ip", zap.String("listener", l.name),
					zap.String("client", key.String()), zap.Int("limit", l.perIP), zap.Uint64("refused_since_last_log", n))
			}
			refuse(c, 429, "rate_limited")
			return nil
		}
		l.byIP[key] = n + 1
		l.mu.Unlock()
	}
	if l.open.Add(1) > l.max {
		l.open.Add(-1)
		l.releaseIP(key)
		l.refusedFull.Add(1)
		if n, ok := l.fullLog.due(); ok {
			l.log.Warn("connection refused: listener at its connection cap", zap.String("listener", l.name),
				zap.Int64("limit", l.max), zap.Uint64("refused_since_last_log", n))
		}
		refuse(c, 503, "unavailable")
		return nil
	}
	return &limitedConn{Conn: c, l: l, key: key}
}

func (l *limitedListener) release(key netip.Addr) {
	l.open.Add(-1)
	l.releaseIP(key)
}

func (l *limitedListener) releaseIP(key netip.Addr) {
	if l.perIP == 0 {
		return
	}
	l.mu.Lock()
	if n := l.byIP[key] - 1; n > 0 {
		l.byIP[key] = n
	} else {
		delete(l.byIP, key) // the map holds only clients that are connected
	}
	l.mu.Unlock()
}

// Close closes the listener and ends a pending backoff. Safe to call twice;
// the second call returns the first's error.
func (l *limitedListener) Close() error {
	l.once.Do(func() {
		l.cancel()
		l.err = l.Listener.Close()
	})
	return l.err
}

// clientKey is what the per-client limit counts by: the peer's IPv4
// address, or the /64 of its IPv6 address (one host or subscriber usually
// holds a whole /64, so counting single addresses would not bind it).
func clientKey(a net.Addr) netip.Addr {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := ta.AddrPort().Addr().Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}

// refuseWriteTimeout bounds the one write of a refusal, which runs on the
// accept loop: a fresh connection's send buffer takes it at once, and a
// client that does not read must not hold up everyone else's accepts.
const refuseWriteTimeout = 100 * time.Millisecond

// refuse answers c with a complete response of the contract and closes it.
// The answer goes out without reading the request: what is refused is the
// connection, whatever it would have asked.
func refuse(c net.Conn, code int, status string) {
	b := make([]byte, 0, 256)
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	if code == 429 {
		b = append(b, " Too Many Requests"...)
	} else {
		b = append(b, " Service Unavailable"...)
	}
	b = append(b, "\r\nServer: flashgate\r\nDate: "...)
	b = time.Now().UTC().AppendFormat(b, "Mon, 02 Jan 2006 15:04:05 GMT") // net/http's TimeFormat
	b = append(b, "\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: "...)
	body := `{"status":"` + status + `"}`
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	_, _ = c.Write(b) // a client gone already needs no answer
	_ = c.Close()
}

// writeConnMetrics writes the listeners' connection figures, one family at
// a time (a family's # TYPE line may appear only once in a scrape).
func writeConnMetrics(w io.Writer, ls ...*limitedListener) {
	b := make([]byte, 0, 1024)
	family := func(name, typ string, series func(l *limitedListener, line func(labels string, v uint64))) {
		b = promtext.AppendMetadata(b, name, typ)
		for _, l := range ls {
			series(l, func(labels string, v uint64) {
				b = append(b, name+`{listener="`+l.name+`"`+labels+`} `...)
				b = strconv.AppendUint(b, v, 10)
				b = append(b, '\n')
			})
		}
	}
	family("flashgate_http_connections", "gauge", func(l *limitedListener, line func(string, uint64)) {
		line("", uint64(max(l.open.Load(), 0)))
	})
	family("flashgate_http_connections_max", "gauge", func(l *limitedListener, line func(string, uint64)) {
		line("", uint64(l.max))
	})
	family("flashgate_http_connections_refused_total", "counter", func(l *limitedListener, line func(string, uint64)) {
		line(`,reason="max_conns"`, l.refusedFull.Load())
		line(`,reason="max_conns_per_ip"`, l.refusedIP.Load())
	})
	family("flashgate_http_accept_retries_total", "counter", func(l *limitedListener, line func(string, uint64)) {
		line("", l.acceptRetries.Load())
	})
	_, _ = w.Write(b)
}

// limitedConn gives its slot back when it is closed (fasthttp may close a
// connection twice: on shutdown and when its goroutine ends).
type limitedConn struct {
	net.Conn
	l      *limitedListener
	key    netip.Addr
	closed atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.key)
	}
	return err
}

// rateLog lets a warning through at most once per logEvery, counting the
// occurrences it held back: a flood must not flood the log as well.
type rateLog struct {
	last       atomic.Int64 // UnixNano of the last line
	suppressed atomic.Uint64
}

const logEvery = 10 * time.Second

// due reports whether to log now, and how many occurrences were held back
// since the last line (this one included).
func (r *rateLog) due() (uint64, bool) {
	r.suppressed.Add(1)
	now := time.Now().UnixNano()
	last := r.last.Load()
	if last != 0 && now-last < int64(logEvery) {
		return 0, false
	}
	if !r.last.CompareAndSwap(last, now) {
		return 0, false // another goroutine logs this round
	}
	return r.suppressed.Swap(0), true
}

// File descriptors the process needs besides its clients' connections:
// listeners, the poller, standard streams and log files, the RabbitMQ
// connection of the relay, DNS lookups, a refused connection being answered.
const fdReserve = 128

// Bounds of the derived caps. A cap below minConns would refuse a handful
// of buyers; above maxDerivedConns (an unlimited open-file limit) a
// connection's memory, not its descriptor, is what runs out.
const (
	minConns        = 16
	maxAdminConns   = 1024
	maxDerivedConns = 1 << 20
)

// connCaps derives the listeners' connection caps from the open-file limit
// nofile (0: unknown, taken as unlimited), less fdReserve and redisConns:
// the admin listener gets an eighth of what is left (16 to 1024), the
// public listener the rest, so that both full still fit within the limit.
func connCaps(nofile uint64, redisConns int) (public, admin int) {
	if nofile == 0 || nofile > maxDerivedConns {
		nofile = maxDerivedConns
	}
	budget := int(nofile) - fdReserve - redisConns
	admin = min(max(budget/8, minConns), maxAdminConns)
	public = min(max(budget-admin, minConns), maxDerivedConns)
	return public, admin
}

// raiseOpenFileLimit raises the soft RLIMIT_NOFILE to the hard limit (the
// Go runtime already takes it to one below) and returns the soft limit in
// force, or 0 when it cannot be read. A lower limit than the hard one only
// makes a flood of connections run the process out of descriptors sooner.
func raiseOpenFileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want) == nil {
			lim = want
		}
	}
	if lim.Cur == math.MaxUint64 { // RLIM_INFINITY
		return 0
	}
	return lim.Cur
}
