package sale

import (
	"context"
	"errors"
	"strconv"
	"testing"
)

// A restock call retried after its reply was lost answers as its first run
// did, also when that run is what filled the stock to the ceiling; a
// refused run leaves no trace, so nothing would stop its retry either.
func TestRestockCeilingRetried(t *testing.T) {
	e := newEnv(t, Options{})
	e.mustSale("rt", `{"stock":`+strconv.Itoa(MaxStock-3)+`}`)
	run := func(op string, n int64) (*View, error) {
		t.Helper()
		keys := []string{e.keys.Meta("rt"), e.keys.Users("rt"), e.keys.Outbox("rt"), e.keys.Op("rt", op)}
		v, _, err := e.store.adminKeys(context.Background(), "rt", keys, "restock", n, MaxStock)
		return v, err
	}
	for i := 0; i < 2; i++ {
		if v, err := run("fills", 3); err != nil || v.Stock != MaxStock {
			t.Fatalf("run %d of the restock that fills: %+v %v", i, v, err)
		}
	}
	if _, err := run("passes", 1); !errors.Is(err, ErrStockCeiling) {
		t.Errorf("restock past the ceiling: %v, want ErrStockCeiling", err)
	}
	if n := e.rdb.Exists(context.Background(), e.keys.Op("rt", "passes")).Val(); n != 0 {
		t.Errorf("a refused restock left its key")
	}
	if v := e.view("rt"); v.Stock != MaxStock {
		t.Errorf("stock %d, want %d", v.Stock, MaxStock)
	}
}
