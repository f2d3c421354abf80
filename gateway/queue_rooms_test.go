package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale"
)

// The gateway's memory of the rooms (rooms.go): what a poll and a buy's
// ticket check are answered from.

// A lost subscription forgets the sales held without a room, so that a
// room given meanwhile is seen at the next buy.
func TestRoomsMissed(t *testing.T) {
	g := startGateway(t)
	g.mustSale("ms", `{"stock":5,"starts_at":"`+startsIn(time.Hour)+`"}`)
	if r := g.buy("ms", "u", 1, ""); r.code != 403 || r.status() != "not_started" {
		t.Fatalf("buy before the start: %d %s", r.code, r.raw)
	}
	// The room given behind the gateway's back (as if its announcement
	// were lost), then the subscription drops.
	if err := g.rdb.HSet(t.Context(), g.keys.Meta("ms"), "wr", 1, "wkey", strings.Repeat("11", 32)).Err(); err != nil {
		t.Fatal(err)
	}
	g.srv.rooms.Missed(false)
	if rm, _, err := g.srv.rooms.get([]byte("ms"), time.Now()); err != nil || rm.Mode != sale.RoomFIFO {
		t.Fatalf("the room after Missed: %+v, %v", rm, err)
	}
}

// The first read of a sale is shared by the requests that come meanwhile,
// its failure included: a Redis that does not answer costs a crowd one
// read. The failure is not kept: the next request reads again.
func TestRoomsShareARead(t *testing.T) {
	release := make(chan struct{})
	let := sync.OnceFunc(func() { close(release) })
	t.Cleanup(let) // a failed wait leaves no request blocked
	var calls atomic.Int64
	down := fmt.Errorf("room s: %w: down", sale.ErrUnavailable)
	first := func(context.Context, string) (*sale.Room, error) {
		if calls.Add(1) == 1 {
			<-release
			return nil, down
		}
		return nil, sale.ErrNotFound
	}
	r := newRooms(first, first, time.Minute, zap.NewNop())
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			_, _, err := r.get([]byte("s"), time.Now())
			errs <- err
		}()
	}
	localstack.WaitFor(t, 10*time.Second, "the other requests waiting for the first one's read", func() bool {
		return calls.Load() == 1 && waitingForARead() == n-1
	})
	let()
	for range n {
		if err := <-errs; !errors.Is(err, down) {
			t.Errorf("a request of the shared read: %v, want its failure", err)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("%d requests made %d reads, want 1", n, c)
	}
	if rm, _, err := r.get([]byte("s"), time.Now()); err != nil || rm != noSale || calls.Load() != 2 {
		t.Errorf("the request after the failure: %+v, %v, after %d reads; want noSale after 2", rm, err, calls.Load())
	}
}

// A read in flight is its entry's: an announcement that forgets the entry
// forgets the read, and the next request reads anew rather than wait for
// an answer older than the announcement.
func TestRoomsAnnouncementForgetsARead(t *testing.T) {
	release := make(chan struct{})
	let := sync.OnceFunc(func() { close(release) })
	t.Cleanup(let) // a failed wait leaves no request blocked
	var calls atomic.Int64
	first := func(context.Context, string) (*sale.Room, error) {
		if calls.Add(1) == 1 {
			<-release
		}
		return nil, sale.ErrNotFound
	}
	r := newRooms(first, first, time.Minute, zap.NewNop())
	before := make(chan error, 1)
	go func() {
		_, _, err := r.get([]byte("s"), time.Now())
		before <- err
	}()
	localstack.WaitFor(t, 10*time.Second, "the first read", func() bool { return calls.Load() == 1 })
	r.Changed("s")
	after := make(chan error, 1)
	go func() {
		_, _, err := r.get([]byte("s"), time.Now())
		after <- err
	}()
	localstack.WaitFor(t, 10*time.Second, "the request after the announcement answered by a read of its own", func() bool {
		return len(after) == 1
	})
	let()
	if err := <-before; err != nil {
		t.Errorf("the request before the announcement: %v", err)
	}
	if err := <-after; err != nil || calls.Load() != 2 {
		t.Errorf("the request after the announcement: %v, after %d reads; want 2", err, calls.Load())
	}
}

// waitingForARead counts the goroutines that wait in a singleflight.Group
// for another's call (Do waits on the call's WaitGroup).
func waitingForARead() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("singleflight.(*Group).Do(")) && bytes.Contains(g, []byte("sync.(*WaitGroup).Wait(")) {
			n++
		}
	}
	return n
}
