package sale

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// One queue script call for several buyers: places in the order given, a
// buyer named twice has one place, a buyer who joined before keeps theirs,
// and only the call's first newcomer may re-anchor the clock of an empty
// room (the others wait behind it, as joins one at a time would).
func TestJoinBatch(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	past := time.Now().Add(-time.Hour).UnixMilli()
	if _, _, err := e.store.Upsert(ctx, "idle", Update{Stock: ptr(100), WaitingRoom: ptr(RoomFIFO), AdmitPerSecond: ptr(1), StartsAt: &past}); err != nil {
		t.Fatal(err)
	}
	places := func(sale string, users ...string) ([]int64, *Room, error) {
		out := make([]Place, len(users))
		if err := e.store.join(ctx, sale, users, out); err != nil {
			return nil, nil, err
		}
		js := make([]int64, len(out))
		for i, p := range out {
			js[i] = p.Join
			if p.Room != out[0].Room {
				t.Fatalf("the places of one call carry different rooms")
			}
		}
		return js, out[0].Room, nil
	}
	js, room, err := places("idle", "a", "b", "a", "c")
	if err != nil || !slices.Equal(js, []int64{1, 2, 1, 3}) {
		t.Fatalf("first call: %v, %v; want [1 2 1 3]", js, err)
	}
	// An hour of an empty room at 1/s is no credit: the first newcomer is
	// next, the rest behind it.
	if now := time.Now().UnixMilli(); room.Joined != 3 || room.Admitted(now) != 0 || room.Clock.AdmitAt(1) > now+1000 {
		t.Fatalf("after the first call: joined %d, admitted %d, clock %+v", room.Joined, room.Admitted(now), room.Clock)
	}
	anchor := room.Clock
	js, room, err = places("idle", "b", "d")
	if err != nil || !slices.Equal(js, []int64{2, 4}) {
		t.Fatalf("second call: %v, %v; want [2 4]", js, err)
	}
	if room.Joined != 4 || room.Clock != anchor {
		t.Fatalf("second call moved the clock with people waiting: %+v, was %+v (joined %d)", room.Clock, anchor, room.Joined)
	}
	if got, err := e.store.Room(ctx, "idle"); err != nil || got.Joined != 4 {
		t.Fatalf("Room after the calls: %+v, %v", got, err)
	}

	// A refusal is the whole call's.
	if _, _, err := e.store.Upsert(ctx, "none", Update{Stock: ptr(5)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := places("none", "a", "b"); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("a call on a sale without a room: %v, want ErrNoRoom", err)
	}
	if _, _, err := places("nosuch", "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a call on no sale: %v, want ErrNotFound", err)
	}
}

// Joins in flight together share calls, and every buyer still gets one
// place of 1..n, the same at each of their joins.
func TestConcurrentJoins(t *testing.T) {
	e := newEnv(t, Options{Batch: Batching{MaxSize: 64, Calls: 1}})
	ctx := context.Background()
	if _, _, err := e.store.Upsert(ctx, "crowd", Update{Stock: ptr(10), WaitingRoom: ptr(RoomFIFO)}); err != nil {
		t.Fatal(err)
	}
	const buyers = 400
	got := make([][2]int64, buyers)
	errs := make(chan error, 2*buyers)
	var wg sync.WaitGroup
	for i := range 2 * buyers {
		wg.Go(func() {
			p, err := e.store.Join("crowd", fmt.Sprintf("u%d", i%buyers))
			if err != nil {
				errs <- err
				return
			}
			got[i%buyers][i/buyers] = p.Join
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("join: %v", err)
	}
	seen := make([]bool, buyers+1)
	for u, js := range got {
		if js[0] != js[1] || js[0] < 1 || js[0] > buyers || seen[js[0]] {
			t.Fatalf("buyer u%d joined at %v (each join must find one place of 1..%d, no one else's)", u, js, buyers)
		}
		seen[js[0]] = true
	}
	calls, joins := e.store.joins.calls.Get(), e.store.joins.items.Get()
	if joins != 2*buyers || calls >= joins {
		t.Fatalf("%d joins in %d calls: want %d joins sharing calls", joins, calls, 2*buyers)
	}
	t.Logf("%d joins in %d calls", joins, calls)
}

// BenchmarkJoins measures a crowd of joins (64 at a time, each buyer new)
// on a redis-server of its own, with the joins' linger (DefaultJoinLinger)
// and without: the joins per script call and Redis's own CPU per join
// (INFO commandstats, evalsha's usec). Compare with
//
//	go test -run '^$' -bench Joins -count 6 ./sale/
func BenchmarkJoins(b *testing.B) {
	for _, bc := range []struct {
		name   string
		linger time.Duration
	}{{"linger", 0}, {"nolinger", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			e := privateEnv(b, Options{Batch: Batching{MaxSize: 256, Calls: 1}, JoinLinger: bc.linger})
			ctx := context.Background()
			if _, _, err := e.store.Upsert(ctx, "crowd", Update{Stock: ptr(10), WaitingRoom: ptr(RoomFIFO)}); err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			usec0 := evalshaUsec(b, e)
			b.SetParallelism(32) // 64 joiners on 2 CPUs
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := e.store.Join("crowd", "u"+strconv.FormatInt(n.Add(1), 10)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			calls, joins := e.store.joins.calls.Get(), e.store.joins.items.Get()
			b.ReportMetric(float64(joins)/float64(max(calls, 1)), "joins/call")
			b.ReportMetric(float64(evalshaUsec(b, e)-usec0)/float64(max(joins, 1)), "redis-µs/join")
		})
	}
}
