package reconcile

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

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
