package reconcile

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/sale"
	"github.com/flashgate/flashgate/scripts"
)

// A sale of several buckets (API.md "buckets") sold through the gateway's
// own Store, so that its home, buckets, moves and order ids are laid out as
// in production: reconcile must sum the buckets, find a sale at rest clean,
// and name what is broken in any one of them.

// bucketed is a sale of three buckets on an env, sold by a gateway Store.
type bucketed struct {
	*env
	store *sale.Store
	sale  string
	lanes []string
}

// sellBuckets creates sale with stock units in 3 buckets (a payment window
// of window seconds, 0: none) and reserves n orders of quantity 1 or 2 for
// n users, one after the other, as buyers through a gateway would. It
// returns the sale and the orders accepted; it fails the test on any
// answer but accepted, sold_out and insufficient_stock, and when a bucket
// took no order.
func (e *env) sellBuckets(saleID string, stock int64, window int64, n int) (*bucketed, int) {
	e.t.Helper()
	ctx := context.Background()
	st, err := sale.New(e.rdb, e.loader, e.keys, sale.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	b := &bucketed{env: e, store: st, sale: saleID}
	limit, buckets := int64(10), int64(3)
	if _, created, err := b.store.Upsert(ctx, saleID, sale.Update{Stock: &stock, Limit: &limit,
		PaymentWindow: &window, Buckets: &buckets}); err != nil || !created {
		e.t.Fatalf("create %s: created %v, %v", saleID, created, err)
	}
	names, err := e.rdb.HGet(ctx, e.keys.Meta(saleID), "names").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	b.lanes = strings.Split(names, ",")
	if len(b.lanes) != 3 {
		e.t.Fatalf("sale %s names buckets %q", saleID, names)
	}
	rs := make([]sale.Reservation, n)
	for i := range rs {
		rs[i] = sale.Reservation{OrderID: saleID + "-o" + strconv.Itoa(i), UserID: "u" + strconv.Itoa(i), Quantity: 1 + i%2}
	}
	out := make([]sale.Result, n)
	if err := b.store.Reserve(ctx, saleID, rs, out); err != nil {
		e.t.Fatal(err)
	}
	ok := 0
	for i, res := range out {
		switch {
		case res.Err == nil:
			ok++
			if !strings.HasPrefix(res.OrderID, rs[i].OrderID+".") {
				e.t.Fatalf("order %d accepted as %q, want %s.BUCKET", i, res.OrderID, rs[i].OrderID)
			}
		case errors.Is(res.Err, sale.ErrSoldOut), errors.Is(res.Err, sale.ErrInsufficientStock):
		default:
			e.t.Fatalf("reservation %d: %v", i, res.Err)
		}
	}
	// Every bucket sells, or the sums prove little.
	for _, lane := range b.lanes {
		if e.rdb.HLen(ctx, e.keys.Orders(lane)).Val() == 0 {
			e.t.Fatalf("bucket %s took no order", lane)
		}
	}
	return b, ok
}

// deliver moves every bucket's outbox into MySQL, as the relay and the
// consumer would.
func (b *bucketed) deliver() {
	b.t.Helper()
	for _, lane := range b.lanes {
		b.env.deliver(lane, 1000)
	}
}

// move runs one half of a stock move (scripts/lua/move.lua) on keys and
// returns the units it moved.
func (b *bucketed) move(keys []string, args ...any) int64 {
	b.t.Helper()
	v, err := b.loader.Run(context.Background(), scripts.Move, keys, args...)
	if err != nil {
		b.t.Fatal(err)
	}
	a := v.([]any)
	if a[0].(int64) != 0 {
		b.t.Fatalf("move %v: code %d", args, a[0])
	}
	return a[1].(int64)
}

// TestReconcileBuckets: a sale of three buckets, 40 orders (60 units) over
// them, reconciles as a sale of one slot does: its figures are its buckets'
// summed, the stock the home handed out is in the buckets' stock or in a
// half-done move, and a change by hand to any one bucket is drift, named.
func TestReconcileBuckets(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		window int64
		setup  func(b *bucketed)
		drift  []string // substrings of the drift, in order; none: no drift
		check  func(t *testing.T, r *Report)
	}{
		{"all in MySQL", 0, func(b *bucketed) { b.deliver() }, nil, func(t *testing.T, r *Report) {
			if !r.Drained() || r.Rows != 40 || r.Units != 60 || r.Users != 40 || r.Moving != 0 || r.Moved != r.LaneStock ||
				r.Moved < 60 || r.States[order.StateConfirmed] != 40 {
				t.Fatalf("%+v", r)
			}
		}},
		{"some still in the outboxes", 0, func(b *bucketed) {
			for _, lane := range b.lanes {
				b.env.deliver(lane, 4)
			}
		}, nil, func(t *testing.T, r *Report) {
			if r.Drained() || r.Rows != 12 || r.OutboxEntries != 28 || r.OutboxOrders != 28 || r.InTransit() != 0 {
				t.Fatalf("%+v", r)
			}
		}},
		{"payments and cancellations delivered", 600, func(b *bucketed) {
			ids := b.orderIDs()
			for _, id := range ids[:3] {
				if _, _, err := b.store.Pay(ctx, b.sale, id); err != nil {
					b.t.Fatal(err)
				}
			}
			for _, id := range ids[3:5] {
				if _, _, err := b.store.Cancel(ctx, b.sale, id); err != nil {
					b.t.Fatal(err)
				}
			}
			b.deliver()
		}, nil, func(t *testing.T, r *Report) {
			if !r.Drained() || r.States[order.StatePaid] != 3 || r.Counters[order.StatePaid] != 3 ||
				r.States[order.StateCancelled] != 2 || r.Counters[order.StateCancelled] != 2 ||
				r.Due != 35 || r.Counters[order.StatePendingPayment] != 35 || r.RowStates[order.StatePaid] != 3 ||
				r.RowStates[order.StateCancelled] != 2 || r.Sold != r.UnitsLive || r.Sold >= 60 {
				t.Fatalf("%+v", r)
			}
		}},
		{"a cancellation still in a bucket's outbox", 600, func(b *bucketed) {
			b.deliver()
			if _, _, err := b.store.Cancel(ctx, b.sale, b.orderIDs()[0]); err != nil {
				b.t.Fatal(err)
			}
		}, nil, func(t *testing.T, r *Report) {
			if r.Drained() || r.StateInTransit != 1 || r.OutboxEntries != 1 || r.OutboxUnits >= 0 || r.InTransit() != 0 {
				t.Fatalf("%+v", r)
			}
		}},
		{"a bucket's sold changed by hand", 0, func(b *bucketed) {
			b.deliver()
			b.rdb.HIncrBy(ctx, b.keys.Meta(b.lanes[1]), "sold", 1)
		}, []string{"sold 61 ≠ MySQL live units 60 + outbox units 0", "Redis: sold 61 ≠ units of live orders 60",
			"Redis: sold 61 ≠ units held by users 60"}, nil},
		{"a bucket's counter changed by hand", 600, func(b *bucketed) {
			b.deliver()
			b.rdb.HIncrBy(ctx, b.keys.Meta(b.lanes[2]), "pending", -1)
		}, []string{"Redis: meta counter pending 39 ≠ 40 orders pending_payment"}, nil},
		{"a bucket's stock changed by hand", 0, func(b *bucketed) {
			b.deliver()
			b.rdb.HIncrBy(ctx, b.keys.Meta(b.lanes[0]), "stock", 5)
		}, []string{"≠ buckets' stock"}, func(t *testing.T, r *Report) {
			if r.LaneStock != r.Moved+5 {
				t.Fatalf("%+v", r)
			}
		}},
		{"a bucket's user changed by hand", 0, func(b *bucketed) {
			b.deliver()
			b.rdb.HSet(ctx, b.keys.Users(b.lanes[0]), "intruder", 1)
		}, []string{"Redis: sold 60 ≠ units held by users 61", "buyers: Redis 41 ≠ MySQL distinct users of live orders 40"}, nil},
		{"an order lost from a bucket's outbox", 0, func(b *bucketed) {
			msgs := b.rdb.XRangeN(ctx, b.keys.Outbox(b.lanes[2]), "-", "+", 1).Val()
			b.rdb.XDel(ctx, b.keys.Outbox(b.lanes[2]), msgs[0].ID)
			b.deliver()
		}, []string{"(difference", "1 accepted orders are neither in MySQL nor in the outbox"}, func(t *testing.T, r *Report) {
			if r.Missing != 1 || len(r.Examples) != 1 || !strings.HasPrefix(r.Examples[0], "missing ") {
				t.Fatalf("%+v", r)
			}
		}},
		{"a row no bucket accepted", 0, func(b *bucketed) {
			b.deliver()
			o := order.Order{OrderID: "planted.1", SaleID: b.sale, UserID: "u0", Quantity: 1, ReservedAt: time.Now()}
			if _, err := orderdb.WriteOrders(ctx, b.db, []order.Order{o}); err != nil {
				b.t.Fatal(err)
			}
		}, []string{"sold 60 ≠ MySQL live units 61", "1 orders in MySQL were never accepted"}, func(t *testing.T, r *Report) {
			if r.Unknown != 1 || !slices.Equal(r.Examples, []string{"unknown planted.1"}) {
				t.Fatalf("%+v", r)
			}
		}},
		{"an order in two buckets", 0, func(b *bucketed) {
			b.deliver()
			orders := b.rdb.HGetAll(ctx, b.keys.Orders(b.lanes[0])).Val()
			for id, rec := range orders {
				b.rdb.HSet(ctx, b.keys.Orders(b.lanes[1]), id, rec)
				break
			}
		}, []string{"1 orders are in two buckets"}, func(t *testing.T, r *Report) {
			if r.Doubled != 1 || len(r.Examples) != 1 || !strings.HasPrefix(r.Examples[0], "doubled ") {
				t.Fatalf("%+v", r)
			}
		}},
		{"a take recorded, not credited", 0, func(b *bucketed) {
			b.deliver()
			if n := b.move([]string{b.keys.Meta(b.sale), b.keys.Moves(b.sale)}, "take", "m1", 7, 1); n < 7 {
				b.t.Fatalf("took %d", n)
			}
		}, nil, func(t *testing.T, r *Report) {
			if r.Moving < 7 || r.Moved != r.LaneStock+r.Moving {
				t.Fatalf("%+v", r)
			}
		}},
		{"a take credited, its record not removed", 0, func(b *bucketed) {
			b.deliver()
			n := b.move([]string{b.keys.Meta(b.sale), b.keys.Moves(b.sale)}, "take", "m1", 7, 1)
			b.move([]string{b.keys.Meta(b.lanes[1]), b.keys.Op(b.lanes[1], "m1")}, "credit", "m1", n)
		}, nil, func(t *testing.T, r *Report) {
			if r.Moving != 0 || r.Moved != r.LaneStock {
				t.Fatalf("%+v", r)
			}
		}},
		{"a give recorded, not accepted", 0, func(b *bucketed) {
			b.deliver()
			if n := b.move([]string{b.keys.Meta(b.lanes[2]), b.keys.Moves(b.lanes[2])}, "give", "m2", 0); n == 0 {
				b.t.Fatal("bucket 2 had nothing to give")
			}
		}, nil, func(t *testing.T, r *Report) {
			if r.Moving == 0 || r.Moved != r.LaneStock+r.Moving {
				t.Fatalf("%+v", r)
			}
		}},
		{"a give accepted, its record not removed", 0, func(b *bucketed) {
			b.deliver()
			n := b.move([]string{b.keys.Meta(b.lanes[2]), b.keys.Moves(b.lanes[2])}, "give", "m2", 0)
			b.move([]string{b.keys.Meta(b.sale), b.keys.Op(b.sale, "m2")}, "accept", "m2", n)
		}, nil, func(t *testing.T, r *Report) {
			if r.Moving != 0 || r.Moved != r.LaneStock {
				t.Fatalf("%+v", r)
			}
		}},
		{"a credit that never had its take", 0, func(b *bucketed) {
			b.deliver()
			b.move([]string{b.keys.Meta(b.lanes[0]), b.keys.Op(b.lanes[0], "m3")}, "credit", "m3", 4)
		}, []string{"Redis: moved"}, func(t *testing.T, r *Report) {
			if r.LaneStock != r.Moved+4 {
				t.Fatalf("%+v", r)
			}
		}},
		{"a move record that is not one", 0, func(b *bucketed) {
			b.deliver()
			b.rdb.HSet(ctx, b.keys.Moves(b.sale), "m4", "take:9:1:0")
		}, []string{"1 move records are not moves"}, func(t *testing.T, r *Report) {
			if !slices.Equal(r.Examples, []string{"move m4 (take:9:1:0)"}) {
				t.Fatalf("%+v", r)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			b, ok := e.sellBuckets("b", 100000, tt.window, 40)
			if ok != 40 {
				t.Fatalf("%d of 40 reservations accepted", ok)
			}
			tt.setup(b)
			r, err := Sale(ctx, e.rdb, e.keys, e.db, "b")
			if err != nil {
				t.Fatal(err)
			}
			wantDrift(t, r, tt.drift)
			if r.Buckets != 3 || !slices.Equal(r.Lanes, b.lanes) || r.Stock != 100000 || r.Accepted != 40 ||
				r.AcceptedUnits != 60 {
				t.Fatalf("figures %+v", r)
			}
		})
	}
}

// TestReconcileBucketsSoldOut: a sale of three buckets sold out, its
// buckets having drawn the whole pool and taken back each other's unsold
// stock on the way, reconciles clean: sold = stock = moved = the buckets'
// stock, and MySQL holds it all.
func TestReconcileBucketsSoldOut(t *testing.T) {
	e := newEnv(t)
	// Quantities 1, 2, 1, 2, …: 40 units go to fewer than 30 of 60 buyers.
	b, ok := e.sellBuckets("so", 40, 0, 60)
	if ok < 20 || ok >= 30 {
		t.Fatalf("%d reservations accepted", ok)
	}
	b.deliver()
	r, err := Sale(context.Background(), e.rdb, e.keys, e.db, "so")
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Drift(); len(d) > 0 {
		t.Fatalf("drift %q (report %+v)", d, r)
	}
	if !r.Drained() || r.Sold != 40 || r.Stock != 40 || r.Moved != 40 || r.LaneStock != 40 || r.Units != 40 ||
		r.Accepted != int64(ok) || r.Rows != int64(ok) {
		t.Fatalf("%+v", r)
	}
}

// orderIDs returns the ids of the sale's orders over its buckets, sorted.
func (b *bucketed) orderIDs() []string {
	b.t.Helper()
	var ids []string
	for _, lane := range b.lanes {
		for id := range b.rdb.HGetAll(context.Background(), b.keys.Orders(lane)).Val() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
