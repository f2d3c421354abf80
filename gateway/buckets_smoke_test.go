package gateway

import (
	"sync/atomic"
	"testing"
)

func TestBucketsSmoke(t *testing.T) {
	g := startGateway(t)
	sale := "bsmoke"
	g.mustSale(sale, `{"stock":1000,"per_user_limit":1,"buckets":3}`)
	var ok, sold, other atomic.Int64
	burst(10000, 64, func(i int) {
		r := g.buy(sale, "u"+itoa(i%5000), 1, "")
		switch {
		case r.code == 202:
			ok.Add(1)
		case r.status() == "sold_out":
			sold.Add(1)
		default:
			if other.Add(1) < 5 {
				t.Logf("%d %s", r.code, r.raw)
			}
		}
	})
	v := g.view(sale)
	t.Logf("ok %d sold_out %d other %d view %s", ok.Load(), sold.Load(), other.Load(), v.raw)
	if ok.Load() != 1000 || v.num("sold") != 1000 || v.num("buckets") != 3 {
		t.Fatalf("accepted %d", ok.Load())
	}
}
