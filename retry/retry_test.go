package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 80, 80, 80}
	for i, w := range want {
		w *= time.Millisecond
		d := b.Next()
		if d < w/2 || d > w {
			t.Fatalf("attempt %d: %v, want within [%v, %v]", i, d, w/2, w)
		}
	}
	b.Reset()
	if d := b.Next(); d > 10*time.Millisecond {
		t.Fatalf("after Reset: %v", d)
	}
	var zero Backoff
	if d := zero.Next(); d <= 0 || d > 100*time.Millisecond {
		t.Fatalf("zero value: %v", d)
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on a cancelled ctx reported the full delay")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep did not report the full delay")
	}
}

func TestUntil(t *testing.T) {
	fast := Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}
	errFlaky := errors.New("flaky")
	errFatal := errors.New("fatal")
	tests := []struct {
		name     string
		attempt  func(n int) error
		ctx      func() context.Context
		wantN    int
		wantErr  error
		notifies int
	}{
		{name: "succeeds after two failures", attempt: func(n int) error {
			if n < 3 {
				return errFlaky
			}
			return nil
		}, wantN: 3, notifies: 2},
		{name: "stop returns the cause at once", attempt: func(int) error { return Stop(errFatal) }, wantN: 1, wantErr: errFatal},
		{name: "cancelled context ends the loop", attempt: func(int) error { return errFlaky },
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			}, wantN: 1, wantErr: context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			n, notified := 0, 0
			err := Until(ctx, fast, func(context.Context) error { n++; return tc.attempt(n) },
				func(error, time.Duration) { notified++ })
			if n != tc.wantN {
				t.Errorf("attempts = %d, want %d", n, tc.wantN)
			}
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && notified != tc.notifies {
				t.Errorf("notified %d times, want %d", notified, tc.notifies)
			}
			if s, ok := errors.AsType[stop](err); ok {
				t.Errorf("Until returned the Stop wrapper %v", s)
			}
		})
	}
	if Stop(nil) != nil {
		t.Error("Stop(nil) is not nil")
	}
}

// Backoff.Tries bounds the attempts: the last failure's error comes back as
// it is, with no wait (and no notify) after it; a success or a Stop before
// the bound ends the loop as without one.
func TestUntilTries(t *testing.T) {
	errFatal := errors.New("fatal")
	tests := []struct {
		name     string
		tries    int
		attempt  func(n int) error
		wantN    int
		wantErr  string // "" for nil
		notifies int
	}{
		{name: "gives up after Tries failures with the last error", tries: 3,
			attempt: func(n int) error { return fmt.Errorf("flaky %d", n) }, wantN: 3, wantErr: "flaky 3", notifies: 2},
		{name: "one try is one attempt and no wait", tries: 1,
			attempt: func(n int) error { return fmt.Errorf("flaky %d", n) }, wantN: 1, wantErr: "flaky 1", notifies: 0},
		{name: "a success before the bound", tries: 3, attempt: func(n int) error {
			if n < 3 {
				return fmt.Errorf("flaky %d", n)
			}
			return nil
		}, wantN: 3, notifies: 2},
		{name: "a stop before the bound", tries: 5, attempt: func(n int) error {
			if n == 2 {
				return Stop(errFatal)
			}
			return fmt.Errorf("flaky %d", n)
		}, wantN: 2, wantErr: "fatal", notifies: 1},
		{name: "no bound: as many as it takes", tries: 0, attempt: func(n int) error {
			if n < 7 {
				return fmt.Errorf("flaky %d", n)
			}
			return nil
		}, wantN: 7, notifies: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond, Tries: tc.tries}
			n, notified := 0, 0
			err := Until(context.Background(), b, func(context.Context) error { n++; return tc.attempt(n) },
				func(error, time.Duration) { notified++ })
			if n != tc.wantN {
				t.Errorf("attempts = %d, want %d", n, tc.wantN)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("err = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Errorf("err = %v, want exactly %q (the last attempt's, not joined)", err, tc.wantErr)
			}
			if notified != tc.notifies {
				t.Errorf("notified %d times, want %d", notified, tc.notifies)
			}
		})
	}
}
