package gateway

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/sale/saletest"
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
