package bench

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The crowd loads of `make bench`'s waiting-room part: the traffic of a
// waiting room alone, without buys or checks, in closed loop from a fixed
// number of connections, for a fixed time. CrowdJoin sends distinct buyers'
// joins, CrowdPoll the polls of buyers already in the queue, each connection
// with a ticket of its own. Pointed at a server that is not flashgate
// (the bare ceiling), they send the same requests.

// CrowdOptions configure CrowdJoin and CrowdPoll.
type CrowdOptions struct {
	URL      string        // public base URL, http://host:port (required)
	Sale     string        // the sale whose queue is joined or polled (required)
	Conns    int           // connections, one request in flight on each; default 64
	Duration time.Duration // how long the load runs; default 5s
	Timeout  time.Duration // per request; default 5s
	// Prefix and Users: CrowdJoin joins the buyers Prefix+"0", Prefix+"1", …,
	// at most Users of them (default: as many as Duration allows), and
	// keeps the tickets of the first Keep.
	Prefix string
	Users  int
	Keep   int
	// JWTSecret, when set, signs a buyer token (HS256) for each request's
	// buyer, as Options.JWTSecret does for buys.
	JWTSecret   string
	AllowRemote bool
}

// CrowdResult is what one CrowdJoin or CrowdPoll measured.
type CrowdResult struct {
	Requests  int64
	Elapsed   time.Duration
	PerSecond float64 // Requests ÷ Elapsed
	P50, P99  time.Duration
	// Statuses counts the answers by their status field ("error": none).
	Statuses map[string]int64
	// Tickets are the tickets CrowdJoin got, by buyer number, for the first
	// Keep buyers ("" where none came).
	Tickets []string
}

// Only reports whether every answer had the status want.
func (r *CrowdResult) Only(want string) error {
	for s, n := range r.Statuses {
		if s != want && n > 0 {
			return fmt.Errorf("%d answers %s (want only %s)", n, s, want)
		}
	}
	if r.Statuses[want] == 0 {
		return fmt.Errorf("no answer %s", want)
	}
	return nil
}

func (o CrowdOptions) normalize() (CrowdOptions, *fasthttp.HostClient, error) {
	if o.Conns == 0 {
		o.Conns = 64
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Users == 0 {
		o.Users = maxRoomUsers
	}
	u, err := url.Parse(o.URL)
	switch {
	case err != nil || u.Scheme != "http" || u.Port() == "":
		return o, nil, fmt.Errorf("bench: %w: crowd url %q: want http://host:port", ErrOptions, o.URL)
	case !o.AllowRemote && !loopback(u.Hostname()):
		return o, nil, fmt.Errorf("bench: %w: crowd url %q is not this machine", ErrOptions, o.URL)
	case !saleRE.MatchString(o.Sale):
		return o, nil, fmt.Errorf("bench: %w: sale %q", ErrOptions, o.Sale)
	case o.Conns < 1 || o.Conns > 10000 || o.Users < 1 || o.Users > maxRoomUsers || o.Keep < 0 || o.Keep > o.Users ||
		o.Duration < 0 || o.Duration > time.Hour:
		return o, nil, fmt.Errorf("bench: %w: crowd conns %d, users %d, keep %d, duration %v", ErrOptions, o.Conns, o.Users, o.Keep, o.Duration)
	case o.JWTSecret != "" && len(o.JWTSecret) < 32:
		return o, nil, fmt.Errorf("bench: %w: jwt-secret: at least 32 bytes", ErrOptions)
	}
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: o.Conns, MaxConnWaitTimeout: o.Timeout, MaxIdemponentCallAttempts: 1,
		RetryIfErr:               func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		NoDefaultUserAgentHeader: true, MaxResponseBodySize: 64 << 10, ReadTimeout: o.Timeout, WriteTimeout: o.Timeout}
	return o, hc, nil
}

// crowdWorker is one connection's requests and what it counted.
type crowdWorker struct {
	req      fasthttp.Request
	resp     fasthttp.Response
	sig      *signer
	body     []byte
	hist     Histogram
	statuses map[string]int64
}

// crowd runs o.Conns workers, each set up by setup(w, i) (i the worker's
// number) and then calling send(w) in turn until o.Duration has passed,
// ctx is done or send says it is done, and merges what they counted.
func crowd(ctx context.Context, o CrowdOptions, hc *fasthttp.HostClient, setup func(w *crowdWorker, i int),
	send func(w *crowdWorker) bool) *CrowdResult {
	exp := time.Now().Add(o.Duration + time.Hour).Unix()
	workers := make([]*crowdWorker, o.Conns)
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		w := &crowdWorker{statuses: map[string]int64{}}
		if o.JWTSecret != "" {
			w.sig = newSigner(o.JWTSecret, exp)
		}
		setup(w, i)
		workers[i] = w
		wg.Go(func() {
			for !stop.Load() && send(w) {
			}
		})
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	t := time.NewTimer(o.Duration)
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-finished:
	}
	t.Stop()
	stop.Store(true)
	<-finished
	elapsed := time.Since(start)
	hc.CloseIdleConnections()
	res := &CrowdResult{Elapsed: elapsed, Statuses: map[string]int64{}}
	var h Histogram
	for _, w := range workers {
		h.Merge(&w.hist)
		for s, n := range w.statuses {
			res.Statuses[s] += n
		}
	}
	res.Requests = int64(h.Count())
	res.P50, res.P99 = h.Quantile(0.5), h.Quantile(0.99)
	if s := elapsed.Seconds(); s > 0 {
		res.PerSecond = float64(res.Requests) / s
	}
	return res
}

