package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// buyReq is one buy a rush sends.
type buyReq struct {
	user, key string
	qty       int64
}

func buyReqs(users []string, keyPrefix string, qty int64) []buyReq {
	out := make([]buyReq, len(users))
	for i, u := range users {
		out[i] = buyReq{user: u, key: keyPrefix + u, qty: qty}
	}
	return out
}

// interleave returns a's and b's elements alternately, then the rest.
func interleave[T any](a, b []T) []T {
	out := make([]T, 0, len(a)+len(b))
	for i := 0; i < len(a) || i < len(b); i++ {
		if i < len(a) {
			out = append(out, a[i])
		}
		if i < len(b) {
			out = append(out, b[i])
		}
	}
	return out
}

// buyRes is the final answer to one buy.
type buyRes struct {
	buyReq
	code    int
	status  string
	orderID string
	state   string
	payBy   *time.Time
	raw     string
	// sent is when the first try left (it may be the one that reserved),
	// answered when the final answer came.
	sent, answered time.Time
	// unavailable counts the tries answered 503 or not at all before it.
	unavailable int
	err         error // no answer but 503 within buyBound, or no JSON
}

func (b buyRes) bought() bought {
	out := bought{id: b.orderID, user: b.user, qty: b.qty, state: b.state, sent: b.sent, answered: b.answered}
	if b.payBy != nil {
		out.payBy = *b.payBy
	}
	return out
}

// buyBound bounds one buy's tries: the buyer sends a buy answered 503 (the
// sale under repair, Redis down) or not at all again, with the same
// Idempotency-Key, for up to this long.
const buyBound = 2 * time.Minute

