package salerows_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
	"github.com/flashgate/flashgate/orderdb/orderdbtest"
	"github.com/flashgate/flashgate/orderdb/salerows"
)

// TestMain runs the tests under the fault lock (shared: they use MariaDB
// and stop nothing) and fails the package when a goroutine outlives them.
func TestMain(m *testing.M) { localstack.Main(m, localstack.UsesServices()) }

// TestReadAndCount: the rows of a sale, and no other's, as written; their
// count and units; every row of the table; a user's units summed over
// their orders.
func TestReadAndCount(t *testing.T) {
	db := orderdbtest.Open(t)
	ctx := context.Background()
	a, b := orderdbtest.Orders("a", 7), orderdbtest.Orders("b", 3)
	a[1].UserID = a[0].UserID // two orders of one buyer
	if _, err := orderdb.WriteOrders(ctx, db, slices.Concat(a, b)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		sale string
		want []order.Order
	}{
		{"a sale", "a", a},
		{"another", "b", b},
		{"none", "c", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := salerows.Read(ctx, db, tc.sale)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, rows, tc.want)
			n, units, err := salerows.Count(ctx, db, tc.sale)
			if err != nil {
				t.Fatal(err)
			}
			var wantUnits int64
			for _, o := range tc.want {
				wantUnits += int64(o.Quantity)
			}
			if n != int64(len(tc.want)) || units != wantUnits {
				t.Errorf("Count: %d rows, %d units; want %d, %d", n, units, len(tc.want), wantUnits)
			}
		})
	}
	all, err := salerows.ReadAll(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, all, slices.Concat(a, b))

	// Owners, given a row twice: one buyer per order, the units summed
	// per buyer, the order named as a duplicate.
	rows, err := salerows.Read(ctx, db, "a")
	if err != nil {
		t.Fatal(err)
	}
	twice := rows[0]
	byID, units, dups := salerows.Owners(append(rows, twice))
	want := map[string]int64{}
	for _, o := range a {
		want[o.UserID] += int64(o.Quantity)
		if byID[o.OrderID] != o.UserID {
			t.Errorf("Owners: order %s is %q's, want %s", o.OrderID, byID[o.OrderID], o.UserID)
		}
	}
	want[twice.UserID] += twice.Quantity
	if len(byID) != len(a) || !slices.Equal(dups, []string{twice.OrderID}) || !maps.Equal(units, want) {
		t.Errorf("Owners: %d orders, units %v, duplicates %v; want %d, %v, [%s]", len(byID), units, dups, len(a), want, twice.OrderID)
	}
}

func checkRows(t *testing.T, rows []salerows.Row, want []order.Order) {
	t.Helper()
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for _, o := range want {
		r := rowOf(rows, o.OrderID)
		if r.SaleID != o.SaleID || r.UserID != o.UserID || r.Quantity != int64(o.Quantity) || r.State != o.State {
			t.Errorf("order %s: row %+v, want %+v", o.OrderID, r, o)
		}
	}
}

func rowOf(rows []salerows.Row, id string) salerows.Row {
	for _, r := range rows {
		if r.OrderID == id {
			return r
		}
	}
	return salerows.Row{}
}
