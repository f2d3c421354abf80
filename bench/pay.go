package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	adminapi "github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb/salerows"
)

// The payment phase of a run on a sale with a payment window (API.md,
// "Orders and payment"): once the load has stopped, the shop's payment
// system is played by the bench, which pays a fraction of the accepted
// orders through the admin API and leaves the others to expire; then it
// waits until the window plus expiryGrace has passed since the last 202,
// when no order may still await payment, and checks what Redis and MySQL
// made of it.

const (
	// payConns is how many pay calls are in flight at once.
	payConns = 16
	// expiryGrace is API.md's bound: an unpaid order is expired at most
	// 2 s after its pay_by.
	expiryGrace = 2 * time.Second
	// lagMetric is the gateway's histogram of how late its sweeper
	// expired each order (sweep time − pay_by).
	lagMetric = "flashgate_sweep_lag_seconds"
)

// payment is one run's payment phase; nil for a sale without a window,
// and then every method does nothing.
type payment struct {
	o    Options
	adm  *admin
	lag0 *lagHistogram // the gateway's sweep lag before the load; nil if unread

	paid     map[string]struct{} // orders the API answered paid
	expired  int64               // pays answered 409 order_expired
	errors   int64               // pays answered otherwise, or not at all
	sent     int64
	firstErr string
	waited   bool
}

// newPayment returns the payment phase of a run with o, or nil when the
// sale has no payment window. It reads the gateway's sweep lag histogram,
// so that the report shows the lag of this run's expiries only.
func newPayment(ctx context.Context, o Options, adm *admin) *payment {
	if o.PaymentWindow == 0 || adm == nil {
		return nil
	}
	p := &payment{o: o, adm: adm, paid: map[string]struct{}{}}
	p.lag0, _ = adm.sweepLag(ctx)
	return p
}

// run pays, waits, and fills the payment figures of f and the report's
// payment lines. ctx is the run's (an interrupt skips what is left);
// post is bounded work that must happen anyway.
func (p *payment) run(ctx, post context.Context, l *load, rep *Report, f *Figures) {
	if p == nil {
		return
	}
	f.Payment = true
	rep.PaymentWindow, rep.PayRatio = p.o.PaymentWindow, p.o.PayRatio
	if ctx.Err() != nil {
		rep.Notes = append(rep.Notes, "interrupted: no order paid, no wait for the window")
		return
	}
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range l.ledger.ids() {
			if !yield(id) {
				return
			}
		}
	})
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	pctx, cancel := context.WithTimeout(post, 2*time.Minute)
	p.pay(pctx, ids[:int(math.Round(p.o.PayRatio*float64(len(ids))))])
	cancel()
	f.PaysSent, f.PaysPaid, f.PaysExpired, f.PayErrors = p.sent, int64(len(p.paid)), p.expired, p.errors
	f.PaidUnits, f.PaidOverLimit = l.ledger.paid(p.paid, p.o.Limit)
	if p.firstErr != "" {
		rep.Notes = append(rep.Notes, "first failed pay: "+p.firstErr)
	}

	// Every pay_by is at most the window after the last 202 (Redis took
	// the time before it answered), so this is past every pay_by + 2 s.
	last := l.start
	if n := l.lastAccept.Load(); n > 0 {
		last = last.Add(time.Duration(n - 1))
	}
	wait := time.Until(last.Add(time.Duration(p.o.PaymentWindow)*time.Second + expiryGrace))
	t := time.NewTimer(max(wait, 0))
	defer t.Stop()
	select {
	case <-t.C:
		p.waited = true
	case <-ctx.Done():
		rep.Notes = append(rep.Notes, "interrupted before the payment window had passed: the expiry is not checked")
	}
	f.Waited = p.waited
	if p.lag0 != nil {
		lctx, cancel := context.WithTimeout(post, 5*time.Second)
		if lag1, err := p.adm.sweepLag(lctx); err == nil {
			rep.SweepLag = lag1.since(p.lag0)
		}
		cancel()
	}
}

