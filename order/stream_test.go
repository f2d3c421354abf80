package order

import (
	"errors"
	"testing"
	"time"
)

func TestFromStreamEntryBatch(t *testing.T) {
	v := map[string]any{"sale_id": "s", "reserved_at": "1735689600123", "state": "pending_payment", "pay_by": "1735689720123",
		"n": "2", "orders": "o1\tu1\t2\t7\t\no2\tu2\t1\t8\tkey with space"}
	os, err := FromStreamEntry(v)
	if err != nil {
		t.Fatal(err)
	}
	at, pb := time.UnixMilli(1735689600123).UTC(), time.UnixMilli(1735689720123).UTC()
	want := []Order{
		{OrderID: "o1", SaleID: "s", UserID: "u1", Quantity: 2, ReservedAt: at, State: StatePendingPayment, PayBy: pb, Seq: 7},
		{OrderID: "o2", SaleID: "s", UserID: "u2", Quantity: 1, ReservedAt: at, State: StatePendingPayment, PayBy: pb, Seq: 8, IdemKey: "key with space"},
	}
	if len(os) != 2 || os[0] != want[0] || os[1] != want[1] {
		t.Fatalf("got %+v\nwant %+v", os, want)
	}
	// One order's entry is FromStream's.
	one, err := FromStreamEntry(map[string]any{"order_id": "o3", "sale_id": "s", "user_id": "u", "quantity": "1", "reserved_at": "5"})
	if err != nil || len(one) != 1 || one[0].OrderID != "o3" || one[0].State != StateConfirmed {
		t.Fatalf("one order: %+v, %v", one, err)
	}
}

func TestFromStreamEntryRefusesWhole(t *testing.T) {
	good := func() map[string]any {
		return map[string]any{"sale_id": "s", "reserved_at": "5", "state": "confirmed", "pay_by": "0", "n": "2", "orders": "o1\tu1\t1\t1\t\no2\tu2\t1\t2\t"}
	}
	if _, err := FromStreamEntry(good()); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(map[string]any){
		"n differs":      func(v map[string]any) { v["n"] = "3" },
		"n missing":      func(v map[string]any) { delete(v, "n") },
		"no sale":        func(v map[string]any) { delete(v, "sale_id") },
		"bad state":      func(v map[string]any) { v["state"] = "shipped" },
		"four fields":    func(v map[string]any) { v["orders"] = "o1\tu1\t1\t1\no2\tu2\t1\t2\t" },
		"bad quantity":   func(v map[string]any) { v["orders"] = "o1\tu1\t0\t1\t\no2\tu2\t1\t2\t" },
		"bad id":         func(v map[string]any) { v["orders"] = "o1\tu 1\t1\t1\t\no2\tu2\t1\t2\t" },
		"bad seq":        func(v map[string]any) { v["orders"] = "o1\tu1\t1\t-1\t\no2\tu2\t1\t2\t" },
		"orders not str": func(v map[string]any) { v["orders"] = 5 },
	} {
		v := good()
		change(v)
		if os, err := FromStreamEntry(v); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %d orders, %v; want ErrMalformed", name, len(os), err)
		}
	}
}
