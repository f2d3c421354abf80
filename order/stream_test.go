package order

import (
	"errors"
	"fmt"
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

// FuzzFromStreamEntry: whatever a batch entry holds, FromStreamEntry
// either refuses it whole or returns exactly n valid orders, whose wire
// forms go through a batch message and back unchanged.
func FuzzFromStreamEntry(f *testing.F) {
	f.Add("s", "5", "confirmed", "0", "2", "o1\tu1\t1\t1\t\no2\tu2\t3\t2\tk")
	f.Add("s", "5", "pending_payment", "9", "1", "o1\tu1\t1\t1\tkey")
	f.Fuzz(func(t *testing.T, sale, at, state, payBy, n, lines string) {
		os, err := FromStreamEntry(map[string]any{"sale_id": sale, "reserved_at": at, "state": state, "pay_by": payBy, "n": n, "orders": lines})
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if fmt.Sprint(len(os)) != n {
			t.Fatalf("%d orders, n %q", len(os), n)
		}
		var bodies [][]byte
		for _, o := range os {
			if err := o.Validate(); err != nil {
				t.Fatalf("invalid order %+v: %v", o, err)
			}
			b, err := o.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, b)
		}
		parts, err := Split(AppendBatch(nil, bodies...))
		if err != nil || len(parts) != len(os) {
			t.Fatalf("Split: %d parts, %v", len(parts), err)
		}
		for i, p := range parts {
			if o, err := Unmarshal(p); err != nil || o != os[i] {
				t.Fatalf("part %d: %+v, %v; want %+v", i, o, err, os[i])
			}
		}
	})
}
