package gateway

import (
	"bytes"
	"context"
	"fmt"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/sale/saletest"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// The tests of orders and payment (API.md "Orders and payment"): against
// the real Redis of `make up`, through the gateway's HTTP API where the
// behaviour is the API's, through the Store where the test must hold the
// sweeper off (a gateway always runs one).

func (g *testGateway) pay(sale, id string) response {
	return g.do("POST", g.admin+"/admin/v1/sales/"+sale+"/orders/"+id+"/pay", "", auth)
}

func (g *testGateway) cancel(sale, id string) response {
	return g.do("POST", g.admin+"/admin/v1/sales/"+sale+"/orders/"+id+"/cancel", "", auth)
}

func (g *testGateway) orderView(sale, id string) response {
	return g.do("GET", g.base+"/v1/sales/"+sale+"/orders/"+id, "", nil)
}

// payBy reads a pay_by of an answer: Unix ms, 0 for null. A pay_by that is
// not RFC 3339 with exactly milliseconds in UTC fails the test.
func payBy(t testing.TB, r response) int64 {
	t.Helper()
	v, present := r.body["pay_by"]
	if !present {
		t.Errorf("answer without pay_by: %s", r.raw)
		return 0
	}
	if v == nil {
		return 0
	}
	s, _ := v.(string)
	at, err := time.Parse(payByLayout, s)
	if err != nil || !strings.HasSuffix(s, "Z") || len(s) != len("2006-01-02T15:04:05.000Z") {
		t.Errorf("pay_by %q is not RFC 3339 with milliseconds in UTC (%v)", s, err)
	}
	return at.UnixMilli()
}

// waitPending waits until the sale has no order awaiting payment.
func waitPending(t *testing.T, g *testGateway, sale string) {
	t.Helper()
	localstack.WaitFor(t, 20*time.Second, "orders awaiting payment to expire", func() bool {
		v := g.view(sale)
		return v.code == 200 && v.num("pending_payment") == 0
	})
}

// Invariants 1, 2 and 8, the life of a sale with a payment window: of 100
// orders half are paid, ten cancelled, the rest expire; the units of the
// cancelled and the expired go back to the stock and to their buyers'
// allowance, exactly once; new buyers get exactly those units, and the
// cancelled buyers can buy again, while the payers cannot.
func TestPaymentLifecycle(t *testing.T) { forEachMode(t, testPaymentLifecycle) }

func testPaymentLifecycle(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	const sale = "pw"
	g.mustSale(sale, `{"stock":100,"per_user_limit":1,"payment_window":2}`)
	if v := g.view(sale); v.num("payment_window") != 2 || v.num("pending_payment") != 0 || v.num("buckets") != 1 {
		t.Fatalf("view: %s", v.raw)
	}
	ids := make([]string, 100)
	var mu sync.Mutex
	saletest.Burst(100, 50, func(i int) {
		r := g.buy(sale, fmt.Sprintf("u%d", i), 1, "")
		if r.code != 202 || r.str("state") != order.StatePendingPayment || payBy(t, r) == 0 {
			t.Errorf("buy %d: %d %s", i, r.code, r.raw)
			return
		}
		mu.Lock()
		ids[i] = r.str("order_id")
		mu.Unlock()
	})
	if t.Failed() {
		t.FailNow()
	}
	if r := g.buy(sale, "late", 1, ""); r.code != 410 {
		t.Fatalf("buy past the stock: %d %s", r.code, r.raw)
	}
	l := saletest.CheckPayments(t, g.rdb, g.keys, sale)
	for id, r := range l.Records {
		if r.PayBy != r.ReservedAt+2000 {
			t.Errorf("order %s: pay_by %d, reserved at %d with a 2 s window", id, r.PayBy, r.ReservedAt)
		}
	}
	if v := g.view(sale); v.num("pending_payment") != 100 || v.num("sold") != 100 {
		t.Fatalf("view after the buys: %s", v.raw)
	}
	// Paid and cancelled at once, well before the 2 s are up.
	saletest.Burst(60, 30, func(i int) {
		if i < 50 {
			if r := g.pay(sale, ids[i]); r.code != 200 || r.str("state") != order.StatePaid || payBy(t, r) != 0 {
				t.Errorf("pay %d: %d %s", i, r.code, r.raw)
			}
		} else if r := g.cancel(sale, ids[i]); r.code != 200 || r.str("state") != order.StateCancelled {
			t.Errorf("cancel %d: %d %s", i, r.code, r.raw)
		}
	})
	waitPending(t, g, sale)
	l = saletest.CheckPayments(t, g.rdb, g.keys, sale)
	want := map[string]int{order.StatePaid: 50, order.StateCancelled: 10, order.StateExpired: 40}
	for state, n := range want {
		if l.ByState[state] != n {
			t.Errorf("%d orders %s, want %d (%v)", l.ByState[state], state, n, l.ByState)
		}
	}
	if l.Sold != 50 || l.Remaining != 50 {
		t.Errorf("sold %d remaining %d after expiry, want 50 and 50", l.Sold, l.Remaining)
	}
	t.Logf("the latest of 40 expiries came %d ms after its pay_by", l.MaxLag)
	if r := g.pay(sale, ids[99]); r.code != 409 || r.status() != "order_expired" {
		t.Errorf("pay of an expired order: %d %s", r.code, r.raw)
	}
	if r := g.orderView(sale, ids[99]); r.str("state") != order.StateExpired || payBy(t, r) != 0 {
		t.Errorf("view of an expired order: %d %s", r.code, r.raw)
	}
	// A payer holds its unit still; the cancelled buyers have theirs back.
	if r := g.buy(sale, "u0", 1, ""); r.code != 409 || r.status() != "limit_reached" {
		t.Errorf("a payer buys again: %d %s", r.code, r.raw)
	}
	for i := 50; i < 60; i++ {
		if r := g.buy(sale, fmt.Sprintf("u%d", i), 1, ""); r.code != 202 {
			t.Errorf("cancelled buyer %d buys again: %d %s", i, r.code, r.raw)
		}
	}
	// The other 40 units go to exactly 40 of a crowd of expired and new buyers.
	o := newOutcomes()
	saletest.Burst(100, 50, func(i int) {
		user := fmt.Sprintf("u%d", 60+i) // u60..u99 expired, the rest new
		o.add(t, g.buy(sale, user, 1, ""), user)
	})
	if n, units := o.accepted(); n != 40 || units != 40 || len(o.fivexx) > 0 {
		t.Errorf("crowd after expiry: %d orders, %d units, %v", n, units, o.byStatus)
	}
	l = saletest.CheckPayments(t, g.rdb, g.keys, sale)
	if l.Sold != 100 || l.Remaining != 0 || l.ByState[order.StatePendingPayment] != 50 {
		t.Errorf("sold %d remaining %d pending %d at the end", l.Sold, l.Remaining, l.ByState[order.StatePendingPayment])
	}
}

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

// Invariant 8 and API.md's answers of pay and cancel: each is idempotent
// (again: 200, the same view), each conflict has its status, an unknown
// order or sale is 404, and every change is an audit event (a repeat or a
// refusal is not).
func TestPayCancelAnswers(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	g := startGatewayLog(t, zap.New(core))
	g.mustSale("pc", `{"stock":10,"per_user_limit":5,"payment_window":60}`)
	g.mustSale("now", `{"stock":10,"per_user_limit":5}`)
	g.mustSale("short", `{"stock":10,"per_user_limit":5,"payment_window":1}`)
	buy := func(sale, user string) (string, response) {
		t.Helper()
		r := g.buy(sale, user, 2, "")
		if r.code != 202 {
			t.Fatalf("buy on %s: %d %s", sale, r.code, r.raw)
		}
		return r.str("order_id"), r
	}
	paid, _ := buy("pc", "ann")
	cancelled, _ := buy("pc", "bob")
	pending, accepted := buy("pc", "cy")
	confirmed, _ := buy("now", "dee")
	confirmed2, _ := buy("now", "eve")
	short, _ := buy("short", "fay")

	// The order view of a pending order has its pay_by, which is the 202's.
	v := g.orderView("pc", pending)
	if v.code != 200 || v.status() != "queued" || v.str("state") != order.StatePendingPayment ||
		v.str("user_id") != "cy" || v.num("quantity") != 2 || payBy(t, v) != payBy(t, accepted) {
		t.Errorf("order view: %d %s (202 %s)", v.code, v.raw, accepted.raw)
	}

	first := g.pay("pc", paid)
	rows := []struct {
		name   string
		got    response
		code   int
		status string
		state  string
	}{
		{"pay", first, 200, "queued", order.StatePaid},
		{"pay again", g.pay("pc", paid), 200, "queued", order.StatePaid},
		{"cancel a paid order", g.cancel("pc", paid), 409, "order_paid", ""},
		{"cancel", g.cancel("pc", cancelled), 200, "queued", order.StateCancelled},
		{"cancel again", g.cancel("pc", cancelled), 200, "queued", order.StateCancelled},
		{"pay a cancelled order", g.pay("pc", cancelled), 409, "order_cancelled", ""},
		{"pay a confirmed order", g.pay("now", confirmed), 409, "conflict", ""},
		{"cancel a confirmed order", g.cancel("now", confirmed), 200, "queued", order.StateCancelled},
		{"pay an unknown order", g.pay("pc", "nope"), 404, "not_found", ""},
		{"cancel an unknown order", g.cancel("pc", "nope"), 404, "not_found", ""},
		{"pay on an unknown sale", g.pay("nosale", paid), 404, "not_found", ""},
		{"pay an order of another sale", g.pay("now", paid), 404, "not_found", ""},
		{"bad order id", g.do("POST", g.admin+"/admin/v1/sales/pc/orders/%2E%2E/pay", "", auth), 400, "bad_request", ""},
		{"no token", g.do("POST", g.admin+"/admin/v1/sales/pc/orders/"+pending+"/cancel", "", nil), 401, "unauthorized", ""},
	}
	for _, r := range rows {
		if r.got.code != r.code || r.got.status() != r.status || r.state != "" && r.got.str("state") != r.state {
			t.Errorf("%s: %d %s, want %d %s %s", r.name, r.got.code, r.got.raw, r.code, r.status, r.state)
		}
		if r.code == 200 && payBy(t, r.got) != 0 {
			t.Errorf("%s: pay_by of a %s order: %s", r.name, r.state, r.got.raw)
		}
	}
	if again := g.pay("pc", paid); !bytes.Equal(again.raw, first.raw) {
		t.Errorf("pay again: %s, first %s", again.raw, first.raw)
	}
	// The cancelled units are back, to the stock and to the buyer.
	if v := g.view("pc"); v.num("sold") != 4 || v.num("pending_payment") != 1 || v.num("buyers") != 2 {
		t.Errorf("view after pay and cancel: %s", v.raw)
	}
	if v := g.view("now"); v.num("sold") != 2 || v.num("remaining") != 8 {
		t.Errorf("view after cancelling a confirmed order: %s", v.raw)
	}
	if r := g.buy("now", "dee", 5, ""); r.code != 202 {
		t.Errorf("the buyer of a cancelled confirmed order buys its allowance: %d %s", r.code, r.raw)
	}
	// An expired order: paying or cancelling it is order_expired, whether
	// the sweeper or the call itself expired it.
	waitPending(t, g, "short")
	for _, r := range []response{g.pay("short", short), g.cancel("short", short), g.pay("short", short)} {
		if r.code != 409 || r.status() != "order_expired" {
			t.Errorf("on an expired order: %d %s", r.code, r.raw)
		}
	}
	if r := g.cancel("now", confirmed2); r.code != 200 {
		t.Errorf("cancel: %d %s", r.code, r.raw)
	}
	for _, sale := range []string{"pc", "now", "short"} {
		saletest.CheckPayments(t, g.rdb, g.keys, sale)
	}

	var actions []string
	for _, e := range logs.FilterMessage("audit").All() {
		f := e.ContextMap()
		if strings.HasPrefix(f["action"].(string), "order.") {
			actions = append(actions, fmt.Sprint(f["action"], " ", f["order_id"], " ", f["state"]))
		}
	}
	wantActions := []string{
		"order.pay " + paid + " paid",
		"order.cancel " + cancelled + " cancelled",
		"order.cancel " + confirmed + " cancelled",
		"order.cancel " + confirmed2 + " cancelled",
	}
	if fmt.Sprint(actions) != fmt.Sprint(wantActions) {
		t.Errorf("audit events %q, want %q", actions, wantActions)
	}
}

// A window of 0 (the default) is the sale of before payment windows:
// orders confirmed at once, pay_by null, nothing awaiting payment, the
// ledger as it always was (Invariant 1). A window set by an update applies
// to the orders accepted after it, and stays until changed.
func TestNoPaymentWindow(t *testing.T) { forEachMode(t, testNoPaymentWindow) }

func testNoPaymentWindow(t *testing.T, mode gwOption) {
	g := startGateway(t, mode)
	g.mustSale("zero", `{"stock":50,"per_user_limit":2}`)
	g.mustSale("zero2", `{"stock":50,"payment_window":0,"buckets":1}`)
	for _, sale := range []string{"zero", "zero2"} {
		v := g.view(sale)
		if v.num("payment_window") != 0 || v.num("pending_payment") != 0 || v.num("buckets") != 1 {
			t.Errorf("%s view: %s", sale, v.raw)
		}
		for i := 0; i < 10; i++ {
			r := g.buy(sale, fmt.Sprintf("z%d", i), 1, "")
			if r.code != 202 || r.str("state") != order.StateConfirmed || payBy(t, r) != 0 {
				t.Fatalf("buy: %d %s", r.code, r.raw)
			}
			if i == 0 {
				o := g.orderView(sale, r.str("order_id"))
				if o.str("state") != order.StateConfirmed || payBy(t, o) != 0 {
					t.Errorf("order view: %s", o.raw)
				}
			}
		}
		if sold := g.checkLedger(sale); sold != 10 {
			t.Errorf("%s: sold %d", sale, sold)
		}
		if n := g.rdb.Exists(context.Background(), g.keys.Due(sale)).Val(); n != 0 {
			t.Errorf("%s has a due set", sale)
		}
	}
	if g.rdb.SIsMember(context.Background(), g.keys.Paying(), "zero").Val() {
		t.Errorf("a sale without a window is among the paying sales")
	}
	// A window from an update on: a confirmed order stays confirmed.
	if r := g.put("zero", `{"payment_window":60}`); r.code != 200 || r.num("payment_window") != 60 {
		t.Fatalf("update: %d %s", r.code, r.raw)
	}
	if r := g.put("zero", `{"per_user_limit":3}`); r.code != 200 || r.num("payment_window") != 60 {
		t.Fatalf("update without the window: %d %s", r.code, r.raw)
	}
	r := g.buy("zero", "z0", 1, "")
	if r.code != 202 || r.str("state") != order.StatePendingPayment || payBy(t, r) == 0 {
		t.Fatalf("buy after the window: %d %s", r.code, r.raw)
	}
	if r := g.put("zero", `{"payment_window":0}`); r.code != 200 || r.num("payment_window") != 0 || r.num("pending_payment") != 1 {
		t.Fatalf("window off: %d %s", r.code, r.raw)
	}
	c := g.buy("zero", "z1", 1, "")
	if c.code != 202 || c.str("state") != order.StateConfirmed {
		t.Fatalf("buy after the window is off: %d %s", c.code, c.raw)
	}
	if p := g.pay("zero", c.str("order_id")); p.code != 409 || p.status() != "conflict" {
		t.Errorf("pay of a confirmed order: %d %s", p.code, p.raw)
	}
	// The order taken with the window keeps its pay_by.
	if o := g.orderView("zero", r.str("order_id")); payBy(t, o) != payBy(t, r) {
		t.Errorf("order taken with the window: %s, its 202 %s", o.raw, r.raw)
	}
	l := saletest.CheckPayments(t, g.rdb, g.keys, "zero")
	if l.ByState[order.StateConfirmed] != 11 || l.ByState[order.StatePendingPayment] != 1 {
		t.Errorf("states %v", l.ByState)
	}
}

// An Idempotency-Key replay of a buy on a sale with a window answers the
// first 202 byte for byte (Invariant 4), its state and pay_by included,
// also after the order was paid.
func TestPaymentIdempotencyReplay(t *testing.T) {
	g := startGateway(t)
	g.mustSale("pi", `{"stock":5,"payment_window":60}`)
	first := g.buy("pi", "ida", 1, "key-1")
	if first.code != 202 || payBy(t, first) == 0 {
		t.Fatalf("buy: %d %s", first.code, first.raw)
	}
	if r := g.pay("pi", first.str("order_id")); r.code != 200 {
		t.Fatalf("pay: %d %s", r.code, r.raw)
	}
	if again := g.buy("pi", "ida", 1, "key-1"); again.code != 202 || !bytes.Equal(again.raw, first.raw) {
		t.Errorf("replay: %d %s, first %s", again.code, again.raw, first.raw)
	}
	if v := g.view("pi"); v.num("sold") != 1 {
		t.Errorf("sold %d after a replay", v.num("sold"))
	}
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

// The PUT body's payment_window and buckets, by API.md's bounds; buckets
// above 1 are refused until buckets are built.
func TestParseSalePaymentFields(t *testing.T) {
	tests := []struct {
		body   string
		window int64 // -1: absent
		bad    string
	}{
		{`{"stock":1}`, -1, ""},
		{`{"stock":1,"payment_window":0}`, 0, ""},
		{`{"stock":1,"payment_window":86400}`, 86400, ""},
		{`{"payment_window":900,"buckets":1}`, 900, ""},
		{`{"payment_window":86401}`, -1, "payment_window"},
		{`{"payment_window":-1}`, -1, "payment_window"},
		{`{"payment_window":1.5}`, -1, "payment_window"},
		{`{"payment_window":"60"}`, -1, "payment_window"},
		{`{"payment_window":null}`, -1, "payment_window"},
		{`{"buckets":0}`, -1, "buckets must"},
		{`{"buckets":17}`, -1, "buckets must"},
		{`{"buckets":1.5}`, -1, "buckets must"},
		{`{"buckets":"2"}`, -1, "buckets must"},
		{`{"buckets":2}`, -1, ""},
		{`{"buckets":16}`, -1, ""},
	}
	for _, tc := range tests {
		u, reason := parseSaleUpdate([]byte(tc.body))
		switch {
		case tc.bad != "":
			if !strings.Contains(reason, tc.bad) {
				t.Errorf("%s: reason %q, want one about %s", tc.body, reason, tc.bad)
			}
		case reason != "":
			t.Errorf("%s: refused: %s", tc.body, reason)
		case tc.window < 0 && u.PaymentWindow != nil, tc.window >= 0 && (u.PaymentWindow == nil || *u.PaymentWindow != tc.window):
			t.Errorf("%s: payment_window %v, want %d", tc.body, u.PaymentWindow, tc.window)
		}
	}
}

// The 202 and the order view as bytes: pay_by to the millisecond in UTC,
// also when the milliseconds are zeros.
func TestOrderViewBytes(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC).UnixMilli()
	got := string(appendAccepted(nil, "o1", "s", "u", 2, at))
	want := `{"status":"accepted","order_id":"o1","sale_id":"s","user_id":"u","quantity":2,"state":"pending_payment","pay_by":"2026-03-01T12:00:05.000Z"}`
	if got != want {
		t.Errorf("202 body\n%s\nwant\n%s", got, want)
	}
	got = string(appendAccepted(nil, "o1", "s", "u", 1, 0))
	if !strings.HasSuffix(got, `"state":"confirmed","pay_by":null}`) {
		t.Errorf("202 body without a window: %s", got)
	}
	for _, tc := range []struct {
		r    scripts.Record
		want string
	}{
		{scripts.Record{State: order.StatePendingPayment, PayBy: at + 7, Quantity: 1, UserID: "u"},
			`{"status":"queued","order_id":"o","sale_id":"s","user_id":"u","quantity":1,"state":"pending_payment","pay_by":"2026-03-01T12:00:05.007Z"}`},
		{scripts.Record{Created: true, State: order.StatePaid, PayBy: at, Quantity: 1, UserID: "u"},
			`{"status":"created","order_id":"o","sale_id":"s","user_id":"u","quantity":1,"state":"paid","pay_by":null}`},
	} {
		if got := string(appendOrderView(nil, "s", "o", tc.r)); got != tc.want {
			t.Errorf("order view\n%s\nwant\n%s", got, tc.want)
		}
	}
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
