package nemesis

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flashgate/flashgate/order"
)

// The checker must be able to fail: each row is a small history, right or
// wrong, resolved and checked as a run's would be.
func TestModel(t *testing.T) {
	const ms = int64(time.Millisecond)
	spec := SaleSpec{ID: "s", Stock: 1, Limit: 2, Stale: 100 * ms, Skew: 5 * ms}
	window := spec
	window.Window = true
	buy := func(client int, user string, call, ret int64, code int, status, id string) Record {
		return Record{Sale: "s", Client: client, In: Input{Kind: KindBuy, User: user, Qty: 1, Call: call, Return: ret},
			Out: Output{Code: code, Status: status, Order: id}}
	}
	keyed := func(r Record, key string) Record { r.In.Key = key; return r }
	ambiguous := func(r Record) Record { r.Ambiguous, r.Out = true, Output{}; return r }
	onOrder := func(kind, id string, call, ret int64, code int, status string) Record {
		return Record{Sale: "s", Client: 9, In: Input{Kind: kind, Order: id, Call: call, Return: ret}, Out: Output{Code: code, Status: status}}
	}
	admin := func(kind string, qty int, call, ret int64) Record {
		return Record{Sale: "s", Client: 8, In: Input{Kind: kind, Qty: qty, Call: call, Return: ret}, Out: Output{Code: 200, Status: "ok"}}
	}
	view := func(call, ret int64, f ViewFigures) Record {
		return Record{Sale: "s", Client: 8, In: Input{Kind: KindView, Call: call, Return: ret}, Out: Output{Code: 200, Status: "ok", View: f}}
	}
	row := func(id, user, state string, payBy int64) order.Order {
		o := order.Order{OrderID: id, SaleID: "s", UserID: user, Quantity: 1, State: state, ReservedAt: time.Unix(0, 5*ms)}
		if payBy != 0 {
			o.PayBy = time.Unix(0, payBy)
		}
		return o
	}
	seq := func(o order.Order, n int64) order.Order { o.Seq = n; return o }
	key := func(o order.Order, k string) order.Order { o.IdemKey = k; return o }
	reservedAt := func(o order.Order, at int64) order.Order { o.ReservedAt = time.Unix(0, at); return o }
	at := func(t time.Time) int64 { return t.UnixNano() }
	const end = 10_000 * ms
	tests := []struct {
		name   string
		spec   SaleSpec
		recs   []Record
		rows   []order.Order
		stock  int
		probes []Probe
		want   porcupine.CheckResult
		bad    bool // resolving finds a problem outside the model
	}{
		{name: "one unit, one 202, then sold out", spec: spec,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), buy(1, "b", 20*ms, 30*ms, 410, "sold_out", "")},
			rows: []order.Order{row("o1", "a", order.StateConfirmed, 0)}, want: porcupine.Ok},
		{name: "two 202s for the last unit", spec: spec,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), buy(1, "b", 0, 10*ms, 202, "accepted", "o2")},
			rows: []order.Order{row("o1", "a", order.StateConfirmed, 0), row("o2", "b", order.StateConfirmed, 0)}, want: porcupine.Illegal},
		{name: "sold out before any unit went", spec: spec,
			recs: []Record{buy(1, "b", 0, 10*ms, 410, "sold_out", ""), buy(0, "a", 20*ms, 30*ms, 202, "accepted", "o1")},
			rows: []order.Order{row("o1", "a", order.StateConfirmed, 0)}, want: porcupine.Illegal},
		{name: "a cancel gives the unit back", spec: spec,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), onOrder(KindCancel, "o1", 20*ms, 30*ms, 200, "queued"),
				buy(1, "b", 500*ms, 510*ms, 202, "accepted", "o2")},
			rows: []order.Order{row("o1", "a", order.StateCancelled, 0), row("o2", "b", order.StateConfirmed, 0)}, want: porcupine.Ok},
		{name: "a sold-out remembered just after a cancel", spec: spec,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), onOrder(KindCancel, "o1", 20*ms, 30*ms, 200, "queued"),
				buy(1, "b", 40*ms, 50*ms, 410, "sold_out", "")},
			rows: []order.Order{row("o1", "a", order.StateCancelled, 0)}, want: porcupine.Ok},
		{name: "a sold-out long after a cancel", spec: spec,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), onOrder(KindCancel, "o1", 20*ms, 30*ms, 200, "queued"),
				buy(1, "b", 900*ms, 910*ms, 410, "sold_out", "")},
			rows: []order.Order{row("o1", "a", order.StateCancelled, 0)}, want: porcupine.Illegal},
		{name: "a pay after pay_by answered 200", spec: window,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), onOrder(KindPay, "o1", 2100*ms, 2110*ms, 200, "queued")},
			rows: []order.Order{row("o1", "a", order.StatePaid, 2000*ms)}, want: porcupine.Illegal},
		{name: "a pay before pay_by, then the order expired", spec: window,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), onOrder(KindPay, "o1", 100*ms, 110*ms, 200, "queued")},
			rows: []order.Order{row("o1", "a", order.StateExpired, 2000*ms)}, want: porcupine.Illegal},
		{name: "an expiry frees the unit after pay_by", spec: window,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), onOrder(KindPay, "o1", 2100*ms, 2110*ms, 409, "order_expired"),
				buy(1, "b", 3000*ms, 3010*ms, 202, "accepted", "o2")},
			rows: []order.Order{row("o1", "a", order.StateExpired, 2000*ms), row("o2", "b", order.StatePendingPayment, 5000*ms)}, want: porcupine.Ok},
		{name: "a unit sold again before pay_by", spec: window,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), buy(1, "b", 1000*ms, 1010*ms, 202, "accepted", "o2")},
			rows: []order.Order{row("o1", "a", order.StateExpired, 2000*ms), row("o2", "b", order.StatePendingPayment, 3000*ms)}, want: porcupine.Illegal},
		{name: "a view pins an expiry", spec: window,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), view(2100*ms, 2110*ms, ViewFigures{Remaining: 1}),
				keyed(buy(1, "b", 2200*ms, 2210*ms, 410, "sold_out", ""), "k")},
			rows: []order.Order{row("o1", "a", order.StateExpired, 2000*ms)}, want: porcupine.Illegal},
		{name: "a view before the expiry", spec: window,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), view(2100*ms, 2110*ms, ViewFigures{Buyers: 1, Pending: 1}),
				keyed(buy(1, "b", 2200*ms, 2210*ms, 410, "sold_out", ""), "k")},
			rows: []order.Order{row("o1", "a", order.StateExpired, 2000*ms)}, want: porcupine.Ok},
		{name: "a probe pins an expiry", spec: window, probes: []Probe{{Sale: "s", Seq: 3, Call: 2100 * ms, Return: 2110 * ms}},
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), keyed(buy(1, "b", 2200*ms, 2210*ms, 410, "sold_out", ""), "k")},
			rows: []order.Order{seq(row("o1", "a", order.StateExpired, 2000*ms), 3)}, want: porcupine.Illegal},
		{name: "a probe before the expiry", spec: window, probes: []Probe{{Sale: "s", Seq: 2, Call: 2100 * ms, Return: 2110 * ms}},
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), keyed(buy(1, "b", 2200*ms, 2210*ms, 410, "sold_out", ""), "k")},
			rows: []order.Order{seq(row("o1", "a", order.StateExpired, 2000*ms), 3)}, want: porcupine.Ok},
		{name: "a probe before the expiry pins it late", spec: window, probes: []Probe{{Sale: "s", Seq: 2, Call: 2300 * ms, Return: 2310 * ms}},
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), keyed(buy(1, "b", 2100*ms, 2110*ms, 202, "accepted", "o2"), "k")},
			rows: []order.Order{seq(row("o1", "a", order.StateExpired, 2000*ms), 3), key(reservedAt(row("o2", "b", order.StatePendingPayment, 4100*ms), 2105*ms), "k")},
			want: porcupine.Illegal},
		{name: "a buy while locked", spec: spec,
			recs: []Record{admin(KindLock, 0, 0, 10*ms), buy(0, "a", 20*ms, 30*ms, 202, "accepted", "o1"), admin(KindUnlock, 0, 40*ms, 50*ms)},
			rows: []order.Order{row("o1", "a", order.StateConfirmed, 0)}, want: porcupine.Illegal},
		{name: "a restock sells again", spec: spec,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), admin(KindRestock, 1, 20*ms, 30*ms), buy(1, "b", 40*ms, 50*ms, 202, "accepted", "o2")},
			rows: []order.Order{row("o1", "a", order.StateConfirmed, 0), row("o2", "b", order.StateConfirmed, 0)}, stock: 2, want: porcupine.Ok},
		{name: "a timed-out buy that happened", spec: spec,
			recs: []Record{ambiguous(buy(0, "a", 0, 10*ms, 0, "", "")), buy(1, "b", 20*ms, 30*ms, 410, "sold_out", "")},
			rows: []order.Order{row("o1", "a", order.StateConfirmed, 0)}, want: porcupine.Ok},
		{name: "a timed-out buy that did not happen", spec: spec,
			recs: []Record{ambiguous(buy(0, "a", 0, 10*ms, 0, "", "")), buy(1, "b", 20*ms, 30*ms, 202, "accepted", "o2")},
			rows: []order.Order{row("o2", "b", order.StateConfirmed, 0)}, want: porcupine.Ok},
		{name: "an expiry numbered before a sale that returned before pay_by", spec: window, bad: true,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), buy(1, "b", 100*ms, 110*ms, 202, "accepted", "o2")},
			rows: []order.Order{seq(row("o1", "a", order.StateExpired, 2000*ms), 3), seq(row("o2", "b", order.StatePendingPayment, 2100*ms), 4)}},
		{name: "an expiry numbered before a sale after pay_by", spec: window,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), buy(1, "b", 2500*ms, 2510*ms, 202, "accepted", "o2")},
			rows: []order.Order{seq(row("o1", "a", order.StateExpired, 2000*ms), 3), seq(row("o2", "b", order.StatePendingPayment, 4500*ms), 4)},
			want: porcupine.Ok},
		{name: "a refused key buys later", spec: spec,
			recs: []Record{buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), keyed(buy(1, "b", 20*ms, 30*ms, 410, "sold_out", ""), "k"),
				onOrder(KindCancel, "o1", 40*ms, 50*ms, 200, "queued"), keyed(buy(1, "b", 60*ms, 70*ms, 202, "accepted", "o2"), "k")},
			rows: []order.Order{row("o1", "a", order.StateCancelled, 0), reservedAt(key(row("o2", "b", order.StateConfirmed, 0), "k"), 65*ms)}, want: porcupine.Ok},
		{name: "a key refused after it bought", spec: spec,
			recs: []Record{keyed(buy(1, "b", 0, 10*ms, 202, "accepted", "o1"), "k"), keyed(buy(1, "b", 20*ms, 30*ms, 410, "sold_out", ""), "k")},
			rows: []order.Order{key(row("o1", "b", order.StateConfirmed, 0), "k")}, want: porcupine.Illegal},
		{name: "a key answered again", spec: spec,
			recs: []Record{keyed(buy(1, "b", 0, 10*ms, 202, "accepted", "o1"), "k"), keyed(buy(1, "b", 20*ms, 30*ms, 202, "accepted", "o1"), "k")},
			rows: []order.Order{key(row("o1", "b", order.StateConfirmed, 0), "k")}, want: porcupine.Ok},
		{name: "a key whose lost answer bought", spec: spec,
			recs: []Record{ambiguous(keyed(buy(1, "b", 0, 10*ms, 0, "", ""), "k")), keyed(buy(1, "b", 20*ms, 30*ms, 202, "accepted", "o1"), "k"),
				buy(0, "a", 40*ms, 50*ms, 410, "sold_out", "")},
			rows: []order.Order{key(row("o1", "b", order.StateConfirmed, 0), "k")}, want: porcupine.Ok},
		{name: "a key answered with two orders", spec: spec, bad: true,
			recs: []Record{keyed(buy(0, "a", 0, 10*ms, 202, "accepted", "o1"), "k"), keyed(buy(0, "a", 20*ms, 30*ms, 202, "accepted", "o2"), "k")},
			rows: []order.Order{key(row("o1", "a", order.StateConfirmed, 0), "k")}, want: porcupine.Ok},
		{name: "a row of a key that was refused", spec: spec, bad: true,
			recs: []Record{keyed(buy(1, "b", 0, 10*ms, 410, "sold_out", ""), "k")},
			rows: []order.Order{key(row("o1", "b", order.StateConfirmed, 0), "k")}},
		{name: "a row nobody asked for", spec: spec, bad: true,
			rows: []order.Order{row("o9", "z", order.StateConfirmed, 0)}, want: porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stock := tt.stock
			if stock == 0 {
				stock = tt.spec.Stock
			}
			res := Resolve(tt.spec, tt.recs, Final{Rows: tt.rows, Stock: stock, InitialStock: tt.spec.Stock, Probes: tt.probes}, at, end)
			if got := len(res.Problems) > 0; got != tt.bad {
				t.Fatalf("problems %q, want some: %t", res.Problems, tt.bad)
			}
			if tt.bad {
				return
			}
			v := Linearizable(tt.spec, res.Ops, 10*time.Second, t.TempDir())
			if v.Result != tt.want {
				t.Fatalf("%s, want %s (%d operations)", v.Result, tt.want, v.Ops)
			}
		})
	}
}
