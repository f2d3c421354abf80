package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/retry"
)

// errNoAnswer is a buy to send again: no reply, or 503 (not ready yet).
var errNoAnswer = errors.New("no answer")

// paymentClient is the HTTP client of the buyers, the admin calls and the
// order views. Call usePaymentClient in a test that uses it, so that its
// connections close when the test ends (TestMain looks for goroutines left
// behind).
var paymentClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func usePaymentClient(t *testing.T) { t.Cleanup(paymentClient.CloseIdleConnections) }

// adminOf returns an admin API client of the gateway (no token: loopback).
func adminOf(t *testing.T, g *gatewayProc) *admin.Client {
	t.Helper()
	usePaymentClient(t)
	c, err := admin.New("http://"+g.admin, "", admin.WithHTTPClient(paymentClient))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func bg(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// windowSale creates a sale with a payment window of window seconds (0:
// none) through the admin API and checks the answer.
func (s *stack) windowSale(g *gatewayProc, sale string, stock, limit, window int64) {
	s.t.Helper()
	v, err := adminOf(s.t, g).Create(bg(s.t, 10*time.Second), sale, admin.SaleUpdate{Stock: &stock, Limit: &limit, PaymentWindow: &window})
	if err != nil {
		s.t.Fatalf("create sale %s: %v", sale, err)
	}
	if !v.Created || v.PaymentWindow != window || v.Stock != stock {
		s.t.Fatalf("create sale %s: %s", sale, v.Raw)
	}
}

// bought is a 202 as its buyer saw it.
type bought struct {
	id, user string
	qty      int64
	state    string
	payBy    time.Time // zero: none
	// sent and answered bound the moment Redis accepted the order.
	sent, answered time.Time
}

// buyAnswer is the part of a buy's answer the tests read.
type buyAnswer struct {
	Status   string     `json:"status"`
	OrderID  string     `json:"order_id"`
	UserID   string     `json:"user_id"`
	Quantity int64      `json:"quantity"`
	State    string     `json:"state"`
	PayBy    *time.Time `json:"pay_by"`
}

// buy is one buyer's request for qty units, sent again with the same
// Idempotency-Key while it gets no answer or a 503 (the gateway or Redis
// restarting), as a careful client does, for up to a minute.
func buy(ctx context.Context, g *gatewayProc, sale, user, key string, qty int64) (int, buyAnswer, bought, error) {
	body := fmt.Sprintf(`{"user_id":%q,"quantity":%d}`, user, qty)
	var (
		code int
		a    buyAnswer
		b    = bought{user: user, qty: qty}
	)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := retry.Until(ctx, retry.Backoff{Min: 20 * time.Millisecond, Max: 100 * time.Millisecond}, func(context.Context) error {
		req, err := http.NewRequest("POST", "http://"+g.public+"/v1/sales/"+sale+"/orders", strings.NewReader(body))
		if err != nil {
			return retry.Stop(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		if b.sent.IsZero() {
			// The first try may be the one that reserved.
			b.sent = time.Now()
		}
		res, err := paymentClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		b.answered = time.Now()
		if err != nil || res.StatusCode == http.StatusServiceUnavailable {
			return errNoAnswer
		}
		code, a = res.StatusCode, buyAnswer{}
		if err := json.Unmarshal(raw, &a); err != nil {
			return retry.Stop(fmt.Errorf("answer %d %q: %w", code, raw, err))
		}
		return nil
	}, nil)
	b.id, b.state = a.OrderID, a.State
	if a.PayBy != nil {
		b.payBy = *a.PayBy
	}
	return code, a, b, err
}

// crowd buys once for every user (quantity qty(i), Idempotency-Key key+user)
// from 32 goroutines and returns the 202s and the count of every status.
// An answer no buyer should get (a 5xx, a malformed 202) fails the test.
func crowd(t *testing.T, g *gatewayProc, sale, key string, users []string, qty func(int) int64) ([]bought, map[string]int) {
	t.Helper()
	usePaymentClient(t)
	ctx := bg(t, 3*time.Minute)
	var (
		mu     sync.Mutex
		got    []bought
		counts = map[string]int{}
		bad    []string
		wg     sync.WaitGroup
		next   = make(chan int)
	)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				code, a, b, err := buy(ctx, g, sale, users[i], key+users[i], qty(i))
				mu.Lock()
				switch {
				case err != nil:
					bad = append(bad, fmt.Sprintf("%s: %v", users[i], err))
				case code == http.StatusAccepted && (a.Status != "accepted" || a.OrderID == "" || a.Quantity != qty(i)):
					bad = append(bad, fmt.Sprintf("%s: a 202 %+v", users[i], a))
				case code == http.StatusAccepted:
					got = append(got, b)
				case code >= 500:
					bad = append(bad, fmt.Sprintf("%s: %d %+v", users[i], code, a))
				}
				counts[a.Status]++
				mu.Unlock()
			}
		})
	}
	for i := range users {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d buys went wrong, first ones: %q", len(bad), bad[:min(len(bad), 10)])
	}
	return got, counts
}

func userIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}
