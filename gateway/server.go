// Package gateway is flashgate's HTTP edge: the public listener where buyers
// reserve units and poll orders, the admin listener where operators manage
// sales and scripts, and what it answers from memory before it asks the
// sale (package sale): parsing, buyer authentication, the closed-sale
// memory, admission. It makes no Redis call of its own.
package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/scripts"
)

// Deps are the parts a Server uses; the caller owns them, runs what runs
// (Sales.Run), and closes them.
type Deps struct {
	Log *zap.Logger
	// Sales is the sales' state in Redis: every buy, view and admin
	// change goes through it. Its Options.Timeout should be redis.timeout.
	Sales *sale.Store
	// Loader is the scripts in use (GET /admin/v1/scripts).
	Loader *scripts.Loader
	// Reload, when set, is called by POST /admin/v1/scripts/reload and
	// SIGHUP instead of Loader.Load (the process wires its audit around it).
	Reload func(ctx context.Context, who string) ([]scripts.Script, error)
	// Metrics, when set, writes the series of the process's other parts
	// (sales, relay, expiry, Go runtime, process) after the gateway's own
	// on GET /metrics.
	Metrics func(w io.Writer)
}

// Server serves the public and admin listeners. Create it with New, run it
// with Run; it is safe for concurrent use.
type Server struct {
	cfg      *config.Config
	log      *zap.Logger
	sales    *sale.Store
	closed   *closedSales
	rooms    *rooms
	limits   *rateLimits
	loader   *scripts.Loader
	reload   func(ctx context.Context, who string) ([]scripts.Script, error)
	metrics  *gatewayMetrics
	extra    func(w io.Writer)
	auth     *buyerAuth // nil: buyer authentication is off
	cors     *cors      // nil: no origin is allowed
	pages    *salePages
	token    []byte
	maxBody  int
	timeout  time.Duration
	draining atomic.Bool

	public, admin     *fasthttp.Server
	publicLn, adminLn *limitedListener
	nofile            uint64 // the open-file limit the caps were derived from; 0: unlimited
	closeOnce         sync.Once
}

// New validates its inputs and binds both listeners (so that Addr and
// AdminAddr are known at once, also for ":0"); it serves nothing until Run.
func New(cfg *config.Config, deps Deps) (*Server, error) {
	if deps.Log == nil || deps.Sales == nil || deps.Loader == nil {
		return nil, errors.New("gateway: Log, Sales and Loader are required")
	}
	var auth *buyerAuth
	if cfg.Buyer.On() {
		var err error
		if auth, err = newBuyerAuth(cfg.Buyer); err != nil {
			return nil, fmt.Errorf("gateway: buyer authentication: %w", err)
		}
	}
	pages, err := newSalePages(cfg.HTTP.PageTemplate)
	if err != nil {
		return nil, fmt.Errorf("gateway: sale page: %w", err)
	}
	s := &Server{
		cfg:     cfg,
		cors:    newCORS(cfg.HTTP.CORSOrigins),
		pages:   pages,
		log:     deps.Log,
		sales:   deps.Sales,
		loader:  deps.Loader,
		closed:  newClosedSales(cfg.Cache.ClosedTTL),
		limits:  newRateLimits(cfg.Admission.Rate, cfg.Admission.Burst),
		reload:  deps.Reload,
		extra:   deps.Metrics,
		auth:    auth,
		token:   []byte(cfg.Admin.Token),
		maxBody: cfg.HTTP.MaxBodyBytes,
		timeout: cfg.Redis.Timeout,
	}
	s.rooms = newRooms(s.sales.RoomOf, s.sales.Room, s.timeout, s.log)
	s.metrics = newGatewayMetrics(s)
	if s.reload == nil {
		s.reload = func(ctx context.Context, _ string) ([]scripts.Script, error) { return s.loader.Load(ctx) }
	}
	publicCap, adminCap := s.deriveConnCaps()
	s.public = s.newHTTPServer("public", s.servePublic, s.servePublicError, publicCap)
	s.admin = s.newHTTPServer("admin", s.serveAdmin, s.serveError, adminCap)
	pub, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("gateway: public listener: %w", err)
	}
	adm, err := net.Listen("tcp", cfg.Admin.Addr)
	if err != nil {
		pub.Close()
		return nil, fmt.Errorf("gateway: admin listener: %w", err)
	}
	s.publicLn = newLimitedListener(pub, "public", publicCap, cfg.HTTP.MaxConnsPerIP, s.log)
	// The admin listener is private: no per-client limit, the few clients
	// there are (operators, Prometheus) share its cap.
	s.adminLn = newLimitedListener(adm, "admin", adminCap, 0, s.log)
	s.metrics.set.RegisterMetricsWriter(func(w io.Writer) { writeConnMetrics(w, s.publicLn, s.adminLn) })
	return s, nil
}

