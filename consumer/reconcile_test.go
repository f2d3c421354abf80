package consumer

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// sell creates a sale and reserves n orders of
// quantity 1 or 2 with the reserve script, as the gateway does.
func (e *env) sell(sale string, n int) {
	e.t.Helper()
	ctx := context.Background()
	k := e.keys
	if err := e.rdb.HSet(ctx, k.Meta(sale), "stock", 100000, "sold", 0, "limit", 10, "starts", 0, "ends", 0, "locked", 0).Err(); err != nil {
		e.t.Fatal(err)
	}
	args := []any{sale, 60}
	for i := range n {
		args = append(args, sale+"-o"+strconv.Itoa(i), "u"+strconv.Itoa(i), 1+i%2, 0)
	}
	v, err := e.loader.Run(ctx, scripts.Reserve, []string{k.Meta(sale), k.Users(sale), k.Outbox(sale), k.Orders(sale)}, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	for i, x := range v.([]any) {
		if i%2 == 0 && x.(int64) != 0 {
			e.t.Fatalf("reservation %d: code %d", i/2, x)
		}
	}
}

// deliver moves up to n outbox entries into MySQL as the relay and the
// consumer would, and returns them.
func (e *env) deliver(sale string, n int64) []order.Order {
	e.t.Helper()
	ctx := context.Background()
	msgs, err := e.rdb.XRangeN(ctx, e.keys.Outbox(sale), "-", "+", n).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	var os []order.Order
	for _, m := range msgs {
		o, err := order.FromStream(m.Values)
		if err != nil {
			e.t.Fatal(err)
		}
		os = append(os, o)
		e.rdb.XDel(ctx, e.keys.Outbox(sale), m.ID)
	}
	if _, err := WriteOrders(ctx, e.db, os); err != nil {
		e.t.Fatal(err)
	}
	return os
}

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
			if _, err := WriteOrders(context.Background(), e.db, []order.Order{o}); err != nil {
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
			r, err := Reconcile(context.Background(), e.rdb, e.keys, e.db, "s")
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

func TestReconcileNoSale(t *testing.T) {
	e := newEnv(t)
	if _, err := Reconcile(context.Background(), e.rdb, e.keys, e.db, "nope"); !errors.Is(err, ErrNoSale) {
		t.Fatalf("Reconcile = %v, want ErrNoSale", err)
	}
}