// do sends w.req, records its latency and status, and returns the
// answer's body (nil for none), valid until the next request.
func (w *crowdWorker) do(hc *fasthttp.HostClient, timeout time.Duration) []byte {
	t0 := time.Now()
	err := hc.DoTimeout(&w.req, &w.resp, timeout)
	w.hist.Record(time.Since(t0))
	if err != nil {
		w.statuses["error"]++
		return nil
	}
	body := w.resp.Body()
	w.statuses[string(jsonString(body, statusKey))]++
	return body
}

// CrowdPage loads the sale page of o.Sale (GET /s/{sale}) from o.Conns
// connections for o.Duration, as a crowd refreshing it would; each answer
// is counted by its HTTP code ("200", "304", …). It blocks for that long;
// its error is for unusable options only.
func CrowdPage(ctx context.Context, o CrowdOptions) (*CrowdResult, error) {
	o, hc, err := o.normalize()
	if err != nil {
		return nil, err
	}
	target := o.URL + "/s/" + o.Sale
	return crowd(ctx, o, hc, func(w *crowdWorker, _ int) {
		w.req.Header.SetMethod(fasthttp.MethodGet)
		w.req.SetRequestURI(target)
	}, func(w *crowdWorker) bool {
		t0 := time.Now()
		err := hc.DoTimeout(&w.req, &w.resp, o.Timeout)
		w.hist.Record(time.Since(t0))
		switch {
		case err != nil:
			w.statuses["error"]++
		case w.resp.StatusCode() == fasthttp.StatusOK:
			w.statuses["200"]++
		default:
			w.statuses[strconv.Itoa(w.resp.StatusCode())]++
		}
		return true
	}), nil
}

// CrowdJoin joins distinct buyers to the queue of o.Sale, from o.Conns
// connections, for o.Duration or until o.Users have joined. It blocks for
// that long; its error is for unusable options only (wrapping ErrOptions).
func CrowdJoin(ctx context.Context, o CrowdOptions) (*CrowdResult, error) {
	o, hc, err := o.normalize()
	if err != nil {
		return nil, err
	}
	target := o.URL + "/v1/sales/" + o.Sale + "/queue"
	var next atomic.Int64
	tickets := make([]string, o.Keep)
	var mu sync.Mutex
	res := crowd(ctx, o, hc, func(w *crowdWorker, _ int) {
		w.req.Header.SetMethod(fasthttp.MethodPost)
		w.req.SetRequestURI(target)
		w.req.Header.SetContentType("application/json")
	}, func(w *crowdWorker) bool {
		n := next.Add(1) - 1
		if n >= int64(o.Users) {
			return false
		}
		user := o.Prefix + strconv.FormatInt(n, 10)
		w.body = append(append(append(w.body[:0], `{"user_id":"`...), user...), `"}`...)
		w.req.SetBodyRaw(w.body)
		if w.sig != nil {
			w.req.Header.SetBytesV(fasthttp.HeaderAuthorization, w.sig.token(user))
		}
		body := w.do(hc, o.Timeout)
		if n < int64(o.Keep) {
			if t := jsonString(body, ticketKey); len(t) > 0 {
				mu.Lock()
				tickets[n] = string(t)
				mu.Unlock()
			}
		}
		return true
	})
	res.Tickets = tickets
	return res, nil
}

// CrowdPoll polls the queue of o.Sale from o.Conns connections for o.Duration:
// connection i with tickets[i], the ticket of buyer users[i] (whose token
// it carries with a JWTSecret). It needs a ticket per connection. It
// blocks for o.Duration; its error is for unusable options only (wrapping
// ErrOptions).
func CrowdPoll(ctx context.Context, o CrowdOptions, tickets, users []string) (*CrowdResult, error) {
	o, hc, err := o.normalize()
	if err != nil {
		return nil, err
	}
	if len(tickets) < o.Conns || len(users) < o.Conns {
		return nil, fmt.Errorf("bench: %w: %d tickets and %d buyers for %d connections", ErrOptions, len(tickets), len(users), o.Conns)
	}
	target := o.URL + "/v1/sales/" + o.Sale + "/queue"
	return crowd(ctx, o, hc, func(w *crowdWorker, i int) {
		w.req.Header.SetMethod(fasthttp.MethodGet)
		w.req.SetRequestURI(target)
		w.req.Header.Set(TicketHeader, tickets[i])
		if w.sig != nil {
			// One buyer per connection: the token is the same each time.
			w.req.Header.SetBytesV(fasthttp.HeaderAuthorization, w.sig.token(users[i]))
		}
	}, func(w *crowdWorker) bool {
		w.do(hc, o.Timeout)
		return true
	}), nil
}