// deriveConnCaps raises the open-file limit and works out both listeners' caps
// from it, so that a flood of connections is refused in JSON by the
// listener before the process runs out of descriptors. An http.max_conns
// above what the limit allows is lowered to it.
func (s *Server) deriveConnCaps() (public, admin int) {
	nofile := raiseOpenFileLimit()
	nodes := len(s.cfg.Redis.Addrs)
	// A pool per node, and a pub/sub connection for the sale announcements.
	public, admin = connCaps(nofile, nodes*s.cfg.Redis.PoolSize+nodes)
	if c := s.cfg.HTTP.MaxConns; c > public {
		s.log.Warn("http.max_conns is above what the open-file limit allows; lowered (raise the hard limit, e.g. LimitNOFILE in systemd)",
			zap.Int("configured", c), zap.Int("used", public), zap.Uint64("open_file_limit", nofile))
	} else if c > 0 {
		public = c
	}
	s.nofile = nofile
	return public, admin
}

// newHTTPServer builds one listener's fasthttp server. Every answer
// fasthttp writes on its own goes through serveError, so that it is the
// contract's JSON: refusing a connection is the listener's job, and the
// hooks with which fasthttp would answer by itself (ContinueHandler and
// ExpectHandler: a bare 417) stay unset. Its Concurrency is only a backstop,
// set well above the listener's cap: the listener admits at most maxConns
// connections, but a worker may still be on its way back to fasthttp's
// pool after its connection closed, and fasthttp's refusal is text/plain.
func (s *Server) newHTTPServer(name string, h fasthttp.RequestHandler, onError func(*fasthttp.RequestCtx, error), maxConns int) *fasthttp.Server {
	c := s.cfg.HTTP
	return &fasthttp.Server{
		Name:                          "flashgate",
		Handler:                       h,
		ErrorHandler:                  onError,
		ReadTimeout:                   c.ReadTimeout,
		WriteTimeout:                  c.WriteTimeout,
		IdleTimeout:                   c.IdleTimeout,
		MaxRequestBodySize:            c.MaxBodyBytes,
		ReadBufferSize:                c.MaxHeaderSize,
		Concurrency:                   maxConns + max(maxConns, 1024),
		CloseOnShutdown:               true,
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisablePreParseMultipartForm:  true,
		SecureErrorLogMessage:         true,
		Logger:                        connLogger{s.log.Named(name)},
		ReduceMemoryUsage:             false,
		DisableHeaderNamesNormalizing: false,
	}
}

// Addr is the public listener's address.
func (s *Server) Addr() string { return s.publicLn.Addr().String() }

// AdminAddr is the admin listener's address.
func (s *Server) AdminAddr() string { return s.adminLn.Addr().String() }

// Draining reports whether shutdown has begun.
func (s *Server) Draining() bool { return s.draining.Load() }

