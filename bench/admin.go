package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// admin talks to the gateway's admin listener (and its /readyz) with
// net/http: a handful of calls per run, so convenience over speed.
type admin struct {
	public, base, token string
	hc                  *http.Client
}

func newAdmin(o Options) *admin {
	return &admin{public: o.URL, base: o.AdminURL, token: o.Token, hc: &http.Client{
		Timeout: 10 * time.Second,
		// Never follow a redirect to somewhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second, DisableCompression: true},
	}}
}

func (a *admin) close() { a.hc.CloseIdleConnections() }

// saleView is the admin sale view of API.md.
type saleView struct {
	Status        string `json:"status"`
	State         string `json:"state"`
	Stock         int64  `json:"stock"`
	Sold          int64  `json:"sold"`
	Remaining     int64  `json:"remaining"`
	Buyers        int64  `json:"buyers"`
	OutboxPending int64  `json:"outbox_pending"`
}

func (a *admin) do(ctx context.Context, method, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, raw, err
}

// ready checks that the gateway answers and says it is ready.
func (a *admin) ready(ctx context.Context) error {
	code, raw, err := a.do(ctx, http.MethodGet, a.public+"/readyz", nil)
	if err != nil {
		return fmt.Errorf("bench: gateway at %s: %w", a.public, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("bench: gateway at %s is not ready: %d %s", a.public, code, bytes.TrimSpace(raw))
	}
	return nil
}

// createSale creates the sale; it refuses one that exists already, so that
// the checks see this run's orders only and no live sale is modified.
func (a *admin) createSale(ctx context.Context, sale string, stock, limit int64) error {
	url := a.base + "/admin/v1/sales/" + sale
	code, raw, err := a.do(ctx, http.MethodGet, url, nil)
	switch {
	case err != nil:
		return fmt.Errorf("bench: admin API at %s: %w", a.base, err)
	case code == http.StatusOK:
		return fmt.Errorf("bench: %w: sale %s exists already; bench creates its own (leave --sale out for a random id)", ErrOptions, sale)
	case code != http.StatusNotFound:
		return fmt.Errorf("bench: admin API: GET %s: %d %s", url, code, bytes.TrimSpace(raw))
	}
	body := []byte(`{"stock":` + strconv.FormatInt(stock, 10) + `,"per_user_limit":` + strconv.FormatInt(limit, 10) + `}`)
	code, raw, err = a.do(ctx, http.MethodPut, url, body)
	if err != nil {
		return fmt.Errorf("bench: admin API at %s: %w", a.base, err)
	}
	if code != http.StatusCreated {
		return fmt.Errorf("bench: create sale %s: %d %s", sale, code, bytes.TrimSpace(raw))
	}
	return nil
}

// view reads the admin sale view, which is never stale.
func (a *admin) view(ctx context.Context, sale string) (*saleView, error) {
	code, raw, err := a.do(ctx, http.MethodGet, a.base+"/admin/v1/sales/"+sale, nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET sale %s: %d %s", sale, code, bytes.TrimSpace(raw))
	}
	var v saleView
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("GET sale %s: %w", sale, err)
	}
	return &v, nil
}
