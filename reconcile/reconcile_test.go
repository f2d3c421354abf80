package reconcile

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
)

// TestReconcile guards the checker of Invariant 3 (every 202 becomes exactly
// one MySQL row; no row exists without a reservation): each way the two
// sides can disagree is drift, and orders merely on their way are not.
func TestReconcile(t *testing.T) {
	tests := []struct {
		name  string
		setup func(e *env)
		drift bool
		check func(t *testing.T, r *Report)
	}{
		{"all in MySQL", func(e *env) { e.deliver("s", 100) }, false, func(t *testing.T, r *Report) {
			if !r.Drained() || r.Rows != 40 || r.Sold != r.Units || r.Buyers != r.Users {
				t.Fatalf("%+v", r)
			}
		}},
		{"some still in the outbox", func(e *env) { e.deliver("s", 25) }, false, func(t *testing.T, r *Report) {
			if r.OutboxEntries != 15 || r.Rows != 25 || r.Drained() {
				t.Fatalf("%+v", r)
			}
		}},
		{"in neither (in transit or lost)", func(e *env) {
			e.deliver("s", 30)
			msgs := e.rdb.XRangeN(context.Background(), e.keys.Outbox("s"), "-", "+", 1).Val()
			e.rdb.XDel(context.Background(), e.keys.Outbox("s"), msgs[0].ID)
		}, true, func(t *testing.T, r *Report) {
			if r.Missing != 1 || r.InTransit() == 0 {
				t.Fatalf("%+v", r)
			}
		}},
		{"a row Redis never accepted", func(e *env) {
			e.deliver("s", 100)
			o := order.Order{OrderID: "planted", SaleID: "s", UserID: "u0", Quantity: 1, ReservedAt: time.Now()}
			if _, err := orderdb.WriteOrders(context.Background(), e.db, []order.Order{o}); err != nil {
				e.t.Fatal(err)
			}
		}, true, func(t *testing.T, r *Report) {
			if r.Unknown != 1 || len(r.Examples) != 1 || r.Examples[0] != "unknown planted" {
				t.Fatalf("%+v", r)
			}
		}},
		{"ledger tampered", func(e *env) {
			e.deliver("s", 100)
			e.db.Exec(`UPDATE sale_ledger SET units = units + 1 WHERE sale_id = 's'`)
		}, true, nil},
		{"row changed", func(e *env) {
			e.deliver("s", 100)
			e.db.Exec(`UPDATE orders SET user_id = 'someone' WHERE order_id = 's-o3'`)
		}, true, func(t *testing.T, r *Report) {
			if r.Mismatched != 1 {
				t.Fatalf("%+v", r)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.sell("s", 40)
			tt.setup(e)
			r, err := Sale(context.Background(), e.rdb, e.keys, e.db, "s")
			if err != nil {
				t.Fatal(err)
			}
			if d := r.Drift(); (len(d) > 0) != tt.drift {
				t.Fatalf("drift %q, want drift: %v (report %+v)", d, tt.drift, r)
			}
			if r.Sold != 60 || r.Accepted != 40 || r.AcceptedUnits != 60 || r.UserUnits != 60 || r.Buyers != 40 {
				t.Fatalf("Redis figures %+v", r)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// TestReconcileBadRecord: a value of the orders hash that is not a record
// ("q:QTY:USER") is drift of its own, named, and its row in MySQL is neither
// unknown nor mismatched (there is nothing to compare it with).
func TestReconcileBadRecord(t *testing.T) {
	tests := []struct {
		name, value string
	}{
		{"garbage", "garbage"},
		{"no user", "q:1:"},
		{"bad quantity", "c:x:u3"},
		{"unknown state", "z:1:u3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.sell("s", 40)
			e.deliver("s", 100)
			if err := e.rdb.HSet(context.Background(), e.keys.Orders("s"), "s-o3", tt.value).Err(); err != nil {
				t.Fatal(err)
			}
			r, err := Sale(context.Background(), e.rdb, e.keys, e.db, "s")
			if err != nil {
				t.Fatal(err)
			}
			if r.BadRecords != 1 || r.Accepted != 40 || r.Missing != 0 || r.Unknown != 0 || r.Mismatched != 0 ||
				!slices.Equal(r.Examples, []string{"bad s-o3"}) {
				t.Fatalf("%+v", r)
			}
			if d := r.Drift(); !slices.Contains(d, "1 orders hash values are not order records") {
				t.Fatalf("drift %q does not name the bad record", d)
			}
		})
	}
}

func TestReconcileNoSale(t *testing.T) {
	e := newEnv(t)
	if _, err := Sale(context.Background(), e.rdb, e.keys, e.db, "nope"); !errors.Is(err, ErrNoSale) {
		t.Fatalf("Sale = %v, want ErrNoSale", err)
	}
}

// TestReconcileStates guards the checker of Invariant 8 (MySQL's state
// follows Redis's and never leaves a final one) and of Invariant 1 with
// payment (sold counts live units only): a sale with a payment window, its
// 40 pending orders (60 units) in MySQL, then paid and cancelled in Redis.
// A change of state still in the outbox is in transit, not drift; one that
// reached neither the outbox nor MySQL is drift, named with its order; so is
// a final state in MySQL that Redis does not have, and a Redis counter that
// disagrees with the orders.
func TestReconcileStates(t *testing.T) {
	// o1 and o3 have quantity 2, o2 and o4 quantity 1.
	tests := []struct {
		name  string
		setup func(e *env)
		drift []string // substrings of the drift, in order; none: no drift
		check func(t *testing.T, r *Report)
	}{
		{"every change delivered", func(e *env) {
			e.change("s", "pay", "s-o1")
			e.change("s", "cancel", "s-o2")
			e.change("s", "cancel", "s-o3")
			e.deliver("s", 100)
		}, nil, func(t *testing.T, r *Report) {
			if !r.Drained() || r.Sold != 57 || r.UnitsLive != 57 || r.Units != 60 || r.LedgerUnits != 60 ||
				r.RowStates[order.StatePaid] != 1 || r.RowStates[order.StateCancelled] != 2 || r.RowStates[order.StatePendingPayment] != 37 ||
				r.States[order.StateCancelled] != 2 || r.Counters[order.StateCancelled] != 2 || r.Due != 37 {
				t.Fatalf("%+v", r)
			}
		}},
		{"changes still in the outbox", func(e *env) {
			e.change("s", "pay", "s-o1")
			e.change("s", "cancel", "s-o3")
		}, nil, func(t *testing.T, r *Report) {
			if r.Drained() || r.StateInTransit != 2 || r.StateDiffers != 0 || r.OutboxEntries != 2 || r.OutboxOrders != 2 ||
				r.OutboxUnits != -2 || r.InTransit() != 0 || r.Sold != 58 || r.UnitsLive != 60 {
				t.Fatalf("%+v", r)
			}
		}},
		{"a payment lost on its way", func(e *env) {
			e.change("s", "pay", "s-o1")
			e.dropOutbox("s")
		}, []string{"1 orders have another state in MySQL than in Redis"}, func(t *testing.T, r *Report) {
			if r.StateDiffers != 1 || r.InTransit() != 0 || !slices.Equal(r.Examples, []string{"state s-o1 (redis paid, mysql pending_payment)"}) {
				t.Fatalf("%+v", r)
			}
		}},
		{"a cancellation lost on its way", func(e *env) {
			e.change("s", "cancel", "s-o3")
			e.dropOutbox("s")
		}, []string{"sold 58 ≠ MySQL live units 60 + outbox units 0 (difference -2", "1 orders have another state"}, func(t *testing.T, r *Report) {
			if r.StateDiffers != 1 || !slices.Equal(r.Examples, []string{"state s-o3 (redis cancelled, mysql pending_payment)"}) {
				t.Fatalf("%+v", r)
			}
		}},
		{"a final state in MySQL that Redis does not have", func(e *env) {
			e.change("s", "pay", "s-o4")
			e.deliver("s", 100)
			e.db.Exec(`UPDATE orders SET state = 'expired' WHERE order_id = 's-o4'`)
		}, []string{"sold 60 ≠ MySQL live units 59", "1 orders have another state"}, func(t *testing.T, r *Report) {
			if !slices.Equal(r.Examples, []string{"state s-o4 (redis paid, mysql expired; final in MySQL, never resolves)"}) {
				t.Fatalf("%+v", r)
			}
		}},
		{"a Redis counter off", func(e *env) {
			e.change("s", "pay", "s-o1")
			e.deliver("s", 100)
			e.rdb.HIncrBy(context.Background(), e.keys.Meta("s"), "paid", 1)
		}, []string{"Redis: meta counter paid 2 ≠ 1 orders paid"}, nil},
		{"an order missing from the due set", func(e *env) {
			e.rdb.ZRem(context.Background(), e.keys.Due("s"), "s-o7")
		}, []string{"Redis: due set holds 39 orders ≠ 40 orders pending_payment"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.sellWindow("s", 40, 600)
			e.deliver("s", 100)
			tt.setup(e)
			r, err := Sale(context.Background(), e.rdb, e.keys, e.db, "s")
			if err != nil {
				t.Fatal(err)
			}
			wantDrift(t, r, tt.drift)
			if r.Accepted != 40 || r.AcceptedUnits != 60 || r.Rows != 40 || r.LedgerOrders != 40 {
				t.Fatalf("figures %+v", r)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// TestReconcileOldRecords: a sale written before payment windows (records
// "F:QTY:USER", outbox entries without state, no counters, no due set)
// reconciles as confirmed orders, without drift.
func TestReconcileOldRecords(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	k := e.keys
	e.rdb.HSet(ctx, k.Meta("old"), "stock", 10, "sold", 3, "limit", 5)
	e.rdb.HSet(ctx, k.Users("old"), "u1", 1, "u2", 2)
	e.rdb.HSet(ctx, k.Orders("old"), "old-1", "c:1:u1", "old-2", "q:2:u2")
	e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.Outbox("old"), Values: []any{
		"order_id", "old-2", "sale_id", "old", "user_id", "u2", "quantity", "2", "reserved_at", "1735689600123"}})
	if _, err := orderdb.WriteOrders(ctx, e.db, []order.Order{{OrderID: "old-1", SaleID: "old", UserID: "u1", Quantity: 1,
		ReservedAt: time.UnixMilli(1735689600000)}}); err != nil {
		t.Fatal(err)
	}
	r, err := Sale(ctx, e.rdb, e.keys, e.db, "old")
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Drift(); len(d) > 0 {
		t.Fatalf("drift %q (report %+v)", d, r)
	}
	if r.States[order.StateConfirmed] != 2 || r.LiveUnits != 3 || r.OutboxUnits != 2 || r.UnitsLive != 1 {
		t.Fatalf("%+v", r)
	}
	e.deliver("old", 10)
	if r, err = Sale(ctx, e.rdb, e.keys, e.db, "old"); err != nil || len(r.Drift()) > 0 || !r.Drained() {
		t.Fatalf("after delivery: %v, %+v", err, r)
	}
}

// TestReconcileOrderView holds the order view's status against MySQL: an
// order in MySQL whose mark was lost reads queued, is counted (not drift:
// the order is right) and MarkQueued marks it, after which the view says
// created; an order that reads created with no row in MySQL is drift,
// whether its record says so (the flag of a release before the created
// set) or the created set does. A record flagged "c" with a row is right.
func TestReconcileOrderView(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.sell("s", 10)
	os := e.deliver("s", 100)
	lost, planted := os[0].OrderID, os[1].OrderID
	e.rdb.SRem(ctx, e.keys.Created("s"), lost)
	r, err := Sale(ctx, e.rdb, e.keys, e.db, "s")
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Drift(); len(d) > 0 || r.Queued != 1 || r.CreatedNoRow != 0 || !slices.Equal(r.Examples, []string{"queued " + lost}) {
		t.Fatalf("a lost mark: drift %q, report %+v; want 1 queued, no drift", d, r)
	}
	if n, err := MarkQueued(ctx, e.rdb, e.keys, r); err != nil || n != 1 {
		t.Fatalf("MarkQueued = %d, %v; want 1", n, err)
	}
	if r, err = Sale(ctx, e.rdb, e.keys, e.db, "s"); err != nil || r.Queued != 0 || len(r.Drift()) > 0 {
		t.Fatalf("after MarkQueued: %v, %+v", err, r)
	}

	// The rows of two orders gone from MySQL: one read created through the
	// set, the other through its record's flag.
	rec, _ := e.rdb.HGet(ctx, e.keys.Orders("s"), os[2].OrderID).Result()
	e.rdb.HSet(ctx, e.keys.Orders("s"), os[2].OrderID, "c"+rec[1:])
	for _, id := range []string{planted, os[2].OrderID} {
		if _, err := e.db.Exec(`DELETE FROM orders WHERE order_id = ?`, id); err != nil {
			t.Fatal(err)
		}
	}
	if r, err = Sale(ctx, e.rdb, e.keys, e.db, "s"); err != nil {
		t.Fatal(err)
	}
	if r.CreatedNoRow != 2 || !slices.ContainsFunc(r.Drift(), func(d string) bool { return strings.Contains(d, "read created") }) {
		t.Fatalf("created without rows: drift %q, report %+v", r.Drift(), r)
	}
}
