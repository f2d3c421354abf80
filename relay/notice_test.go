package relay

import (
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
)

// Wrote from many goroutines, before Run: each sale is noticed once
// however often it was written, one wake-up waits, and nobody blocked.
func TestWroteRecordsConcurrently(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never called
	t.Cleanup(func() { _ = rdb.Close() })
	r, err := New(config.Default(), Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				r.Wrote("s" + strconv.Itoa((g+i)%10))
			}
			r.Wrote("") // no sale: ignored
		}()
	}
	wg.Wait()
	got := r.notes.take(nil)
	slices.Sort(got)
	want := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"}
	if !slices.Equal(got, want) {
		t.Errorf("noticed %v, want %v", got, want)
	}
	if n := len(r.notes.wake); n != 1 {
		t.Errorf("%d wake-ups waiting, want 1", n)
	}
	if again := r.notes.take(nil); len(again) != 0 {
		t.Errorf("noticed again: %v", again)
	}
	var none *Relay
	none.Wrote("s0") // a process without a relay: nothing happens
}
