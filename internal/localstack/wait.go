package localstack

import (
	"context"
	"testing"
	"time"
)

// The pace of WaitFor's looks: soon after the first, then no more often
// than pollMax, so that a condition that reads a server (a MySQL count, a
// scrape) does not load a machine that runs other tests too.
const (
	pollMin = 10 * time.Millisecond
	pollMax = 100 * time.Millisecond
)

// WaitFor waits until cond holds: it calls cond at once, then again every
// 10 ms or so, slowing down to every 100 ms, and fails tb (Fatalf, so call
// it from the test's goroutine) when cond still does not hold after
// timeout. what names the awaited condition in the failure ("the outbox
// emptied", "3 consumers on the queue"). cond runs on the caller's
// goroutine and may fail tb itself.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	pause := pollMin
	for !cond() {
		left := time.Until(deadline)
		if left <= 0 {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, pollMax)
	}
}

// RunUntilCleanup runs run(ctx) in a goroutine until the test ends: then
// it cancels ctx and waits for run to return, at most wait, and fails tb
// when run returned an error or did not return. Cleanups registered after
// it run before it: register what must outlive run (a client run uses)
// first.
func RunUntilCleanup(tb testing.TB, what string, wait time.Duration, run func(ctx context.Context) error) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	tb.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("%s: %v", what, err)
			}
		case <-time.After(wait):
			tb.Errorf("%s did not stop within %v", what, wait)
		}
	})
}
