package repair

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate/broker"
	"github.com/flashgate/flashgate/scripts"
)

// hold makes the env's sales look as if this Redis were another process
// than the one they were last checked under (a restart that lost nothing),
// and runs the hold pass; it returns how many it held.
func (e *env) hold(sales ...string) int {
	e.t.Helper()
	for _, s := range sales {
		if err := e.rdb.HSet(e.ctx, e.keys.Meta(s), "rid", "0000").Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	n, err := e.loader.HoldPass(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// A sale whose Redis lost nothing MySQL holds is released by the first
// round, without a page of its orders read or an order changed; a held
// sale with no unit left answers SOLD_OUT to a buyer without a key
// meanwhile, and REPAIRING to one with a key (whose first answer may be
// among the writes lost).
func TestRepairReleasesWhatLostNothing(t *testing.T) {
	e := newEnv(t, "rc")
	e.create(2, 2, 0)
	if code, _ := e.reserve("u1", 2, ""); code != scripts.CodeOK {
		t.Fatalf("buy: %s", code)
	}
	e.forward()
	if n := e.hold(e.sale); n != 1 {
		t.Fatalf("held %d sales, want 1", n)
	}
	if code, _ := e.reserve("u2", 1, ""); code != scripts.CodeSoldOut {
		t.Errorf("buy without a key on a held sold-out sale: %s, want SOLD_OUT", code)
	}
	if code, _ := e.reserve("u3", 1, "k1"); code != scripts.CodeRepairing {
		t.Errorf("buy with a key on a held sold-out sale: %s, want REPAIRING", code)
	}
	r := e.repairer()
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Released != 1 || s.Repaired != 0 || s.Restored != 0 {
		t.Errorf("stats %+v, want 1 sale released as it was, none repaired", s)
	}
	if m := e.meta(); m["hold"] != "" || m["sold"] != "2" || m["seq"] != "1" {
		t.Errorf("meta after the release: %v, want not held, sold 2, seq 1", m)
	}
	if n, _ := e.rdb.SCard(e.ctx, e.keys.Held()).Result(); n != 0 {
		t.Errorf("%d sales still in the Held set", n)
	}
}

// A held sale that is not sold out refuses every buyer until released.
func TestHeldSaleWithUnitsRefuses(t *testing.T) {
	e := newEnv(t, "rh")
	e.create(5, 2, 0)
	e.hold(e.sale)
	if code, _ := e.reserve("u1", 1, ""); code != scripts.CodeRepairing {
		t.Errorf("buy on a held sale with units: %s, want REPAIRING", code)
	}
}

// The fence: with consumers on the queue, a held sale waits until each has
// witnessed that what it was sent before the queue was seen empty is
// settled, with nothing gone back to the queue since.
func TestRepairFenceWaitsForWitnesses(t *testing.T) {
	e := newEnv(t, "rf")
	e.create(5, 2, 0)
	e.reserve("u1", 1, "")
	e.forward()
	e.hold(e.sale)

	var through, failed time.Time
	settled := func(time.Time) (time.Time, time.Time) { return through, failed }
	other := func(through, failed time.Time) {
		v := strconv.FormatInt(ms(through), 10) + "," + strconv.FormatInt(ms(failed), 10) + "," + strconv.FormatInt(time.Now().UnixMilli(), 10)
		if err := e.rdb.HSet(e.ctx, e.keys.Witnesses(), "other", v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(Config{Poll: 10 * time.Millisecond, FenceWait: 200 * time.Millisecond}, Deps{
		Redis: e.rdb, DB: e.db, Loader: e.loader, Keys: e.keys, Name: "self", Settled: settled,
		Queue: func(context.Context) (broker.Depth, error) { return broker.Depth{Consumers: 2}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	stillHeld := func(why string) {
		t.Helper()
		if err := r.Once(e.ctx); err != nil {
			t.Fatal(err)
		}
		if m := e.meta(); m["hold"] != "1" {
			t.Fatalf("%s: the sale was released", why)
		}
	}
	stillHeld("no witness settled yet")

	// This process's consumer settles everything; the other has not
	// written a witness: one of two consumers is not enough.
	through = time.Now().Add(time.Hour)
	stillHeld("one witness of two consumers")

	// The other's witness lags behind the moment the queue was seen empty.
	other(time.Now().Add(-time.Hour), time.Time{})
	stillHeld("a witness behind")

	// The other had deliveries go back to the queue after that moment.
	other(time.Now().Add(time.Hour), time.Now().Add(time.Hour))
	stillHeld("a witness whose deliveries went back to the queue")

	other(time.Now().Add(time.Hour), time.Time{})
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if m := e.meta(); m["hold"] != "" {
		t.Fatalf("both witnesses settled: still held: %v", m)
	}
	w, err := e.rdb.HGet(e.ctx, e.keys.Witnesses(), "self").Result()
	if err != nil {
		t.Fatalf("this process's witness was not written: %v", err)
	}
	if got, _, _, err := parseWitness(w); err != nil || got.UnixMilli() != through.UnixMilli() {
		t.Errorf("witness %q, want through %d", w, through.UnixMilli())
	}
}

// Many held sales, some of which lost orders MySQL holds: one round
// releases those that lost nothing and repairs the others; a sale whose
// repair fails stays held while the others go on.
func TestRepairManySales(t *testing.T) {
	const n = 1200 // more than two chunks of saleChunk
	e := newEnv(t, "m0")
	sales := make([]string, n)
	for i := range sales {
		e.sale = "m" + strconv.Itoa(i)
		sales[i] = e.sale
		e.create(10, 5, 0)
		e.reserve("u1", 1, "")
		e.forward()
	}
	// Every tenth sale lost a reservation MySQL holds.
	lost := map[string]bool{}
	for i := 0; i < n; i += 10 {
		e.sale = sales[i]
		before := e.snapshot()
		e.reserve("u2", 2, "")
		e.forward()
		e.rollBack(before)
		lost[e.sale] = true
	}
	if got := e.hold(sales...); got != n {
		t.Fatalf("held %d sales, want %d", got, n)
	}
	// One sale's meta seq is unreadable: its repair fails, the others go on.
	broken := sales[5]
	if err := e.rdb.HSet(e.ctx, e.keys.Meta(broken), "seq", "x").Err(); err != nil {
		t.Fatal(err)
	}
	r := e.repairer()
	if err := r.Once(e.ctx); err == nil {
		t.Errorf("a round with an unreadable sale returned no error")
	}
	held, err := e.rdb.SMembers(e.ctx, e.keys.Held()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 1 || held[0] != broken {
		t.Fatalf("held after one round: %d sales (%.3v), want the broken sale %s alone", len(held), held, broken)
	}
	if err := e.rdb.HSet(e.ctx, e.keys.Meta(broken), "seq", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.rdb.SCard(e.ctx, e.keys.Held()).Result(); n != 0 {
		t.Fatalf("%d sales still held after the second round", n)
	}
	s := r.Stats()
	if int(s.Repaired) != len(lost) || int(s.Released) != n-len(lost) {
		t.Errorf("stats %+v, want %d repaired and %d released as they were", s, len(lost), n-len(lost))
	}
	for _, sale := range sales {
		m, err := e.rdb.HMGet(e.ctx, e.keys.Meta(sale), "hold", "sold").Result()
		if err != nil {
			t.Fatal(err)
		}
		want := "1"
		if lost[sale] {
			want = "3"
		}
		if m[0] != nil || m[1] != want {
			t.Fatalf("sale %s: hold %v sold %v, want released with sold %s", sale, m[0], m[1], want)
		}
	}
}

// A consumer process with no session vouches for nothing and is not
// waited for: RabbitMQ counts only the consumers on the queue. Its
// deliveries that went back to the queue after the fence began still
// begin it again.
func TestRepairFenceSkipsConsumersWithoutSession(t *testing.T) {
	e := newEnv(t, "rs")
	e.create(5, 2, 0)
	e.hold(e.sale)
	var failed time.Time
	other := func() {
		v := "0," + strconv.FormatInt(ms(failed), 10) + "," + strconv.FormatInt(time.Now().UnixMilli(), 10)
		if err := e.rdb.HSet(e.ctx, e.keys.Witnesses(), "other", v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(Config{Poll: 10 * time.Millisecond, FenceWait: 200 * time.Millisecond}, Deps{
		Redis: e.rdb, DB: e.db, Loader: e.loader, Keys: e.keys, Name: "self",
		Settled: func(now time.Time) (time.Time, time.Time) { return now, time.Time{} },
		Queue:   func(context.Context) (broker.Depth, error) { return broker.Depth{Consumers: 1}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	failed = time.Now().Add(time.Hour) // its session ended after the fence began
	other()
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if m := e.meta(); m["hold"] != "1" {
		t.Fatalf("released although a consumer's deliveries went back to the queue meanwhile")
	}
	failed = time.Now().Add(-time.Hour)
	other()
	if err := r.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	if m := e.meta(); m["hold"] != "" {
		t.Fatalf("a consumer without a session was waited for: still held")
	}
}
