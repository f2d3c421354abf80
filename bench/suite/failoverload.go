package main

// The failover part's load (failover.go): a few buyers per sale, paced, each
// answer kept with its time, and the longest gap between 202s read from
// them.

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// foAnswer is one buy's answer.
type foAnswer struct {
	sale   int // index in the round's sales
	code   int // 0: no answer (a connection error, a timeout)
	status string
	at     time.Time
}

// foLoad is the round's steady load: foWorkers buyers per sale, every
// buyer new, one unit each, at most one request per foPace each.
type foLoad struct {
	cancel context.CancelFunc
	hc     *http.Client
	wg     sync.WaitGroup
	// dead is when the killed primary was gone (unix ns, 0 before):
	// firstVictim is the answer time of the first 202 of one of its sales
	// to a request sent after it.
	dead, firstVictim atomic.Int64
	sold              []atomic.Int64 // 202s per sale
	answers           [][]foAnswer   // per buyer, read once they stopped
	once              sync.Once
	all               []foAnswer
}

func startFoLoad(ctx context.Context, base string, sales []string, onVictim map[string]bool, round int) *foLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &foLoad{cancel: cancel, sold: make([]atomic.Int64, len(sales)), answers: make([][]foAnswer, len(sales)*foWorkers)}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: len(sales) * foWorkers}}
	l.hc = hc
	for i, sale := range sales {
		url := base + "/v1/sales/" + sale + "/orders"
		for w := range foWorkers {
			slot := i*foWorkers + w
			l.wg.Go(func() {
				for n := 0; ctx.Err() == nil; n++ {
					sent := time.Now()
					body := `{"user_id":"r` + strconv.Itoa(round) + `-w` + strconv.Itoa(slot) + `-` + strconv.Itoa(n) + `","quantity":1}`
					code, status := foBuy(ctx, hc, url, body)
					at := time.Now()
					if ctx.Err() != nil && code == 0 {
						break // the load's stop cut the request: no answer to count
					}
					l.answers[slot] = append(l.answers[slot], foAnswer{sale: i, code: code, status: status, at: at})
					if code == http.StatusAccepted {
						l.sold[i].Add(1)
						if d := l.dead.Load(); onVictim[sale] && d != 0 && sent.UnixNano() > d {
							l.firstVictim.CompareAndSwap(0, at.UnixNano())
						}
					}
					if wait := foPace - time.Since(sent); wait > 0 {
						if sleepCtx(ctx, wait) != nil {
							break
						}
					}
				}
			})
		}
	}
	return l
}

// stop stops the buyers (at once, and safe to call again) and returns
// every answer.
func (l *foLoad) stop() []foAnswer {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
		l.hc.CloseIdleConnections()
		for _, a := range l.answers {
			l.all = append(l.all, a...)
		}
	})
	return l.all
}

// foBuy sends one buy and returns the answer's code and status (0, "" for
// no answer).
func foBuy(ctx context.Context, hc *http.Client, url, body string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, ""
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	_, rest, _ := strings.Cut(string(b), `"status":"`)
	status, _, _ := strings.Cut(rest, `"`)
	return res.StatusCode, status
}

// longestGap is the longest time between two consecutive 202s (ts,
// sorted) of which the later came in (from, to], counting from the last
// one before from (from itself when there is none) and on to to.
func longestGap(ts []time.Time, from, to time.Time) time.Duration {
	prev := from
	var gap time.Duration
	for _, t := range ts {
		if t.After(to) {
			break
		}
		if t.After(from) {
			gap = max(gap, t.Sub(prev))
		}
		prev = t
	}
	return max(gap, to.Sub(prev))
}