// pay pays every order of ids, payConns at a time. A pay that got no
// answer is sent once more (pay is idempotent); its second outcome counts.
func (p *payment) pay(ctx context.Context, ids []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan string)
	for range payConns {
		wg.Go(func() {
			for id := range next {
				o, err := p.adm.c.Pay(ctx, p.o.Sale, id)
				if _, answered := errors.AsType[*adminapi.APIError](err); err != nil && !answered && ctx.Err() == nil {
					o, err = p.adm.c.Pay(ctx, p.o.Sale, id)
				}
				ae, answered := errors.AsType[*adminapi.APIError](err)
				mu.Lock()
				p.sent++
				switch {
				case err == nil && o.State == order.StatePaid:
					p.paid[id] = struct{}{}
				case answered && ae.Code == http.StatusConflict && ae.Status == "order_expired":
					p.expired++
				default:
					p.errors++
					if p.firstErr == "" {
						if err == nil {
							err = fmt.Errorf("order %s: answered state %q", id, o.State)
						}
						p.firstErr = err.Error()
					}
				}
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
}

// mysql waits, up to wait, until MySQL's state of every accepted order is
// the one it ended in (paid if the API said so, else expired), and fills
// the MySQL payment figures of f. It also counts the users over the limit
// again on the rows that hold units, since a buyer whose order expired may
// have bought again.
func (p *payment) mysql(ctx context.Context, d *orderDB, accepted map[string]struct{}, wait time.Duration, f *Figures) error {
	if p == nil {
		return nil
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-2*time.Second).Before(deadline) {
		deadline = d.Add(-2 * time.Second) // room for the last read
	}
	for {
		wrong, err := p.mysqlStates(ctx, d, accepted, f)
		if err != nil || wrong == 0 || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *payment) mysqlStates(ctx context.Context, d *orderDB, accepted map[string]struct{}, f *Figures) (int64, error) {
	rows, err := salerows.Read(ctx, d.db, p.o.Sale)
	if err != nil {
		return 0, err
	}
	var wrong, live int64
	perUser := map[string]int64{}
	seen := 0
	for _, r := range rows {
		if order.Live(r.State) {
			live += r.Quantity
			perUser[r.UserID] += r.Quantity
		}
		if _, ok := accepted[r.OrderID]; !ok {
			continue
		}
		seen++
		want := order.StateExpired
		if _, ok := p.paid[r.OrderID]; ok {
			want = order.StatePaid
		}
		if r.State != want {
			wrong++
		}
	}
	wrong += int64(len(accepted) - seen) // not in MySQL at all
	var over int64
	for _, n := range perUser {
		if n > p.o.Limit {
			over++
		}
	}
	f.MySQLStateWrong, f.MySQLLiveUnits, f.MySQLUsersOverLimit = wrong, live, over
	return wrong, nil
}

// SweepLag is how late the gateway's sweeper expired the orders of the run,
// from its flashgate_sweep_lag_seconds histogram (one gateway's: the one
// at the admin URL; other gateways sweep too). Bounds are bucket bounds:
// "at most".
type SweepLag struct {
	Expired int64         `json:"expired"`
	Mean    time.Duration `json:"mean_ns"`
	P50     time.Duration `json:"p50_le_ns"` // -1: above the last bucket
	P99     time.Duration `json:"p99_le_ns"`
	Max     time.Duration `json:"max_le_ns"`
}

// lagHistogram is a Prometheus histogram as /metrics writes it: bucket
// bound → cumulative count.
type lagHistogram struct {
	buckets    map[float64]float64
	sum, count float64
	present    bool // the gateway's /metrics has the histogram
}

// sweepLag reads the gateway's sweep lag histogram from /metrics on the
// admin listener (no token needed); one not there is empty.
func (a *admin) sweepLag(ctx context.Context) (*lagHistogram, error) {
	if a.err != nil {
		return nil, a.err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.c.BaseURL()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", res.Status)
	}
	h := &lagHistogram{buckets: map[float64]float64{}}
	found := false
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, lagMetric) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch rest := strings.TrimPrefix(name, lagMetric); {
		case rest == "_sum":
			h.sum, found = v, true
		case rest == "_count":
			h.count, found = v, true
		case strings.HasPrefix(rest, `_bucket{le="`) && strings.HasSuffix(rest, `"}`):
			le := strings.TrimSuffix(strings.TrimPrefix(rest, `_bucket{le="`), `"}`)
			b, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
			if err == nil {
				h.buckets[b], found = v, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found {
		// A histogram with no sample yet may not be written at all.
		return &lagHistogram{buckets: map[float64]float64{}}, nil
	}
	h.present = true
	return h, nil
}

// since returns the lag of what was expired between before and h, nil
// when the gateway has no such histogram.
func (h *lagHistogram) since(before *lagHistogram) *SweepLag {
	if !h.present {
		return nil
	}
	n := h.count - before.count
	if n <= 0 {
		return &SweepLag{}
	}
	les := slices.Sorted(func(yield func(float64) bool) {
		for le := range h.buckets {
			if !yield(le) {
				return
			}
		}
	})
	at := func(q float64) time.Duration {
		for _, le := range les {
			if h.buckets[le]-before.buckets[le] >= q*n {
				if math.IsInf(le, 1) {
					return -1
				}
				return time.Duration(le * float64(time.Second))
			}
		}
		return -1
	}
	return &SweepLag{Expired: int64(n), Mean: time.Duration((h.sum - before.sum) / n * float64(time.Second)),
		P50: at(0.5), P99: at(0.99), Max: at(1)}
}
