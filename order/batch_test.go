package order

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBatchRoundTrip(t *testing.T) {
	var bodies [][]byte
	var want []Order
	for i := 0; i < 3; i++ {
		o := Order{OrderID: fmt.Sprintf("o%d", i), SaleID: "s", UserID: fmt.Sprintf("u%d", i), Quantity: i + 1,
			ReservedAt: time.UnixMilli(1735689600123 + int64(i)).UTC(), State: StateConfirmed, Seq: int64(i + 1)}
		b, err := o.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
		want = append(want, o)
	}
	for n := 1; n <= 3; n++ {
		body := AppendBatch(nil, bodies[:n]...)
		if (n == 1) != (body[0] == '{') {
			t.Fatalf("%d orders: body %s", n, body)
		}
		parts, err := Split(body)
		if err != nil {
			t.Fatalf("%d orders: %v", n, err)
		}
		if len(parts) != n {
			t.Fatalf("%d orders: %d parts", n, len(parts))
		}
		for i, p := range parts {
			o, err := Unmarshal(p)
			if err != nil {
				t.Fatalf("part %d: %v", i, err)
			}
			if o != want[i] {
				t.Errorf("part %d: %+v, want %+v", i, o, want[i])
			}
		}
	}
}

func TestSplitRefusesWhole(t *testing.T) {
	for _, body := range []string{`[]`, `[1,2]`, `[{"order_id":"a"},"x"]`, `[{"order_id":"a"}`, `[{}]]`, ` [ ] `} {
		if parts, err := Split([]byte(body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Split(%s) = %d parts, %v; want ErrMalformed", body, len(parts), err)
		}
	}
	// An element that is an object but not an order is Unmarshal's to
	// refuse, alone: its neighbours still decode.
	parts, err := Split([]byte(`[{"order_id":"a"}, {"order_id":"b","sale_id":"s","user_id":"u","quantity":1,"reserved_at":5}]`))
	if err != nil || len(parts) != 2 {
		t.Fatalf("Split: %d parts, %v", len(parts), err)
	}
	if _, err := Unmarshal(parts[0]); !errors.Is(err, ErrMalformed) {
		t.Errorf("first element: %v, want ErrMalformed", err)
	}
	if o, err := Unmarshal(parts[1]); err != nil || o.OrderID != "b" {
		t.Errorf("second element: %+v, %v", o, err)
	}
	// Not an array: the body is one order, for Unmarshal to judge.
	if parts, err := Split([]byte(`{"x":1}`)); err != nil || len(parts) != 1 {
		t.Errorf("Split of an object: %d parts, %v", len(parts), err)
	}
}

func TestCount(t *testing.T) {
	for _, c := range []struct {
		h    map[string]any
		want int
	}{
		{nil, 1}, {map[string]any{}, 1}, {map[string]any{CountHeader: int32(64)}, 64}, {map[string]any{CountHeader: int64(3)}, 3},
		{map[string]any{CountHeader: "12"}, 1}, {map[string]any{CountHeader: int32(0)}, 1}, {map[string]any{CountHeader: int32(-5)}, 1},
	} {
		if got := Count(c.h); got != c.want {
			t.Errorf("Count(%v) = %d, want %d", c.h, got, c.want)
		}
	}
}
