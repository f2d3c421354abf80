package gateway

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/sale/saletest"
)

// Expiry (API.md "Orders and payment"): pays that race their orders'
// pay_by, and the sweepers that expire what was not paid, one gateway's
// or several's. The helpers are payment_test.go's.

// Invariant 8, pay against expiry: 1,000 pays fired within ±300 ms of their
// orders' pay_by. Every order ends exactly one of paid and expired, each
// pay's answer (200 paid, 409 order_expired) is its order's final state, a
// second pay answers the same, and the stock and the ledger agree
// (Invariant 1): the units of the expired are back, those of the paid are
// not.
func TestPayRacesExpiry(t *testing.T) { forEachMode(t, testPayRacesExpiry) }

func testPayRacesExpiry(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	const sale, n = "race", 1000
	g.mustSale(sale, `{"stock":1000,"per_user_limit":1,"payment_window":3}`)
	type placed struct {
		id    string
		payBy int64
	}
	var (
		mu     sync.Mutex
		orders []placed
	)
	saletest.Burst(n, 100, func(i int) {
		r := g.buy(sale, fmt.Sprintf("r%d", i), 1, "")
		switch r.code {
		case 202:
			mu.Lock()
			orders = append(orders, placed{r.str("order_id"), payBy(t, r)})
			mu.Unlock()
		case 503:
			// Promised nothing (a machine too loaded to answer in time):
			// the order, if Redis took it, is in the ledger and expires;
			// it takes no part in the race.
		default:
			t.Errorf("buy %d: %d %s", i, r.code, r.raw)
		}
	})
	if t.Failed() || len(orders) == 0 {
		t.FailNow()
	}
	// A pay the gateway answered 503 may or may not have run: the payment
	// system asks again (pay is idempotent), and the answer it then gets is
	// the decision.
	pay := func(id string) response {
		r := g.pay(sale, id)
		for i := 0; i < 20 && r.code == 503; i++ {
			time.Sleep(50 * time.Millisecond)
			r = g.pay(sale, id)
		}
		return r
	}
	answers := make([]response, len(orders))
	var wg sync.WaitGroup
	for i := range orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.UnixMilli(orders[i].payBy).Add(time.Duration(rand.IntN(601)-300) * time.Millisecond)
			time.Sleep(time.Until(at))
			answers[i] = pay(orders[i].id)
		}()
	}
	wg.Wait()
	waitPending(t, g, sale)
	l := saletest.CheckPayments(t, g.rdb, g.keys, sale)
	var paid, expired int
	for i, a := range answers {
		r := l.Records[orders[i].id]
		switch {
		case a.code == 200 && a.str("state") == order.StatePaid && r.State == order.StatePaid:
			paid++
		case a.code == 409 && a.status() == "order_expired" && r.State == order.StateExpired:
			expired++
		default:
			t.Errorf("order %d: pay answered %d %s, the order is %s", i, a.code, a.raw, r.State)
			continue
		}
		if again := pay(orders[i].id); again.code != a.code || !bytes.Equal(again.raw, a.raw) {
			t.Errorf("order %d: pay again answered %d %s, first %d %s", i, again.code, again.raw, a.code, a.raw)
		}
	}
	// Orders Redis took for a buy answered 503 expired with the rest.
	if paid+expired != len(orders) || l.ByState[order.StatePaid] != paid ||
		l.Sold != int64(paid) || l.Remaining != int64(n-paid) {
		t.Errorf("%d paid, %d expired of %d; sold %d, remaining %d, states %v",
			paid, expired, len(orders), l.Sold, l.Remaining, l.ByState)
	}
	t.Logf("%d orders: %d paid, %d expired", len(orders), paid, expired)
}

// The gateway's sweeper expires due orders by itself, reports the lag of
// each expiry behind its pay_by, and the per-sale payment series.
func TestSweeperMetrics(t *testing.T) {
	g := startGateway(t)
	g.mustSale("sm", `{"stock":10,"payment_window":1,"per_user_limit":10}`)
	for i := 0; i < 3; i++ {
		if r := g.buy("sm", "m", 1, ""); r.code != 202 {
			t.Fatalf("buy: %d %s", r.code, r.raw)
		}
	}
	wants := []string{
		`flashgate_sale_payment_orders{sale="sm",state="expired"} 3`,
		`flashgate_sale_payment_orders{sale="sm",state="pending_payment"} 0`,
		`flashgate_sale_payment_orders{sale="sm",state="paid"} 0`,
		`flashgate_sale_payment_overdue_seconds{sale="sm"} 0.000`,
		"flashgate_sweep_expired_total 3",
		"flashgate_sweep_lag_seconds_count 3",
	}
	var out string
	localstack.WaitFor(t, 20*time.Second, "the sweeper to expire and count 3 orders", func() bool {
		var b bytes.Buffer
		g.sweeper.WriteMetrics(&b)
		out = b.String()
		for _, w := range wants {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	})
	saletest.CheckPayments(t, g.rdb, g.keys, "sm")
}

// No single process in charge: two gateways on the same Redis keys both
// sweep, and between them every order that was not paid expires exactly
// once (Invariant 8), its units back once (Invariant 1).
func TestTwoGatewaysSweep(t *testing.T) {
	a := startGateway(t)
	b := startGateway(t, func(c *config.Config) { c.Redis.KeyPrefix = a.cfg.Redis.KeyPrefix })
	a.mustSale("both", `{"stock":300,"per_user_limit":1,"payment_window":1}`)
	o := newOutcomes()
	saletest.Burst(300, 60, func(i int) {
		g := a
		if i%2 == 1 {
			g = b
		}
		user := fmt.Sprintf("t%d", i)
		o.add(t, g.buy("both", user, 1, ""), user)
	})
	if n, _ := o.accepted(); n != 300 {
		t.Fatalf("accepted %d of 300: %v", n, o.byStatus)
	}
	waitPending(t, b, "both")
	l := saletest.CheckPayments(t, a.rdb, a.keys, "both")
	if l.ByState[order.StateExpired] != 300 || l.Sold != 0 || l.Remaining != 300 {
		t.Errorf("states %v, sold %d, remaining %d", l.ByState, l.Sold, l.Remaining)
	}
	var byA, byB float64
	localstack.WaitFor(t, 20*time.Second, "both sweepers to count their expiries", func() bool {
		byA, byB = a.scrape()["flashgate_sweep_expired_total"], b.scrape()["flashgate_sweep_expired_total"]
		return byA+byB == 300
	})
	t.Logf("gateway a expired %.0f orders, gateway b %.0f", byA, byB)
}
