package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	adminapi "github.com/flashgate/flashgate/admin"
)

// admin is the bench's side of the admin API (and of /readyz): a handful of
// calls per run through the admin package's client, with its error turned
// into the bench's own outcomes.
type admin struct {
	public string
	hc     *http.Client
	c      *adminapi.Client
	err    error // from adminapi.New; the URLs are checked by normalize, so never expected
}

func newAdmin(o Options) *admin {
	hc := &http.Client{
		Timeout: 10 * time.Second,
		// Never follow a redirect to somewhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		// One connection per pay call in flight (pay.go); a handful of
		// other calls per run.
		Transport: &http.Transport{MaxIdleConnsPerHost: payConns, IdleConnTimeout: 30 * time.Second, DisableCompression: true},
	}
	c, err := adminapi.New(o.AdminURL, o.Token, adminapi.WithHTTPClient(hc))
	return &admin{public: o.URL, hc: hc, c: c, err: err}
}

func (a *admin) close() { a.hc.CloseIdleConnections() }

// ready checks that the gateway answers and says it is ready.
func (a *admin) ready(ctx context.Context) error {
	if _, err := adminapi.Ready(ctx, a.public+"/readyz", adminapi.WithHTTPClient(a.hc)); err != nil {
		if _, ok := errors.AsType[*adminapi.APIError](err); ok {
			return fmt.Errorf("bench: gateway at %s is not ready: %w", a.public, err)
		}
		return fmt.Errorf("bench: gateway at %s: %w", a.public, err)
	}
	return nil
}

// createSale creates the sale of o: its stock and limit, with a payment
// window of o.PaymentWindow seconds (0: none), its stock in o.Buckets
// Redis slots, and o's waiting room, if any, opening at startsAt (nil: at
// once). It refuses a sale that exists already, so that the checks see
// this run's orders only and no live sale is modified. It returns the
// sale as the API answered it.
func (a *admin) createSale(ctx context.Context, o Options, startsAt *time.Time) (*adminapi.Sale, error) {
	if a.err != nil {
		return nil, a.err
	}
	sale, stock, limit, window, buckets := o.Sale, o.Stock, o.Limit, o.PaymentWindow, o.Buckets
	u := adminapi.SaleUpdate{Stock: &stock, Limit: &limit, StartsAt: startsAt}
	if buckets > 1 {
		u.Buckets = &buckets
	}
	if window > 0 {
		u.PaymentWindow = &window
	}
	room := o.WaitingRoom != "" && o.WaitingRoom != adminapi.RoomOff
	if room {
		u.WaitingRoom, u.AdmitPerSecond, u.PassSeconds = &o.WaitingRoom, &o.AdmitPerSecond, &o.PassSeconds
	}
	s, err := a.c.Create(ctx, sale, u)
	switch _, answered := errors.AsType[*adminapi.APIError](err); {
	case errors.Is(err, adminapi.ErrSaleExists):
		return nil, fmt.Errorf("bench: %w: sale %s exists already; bench creates its own (leave --sale out for a random id)", ErrOptions, sale)
	case answered:
		return nil, fmt.Errorf("bench: create sale %s: %w", sale, err)
	case err != nil:
		return nil, fmt.Errorf("bench: admin API at %s: %w", a.c.BaseURL(), err)
	case !s.Created:
		return nil, fmt.Errorf("bench: create sale %s: it appeared meanwhile (the API answered 200, not 201)", sale)
	case buckets > 1 && s.Buckets != buckets:
		return nil, fmt.Errorf("bench: create sale %s: buckets %d in the answer, want %d (a gateway without buckets?)", sale, s.Buckets, buckets)
	case s.PaymentWindow != window:
		return nil, fmt.Errorf("bench: create sale %s: payment_window %d in the answer, want %d (a gateway without payment windows?)", sale, s.PaymentWindow, window)
	case room && (s.WaitingRoom != o.WaitingRoom || s.AdmitPerSecond != o.AdmitPerSecond || s.PassSeconds != o.PassSeconds):
		return nil, fmt.Errorf("bench: create sale %s: waiting room %q at %d/s with %ds passes in the answer, want %q at %d/s with %ds (a gateway without waiting rooms?)",
			sale, s.WaitingRoom, s.AdmitPerSecond, s.PassSeconds, o.WaitingRoom, o.AdmitPerSecond, o.PassSeconds)
	}
	return s, nil
}

// view reads the admin sale view, which is never stale.
func (a *admin) view(ctx context.Context, sale string) (*adminapi.Sale, error) {
	if a.err != nil {
		return nil, a.err
	}
	return a.c.Sale(ctx, sale)
}
