package sale

import (
	"context"
	"testing"
	"time"
)

// RoomOf (one HMGET) reads a room as Room (the admin script) does, clock
// included, for rooms of every kind: fifo with its default anchor, a rate
// changed after the start, random before and after its seal, a sale
// without a room, sold out, and none at all.
func TestRoomOfReadsAsRoom(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	later := time.Now().Add(time.Hour).UnixMilli()
	past := time.Now().Add(-time.Minute).UnixMilli()
	for _, tc := range []struct {
		sale string
		u    Update
	}{
		{"fifo", Update{Stock: ptr(5), WaitingRoom: ptr(RoomFIFO)}},
		{"upcoming", Update{Stock: ptr(5), WaitingRoom: ptr(RoomFIFO), AdmitPerSecond: ptr(7), PassSeconds: ptr(30), StartsAt: &later}},
		{"random", Update{Stock: ptr(5), WaitingRoom: ptr(RoomRandom), StartsAt: &later}},
		{"started", Update{Stock: ptr(5), WaitingRoom: ptr(RoomRandom), StartsAt: &past}},
		{"none", Update{Stock: ptr(5)}},
		{"gone", Update{Stock: ptr(0), WaitingRoom: ptr(RoomFIFO)}},
	} {
		if _, _, err := e.store.Upsert(ctx, tc.sale, tc.u); err != nil {
			t.Fatalf("%s: %v", tc.sale, err)
		}
	}
	for _, sale := range []string{"fifo", "random", "started"} {
		if _, err := e.store.Join(sale, "u1"); err != nil {
			t.Fatalf("join %s: %v", sale, err)
		}
	}
	if _, _, err := e.store.Upsert(ctx, "fifo", Update{AdmitPerSecond: ptr(3)}); err != nil {
		t.Fatal(err)
	}
	for _, sale := range []string{"fifo", "upcoming", "random", "started", "none", "gone"} {
		// Room first: on "started" its read seals the pre-queue, which
		// RoomOf must then read too.
		want, err := e.store.Room(ctx, sale)
		if err != nil {
			t.Fatalf("Room(%s): %v", sale, err)
		}
		got, err := e.store.RoomOf(ctx, sale)
		if err != nil {
			t.Fatalf("RoomOf(%s): %v", sale, err)
		}
		if got.Mode != want.Mode || got.Pass != want.Pass || got.Joined != want.Joined || got.Prequeue != want.Prequeue ||
			got.Start != want.Start || got.End != want.End || got.SoldOut != want.SoldOut || got.Clock != want.Clock ||
			(got.Key == nil) != (want.Key == nil) {
			t.Errorf("%s: RoomOf %+v, Room %+v", sale, *got, *want)
		}
	}
	if _, err := e.store.RoomOf(ctx, "nosuch"); err != ErrNotFound {
		t.Errorf("RoomOf(nosuch): %v", err)
	}
}
