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
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/retry"
)

// buyers buy concurrently until stopped or out of users. A buy that gets no
// answer (the gateway was killed, or is restarting) is retried with the same
// Idempotency-Key, as a careful client does, so that a reservation whose
// reply was lost is answered again rather than taken twice.
type buyers struct {
	t        *testing.T
	mu       sync.Mutex
	accepted map[string]string // order id → user
	codes    map[int]int
	bad      []string // answers no buyer should ever get
	retries  atomic.Int64
	n202     atomic.Int64
	ctx      context.Context // ends with stop
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// errNoAnswer is a buy to send again: no reply, or 503 (not ready yet).
var errNoAnswer = errors.New("no answer")

// startBuyers sends buys from workers goroutines to the gateway at base,
// each working through its share of users (users < 0: unlimited), pausing
// pause between buys. Each buyer gives up after three minutes, and that
// fails the test.
func startBuyers(t *testing.T, base, sale string, workers, users int, pause time.Duration) *buyers {
	b := &buyers{t: t, accepted: map[string]string{}, codes: map[int]int{}}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	ctx, deadline := context.WithTimeout(b.ctx, 3*time.Minute)
	again := retry.Backoff{Min: 20 * time.Millisecond, Max: 20 * time.Millisecond}
	for w := range workers {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for i := 0; users < 0 || i*workers+w < users; i++ {
				if ctx.Err() != nil {
					break
				}
				user := fmt.Sprintf("u%d-%d", w, i)
				// The request itself is not bound to ctx: a buy in flight
				// when the buyers stop gets its answer, and is counted.
				err := retry.Until(ctx, again, func(context.Context) error {
					code, id, body, err := buyOnce(client, base, sale, user)
					if err != nil || code == 503 {
						b.retries.Add(1)
						return errNoAnswer
					}
					b.record(code, id, user, body)
					return nil
				}, nil)
				if err != nil {
					break
				}
				if pause > 0 {
					time.Sleep(pause)
				}
			}
			if ctx.Err() != nil && b.ctx.Err() == nil {
				b.fail("buyer deadline passed")
			}
		}()
	}
	go func() { b.wg.Wait(); deadline() }()
	t.Cleanup(b.stop)
	return b
}

func buyOnce(c *http.Client, base, sale, user string) (code int, orderID, body string, err error) {
	req, err := http.NewRequest("POST", base+"/v1/sales/"+sale+"/orders", strings.NewReader(`{"user_id":"`+user+`","quantity":1}`))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-"+user)
	res, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, "", "", err
	}
	var v struct {
		Status  string `json:"status"`
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(raw, &v)
	return res.StatusCode, v.OrderID, string(raw), nil
}

func (b *buyers) record(code int, id, user, body string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.codes[code]++
	switch code {
	case 202:
		if id == "" {
			b.bad = append(b.bad, "202 without order id: "+body)
			return
		}
		if prev, ok := b.accepted[id]; ok && prev != user {
			b.bad = append(b.bad, "order id "+id+" given to two users")
		}
		b.accepted[id] = user
		b.n202.Add(1)
	case 410, 409, 429: // sold out, limit reached, shed
	default:
		b.bad = append(b.bad, strconv.Itoa(code)+" "+body)
	}
}

func (b *buyers) fail(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bad = append(b.bad, msg)
}

// stop stops the buyers and waits for the buys in flight.
func (b *buyers) stop() { b.cancel(); b.wg.Wait() }

// wait waits for the buyers to run out of users.
func (b *buyers) wait() { b.wg.Wait() }

// waitAccepted waits until n buys have been accepted in all.
func (b *buyers) waitAccepted(n int64, timeout time.Duration) {
	b.t.Helper()
	localstack.WaitFor(b.t, timeout, fmt.Sprintf("%d buys accepted", n), func() bool { return b.n202.Load() >= n })
}

// check fails the test on any answer a buyer should never get.
func (b *buyers) check() map[string]string {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bad) > 0 {
		n := min(len(b.bad), 10)
		b.t.Fatalf("%d unexpected answers, first ones: %q", len(b.bad), b.bad[:n])
	}
	b.t.Logf("answers %v, %d retried without an answer", b.codes, b.retries.Load())
	return b.accepted
}