// Run serves both listeners until ctx is done, then drains: /readyz fails at
// once, requests are served as usual for the drain delay so that the load
// balancer can notice, then the listeners close and requests in flight finish,
// all within the shutdown timeout. It returns nil after a clean drain, or the
// first error of a listener.
func (s *Server) Run(ctx context.Context) error {
	// The announcements feed the closed-sale memory and the rooms' while
	// the gateway runs, draining included; the rooms are read again meanwhile.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var watching sync.WaitGroup
	watching.Add(2)
	go func() {
		defer watching.Done()
		s.sales.Listen(watchCtx, listeners{s.closed, s.rooms, &s.pages.known})
	}()
	go func() {
		defer watching.Done()
		s.rooms.Run(watchCtx)
	}()
	defer func() {
		stopWatch()
		watching.Wait()
	}()
	errc := make(chan error, 2)
	go func() { errc <- s.public.Serve(s.publicLn) }()
	go func() { errc <- s.admin.Serve(s.adminLn) }()
	s.log.Info("listening", zap.String("public", s.Addr()), zap.String("admin", s.AdminAddr()),
		zap.Int64("max_conns", s.publicLn.max), zap.Int("max_conns_per_ip", s.publicLn.perIP),
		zap.Int64("admin_max_conns", s.adminLn.max), zap.Uint64("open_file_limit", s.nofile))

	select {
	case err := <-errc:
		s.Close()
		<-errc
		return fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
	}
	deadline := time.Now().Add(s.cfg.Shutdown.Timeout)
	s.draining.Store(true)
	s.log.Info("draining", zap.Duration("delay", s.cfg.Shutdown.DrainDelay))
	t := time.NewTimer(s.cfg.Shutdown.DrainDelay)
	select {
	case <-t.C:
	case err := <-errc:
		t.Stop()
		s.Close()
		<-errc
		return fmt.Errorf("gateway: %w", err)
	}
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	err := errors.Join(s.public.ShutdownWithContext(sctx), s.admin.ShutdownWithContext(sctx))
	// A Serve that had not yet started when Shutdown ran (fasthttp then has
	// no listener to close) must still end: close the listeners ourselves.
	s.Close()
	<-errc
	<-errc
	if err != nil {
		return fmt.Errorf("gateway: shutdown: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// Close closes the listeners at once, without draining. Safe to call twice.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.publicLn.Close()
		s.adminLn.Close()
	})
}

// serveError answers what fasthttp itself refused: a body over the limit,
// oversized headers, a malformed request line.
// servePublicError is serveError with the public listener's CORS headers.
func (s *Server) servePublicError(ctx *fasthttp.RequestCtx, err error) {
	s.cors.answer(ctx)
	s.serveError(ctx, err)
}

func (s *Server) serveError(ctx *fasthttp.RequestCtx, err error) {
	var sizeErr *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		write(ctx, replyTooLarge)
	case errors.As(err, &sizeErr):
		write(ctx, fixed(431, "bad_request"))
	case errors.As(err, &netErr) && netErr.Timeout():
		// A client that opened a connection and sent nothing (or too slowly)
		// within http.read_timeout: not a malformed request.
		write(ctx, fixed(408, "request_timeout"))
	default:
		write(ctx, badRequest("malformed HTTP request"))
	}
	ctx.SetConnectionClose()
}

// write sends a reply and returns its status.
func write(ctx *fasthttp.RequestCtx, r reply) string {
	ctx.SetStatusCode(r.code)
	ctx.Response.Header.SetContentTypeBytes(jsonType)
	ctx.Response.SetBodyRaw(r.body)
	return r.status
}

var jsonType = []byte("application/json")

// authorized checks the bearer token in constant time. With no token
// configured (the admin listener is then loopback only) every request is.
// The credentials are read as sent (wireHeader): two Authorization fields
// are ambiguous, and a token with white space after it or folded over
// lines is not the token, though fasthttp's parsed value would trim or
// join it to one. A bearer token is visible ASCII: a credential with any
// other byte is refused before the compare, so that a configured token of
// spaces or controls matches nothing.
func (s *Server) authorized(ctx *fasthttp.RequestCtx) bool {
	if len(s.token) == 0 {
		return true
	}
	h, ok := wireHeader(&ctx.Request.Header, "Authorization")
	const prefix = "Bearer "
	if !ok || len(h) <= len(prefix) || string(h[:len(prefix)]) != prefix || !visibleASCII(h[len(prefix):]) {
		return false
	}
	return subtle.ConstantTimeCompare(h[len(prefix):], s.token) == 1
}

// redisCtx bounds one request's Redis work by redis.timeout.
func (s *Server) redisCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// remote names the caller of an admin request in the audit log.
func remote(ctx *fasthttp.RequestCtx) string { return ctx.RemoteAddr().String() }

// connLogger sends fasthttp's per-connection messages (a client that went
// away, a body over the limit) to debug level: at info they would flood the
// log under exactly the load this server is for.
type connLogger struct{ log *zap.Logger }

func (l connLogger) Printf(format string, args ...any) {
	if ce := l.log.Check(zap.DebugLevel, "connection"); ce != nil {
		ce.Write(zap.String("detail", fmt.Sprintf(format, args...)))
	}
}
