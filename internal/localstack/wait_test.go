package localstack

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalTB is a testing.TB whose Fatalf records the message and ends the
// goroutine, as testing's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// waitFor runs WaitFor on a goroutine of its own and returns what it
// failed with ("" when it returned).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitFor(tb, timeout, what, cond)
	}()
	<-done
	return tb.msg
}

func TestWaitFor(t *testing.T) {
	t.Run("already true: one look", func(t *testing.T) {
		looks := 0
		if msg := waitFor(t, time.Minute, "x", func() bool { looks++; return true }); msg != "" || looks != 1 {
			t.Fatalf("failed %q after %d looks, want no failure after 1", msg, looks)
		}
	})
	t.Run("true at the fifth look", func(t *testing.T) {
		looks := 0
		if msg := waitFor(t, time.Minute, "x", func() bool { looks++; return looks == 5 }); msg != "" || looks != 5 {
			t.Fatalf("failed %q after %d looks, want no failure after 5", msg, looks)
		}
	})
	t.Run("never true: fails with the condition's name, looking to the end", func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		var last time.Time
		start := time.Now()
		msg := waitFor(t, timeout, "the outbox emptied", func() bool { last = time.Now(); return false })
		if !strings.Contains(msg, "the outbox emptied") || !strings.Contains(msg, timeout.String()) {
			t.Fatalf("failed with %q, want the condition's name and the timeout", msg)
		}
		if last.Sub(start) < timeout {
			t.Fatalf("the last look was %v after the start, before the timeout %v", last.Sub(start), timeout)
		}
	})
}