// rush sends buys from several goroutines, each until it has an answer
// other than 503. It never fails the test itself: the test reads the
// answers once it has waited.
type rush struct {
	res      []buyRes
	accepted atomic.Int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// startRush sends reqs to the gateway from workers goroutines, in order,
// and returns at once. The test's end stops it.
func startRush(t *testing.T, g *gatewayProc, sale string, reqs []buyReq, workers int) *rush {
	t.Helper()
	r := &rush{res: make([]buyRes, len(reqs))}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	r.cancel = cancel
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	next := make(chan int)
	for range workers {
		r.wg.Go(func() {
			for i := range next {
				r.res[i] = buyUntilAnswered(ctx, client, g, sale, reqs[i])
				if r.res[i].code == http.StatusAccepted {
					r.accepted.Add(1)
				}
			}
		})
	}
	r.wg.Go(func() {
		defer close(next)
		for i := range reqs {
			select {
			case next <- i:
			case <-ctx.Done():
				for ; i < len(reqs); i++ {
					r.res[i] = buyRes{buyReq: reqs[i], err: ctx.Err()}
				}
				return
			}
		}
	})
	t.Cleanup(func() {
		r.cancel()
		r.wg.Wait()
		client.CloseIdleConnections()
	})
	return r
}

// wait waits until every buy has its answer and returns them, in the order
// of the requests.
func (r *rush) wait() []buyRes {
	r.wg.Wait()
	return r.res
}

// waitAccepted waits until n buys have been accepted in all.
func (r *rush) waitAccepted(t *testing.T, n int64, timeout time.Duration) {
	t.Helper()
	localstack.WaitFor(t, timeout, fmt.Sprintf("%d buys accepted", n), func() bool { return r.accepted.Load() >= n })
}

func buyUntilAnswered(ctx context.Context, c *http.Client, g *gatewayProc, sale string, q buyReq) buyRes {
	res := buyRes{buyReq: q, sent: time.Now()}
	body := fmt.Sprintf(`{"user_id":%q,"quantity":%d}`, q.user, q.qty)
	pause := 20 * time.Millisecond
	for {
		// The request is not bound to ctx: a buy in flight when the rush
		// stops gets its answer.
		code, raw, err := postBuy(c, g, sale, q.key, body)
		if err == nil && code != http.StatusServiceUnavailable {
			res.code, res.raw, res.answered = code, raw, time.Now()
			var a buyAnswer
			if err := json.Unmarshal([]byte(raw), &a); err != nil {
				res.err = fmt.Errorf("answer %d %q: %w", code, raw, err)
				return res
			}
			res.status, res.orderID, res.state, res.payBy = a.Status, a.OrderID, a.State, a.PayBy
			return res
		}
		res.unavailable++
		if time.Since(res.sent) > buyBound {
			res.err = fmt.Errorf("only 503s or no answer for %v (%d tries; last %d %q %v)", buyBound, res.unavailable, code, raw, err)
			return res
		}
		select {
		case <-ctx.Done():
			res.err = fmt.Errorf("stopped after %d tries answered 503 or not at all: %w", res.unavailable, ctx.Err())
			return res
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}

func postBuy(c *http.Client, g *gatewayProc, sale, key, body string) (int, string, error) {
	req, err := http.NewRequest("POST", "http://"+g.public+"/v1/sales/"+sale+"/orders", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	return res.StatusCode, string(raw), err
}

// tally counts the answers by status (by "error" for none) and fails the
// test on one no buyer should get: a 5xx other than the 503s sent again,
// no answer in time, a 202 without an order id.
func tally(t *testing.T, what string, res []buyRes) map[string]int {
	t.Helper()
	counts := map[string]int{}
	var bad []string
	for _, b := range res {
		switch {
		case b.err != nil:
			counts["error"]++
			bad = append(bad, fmt.Sprintf("%s: %v", b.user, b.err))
		case b.code >= 500 || b.code == http.StatusAccepted && (b.status != "accepted" || b.orderID == ""):
			counts[b.status]++
			bad = append(bad, fmt.Sprintf("%s: %d %s", b.user, b.code, b.raw))
		default:
			counts[b.status]++
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: %d buys went wrong, first ones: %q", what, len(bad), bad[:min(len(bad), 10)])
	}
	return counts
}

// checkReplays checks the answers to keys sent again after the rollback
// against their first answers (API.md: a repeat with the same key, user and
// quantity returns the first response, byte for byte, and reserves nothing
// more). A 202 with another order id is the failure the issue names; any
// other answer than the first is reported too.
func checkReplays(t *testing.T, first map[string]buyRes, again []buyRes) {
	t.Helper()
	var newIDs, otherAnswer, otherBytes []string
	same, waited := 0, 0
	for _, b := range again {
		f := first[b.key]
		if b.unavailable > 0 {
			waited++
		}
		switch {
		case b.err != nil:
			// Reported by tally.
		case b.code == http.StatusAccepted && b.orderID != f.orderID:
			newIDs = append(newIDs, fmt.Sprintf("%s: first %s, now %s", b.key, f.orderID, b.orderID))
		case b.code != f.code:
			otherAnswer = append(otherAnswer, fmt.Sprintf("%s: first %d %s, now %d %s", b.key, f.code, f.raw, b.code, b.raw))
		case b.raw != f.raw:
			otherBytes = append(otherBytes, fmt.Sprintf("%s: first %s, now %s", b.key, f.raw, b.raw))
		default:
			same++
		}
	}
	t.Logf("replays: %d of %d answered as the first time (%d were answered 503 or not at all first)", same, len(again), waited)
	if len(newIDs) > 0 {
		t.Errorf("%d of %d replayed keys became a new order, first ones: %q", len(newIDs), len(again), newIDs[:min(len(newIDs), 5)])
	}
	if len(otherAnswer) > 0 {
		t.Errorf("%d of %d replayed keys got another answer than the first, first ones: %q", len(otherAnswer), len(again), otherAnswer[:min(len(otherAnswer), 5)])
	}
	if len(otherBytes) > 0 {
		t.Errorf("%d of %d replayed keys got the first answer with other bytes, first ones: %q", len(otherBytes), len(again), otherBytes[:min(len(otherBytes), 5)])
	}
}
