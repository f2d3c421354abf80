package nemesis

// Resolve turns a sale's records and the orders the run's end found in
// MySQL into the operations porcupine checks. A request that had no
// definite answer either happened or did not, and what MySQL holds says
// which: an order no answer named was made by an ambiguous buy of its
// buyer (its Idempotency-Key when it had one), an order that ended paid
// was paid by one of the pays sent to it, and so on. What happened is
// kept, with a return time at the end of the run (it may have happened at
// any time after its call); what did not is dropped, since a refused or
// lost request changes nothing.

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flashgate/flashgate/order"
)

// Final is what the run's end found of a sale: its orders in MySQL, the
// admin view's stock, and the stock it was created with; and the probes of
// its event number made during the run.
type Final struct {
	Rows         []order.Order
	Stock        int
	InitialStock int
	Probes       []Probe
}

// Resolved is one sale's history ready for porcupine, and what resolving
// it found wrong outside the model: the end-state's and the answers'
// invariants (two orders for one Idempotency-Key, a 202 missing from
// MySQL, a row no request explains).
type Resolved struct {
	Ops      []porcupine.Operation
	Problems []string
	Dropped  int // ambiguous requests that, by the run's end, did not happen
}

// Resolve resolves recs, the records of spec's sale, against fin. at maps
// a wall-clock time (a row's pay_by) to the history's clock; end is the
// history's time of the end-of-run read, by which everything that happened
// had happened.
func Resolve(spec SaleSpec, recs []Record, fin Final, at func(time.Time) int64, end int64) Resolved {
	r := resolver{spec: spec, fin: fin, at: at, end: end, rows: map[string]order.Order{}, claimed: map[string]bool{}}
	for _, o := range fin.Rows {
		if _, dup := r.rows[o.OrderID]; dup {
			r.problem("order %s is in MySQL twice", o.OrderID)
		}
		r.rows[o.OrderID] = o
	}
	var buys, orderOps, admin []Record
	for _, rec := range recs {
		switch rec.In.Kind {
		case KindBuy:
			buys = append(buys, rec)
		case KindPay, KindCancel:
			orderOps = append(orderOps, rec)
		default:
			admin = append(admin, rec)
		}
	}
	r.buys(buys)
	r.orderOps(orderOps)
	r.admin(admin)
	r.expiries()
	r.tighten()
	slices.SortFunc(r.out.Ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	return r.out
}

type resolver struct {
	spec    SaleSpec
	fin     Final
	at      func(time.Time) int64
	end     int64
	rows    map[string]order.Order
	claimed map[string]bool // orders some buy's 202 named
	out     Resolved
	seqs    []int64 // the event number of each of out.Ops, 0 when unknown
}

func (r *resolver) problem(format string, args ...any) {
	r.out.Problems = append(r.out.Problems, fmt.Sprintf(format, args...))
}

// add adds one operation; seq is the sale's event number of the change it
// made, as MySQL's row of the order holds it, 0 when unknown.
func (r *resolver) add(client int, in Input, out Output, seq int64) {
	r.out.Ops = append(r.out.Ops, porcupine.Operation{ClientId: client, Input: in, Call: in.Call, Output: out, Return: in.Return})
	r.seqs = append(r.seqs, seq)
}

// buySeq is the event number of the reservation of order id: known when
// its row is still in the state the reservation made.
func (r *resolver) buySeq(id string) int64 {
	row, ok := r.rows[id]
	if !ok || (row.State != order.StateConfirmed && row.State != order.StatePendingPayment) {
		return 0
	}
	return row.Seq
}

// reserved bounds in, a buy that had no answer but whose order MySQL
// holds, by the order's reserved_at (Redis's clock, in milliseconds,
// which is this machine's): the script ran within that millisecond.
func (r *resolver) reserved(in Input, row order.Order) Input {
	at := r.at(row.ReservedAt)
	in.Call = max(in.Call, at-r.spec.Skew)
	in.Return = min(in.Return, r.end, at+int64(time.Millisecond)+r.spec.Skew)
	if in.Return < in.Call {
		r.problem("order %s was reserved at %v, before its buy was sent", row.OrderID, row.ReservedAt)
		in.Return = r.end
	}
	return in
}

// tighten bounds the operations that would otherwise end with the run
// (a pay without an answer, an expiry) by the sale's event numbers: a
// change numbered s happened before any change numbered above s, so
// before the operation that made that one returned, and before a probe
// that read s or more returned; and after the call of a probe that read
// less than s. Without it the
// checker would have to try each expiry at every later point, which grows
// as two to the number of expiries pending at once.
func (r *resolver) tighten() {
	type known struct{ seq, ret int64 }
	var ks []known
	for i, op := range r.out.Ops {
		if r.seqs[i] > 0 && op.Return < r.end {
			ks = append(ks, known{r.seqs[i], op.Return})
		}
	}
	// A probe that read seq S saw change S itself done: it bounds the
	// changes numbered up to S, as a change numbered S+1 would.
	for _, p := range r.fin.Probes {
		ks = append(ks, known{p.Seq + 1, p.Return})
	}
	slices.SortFunc(ks, func(a, b known) int { return cmp.Compare(a.seq, b.seq) })
	suffix := make([]int64, len(ks)+1)
	suffix[len(ks)] = r.end
	for i := len(ks) - 1; i >= 0; i-- {
		suffix[i] = min(suffix[i+1], ks[i].ret)
	}
	// A probe that read less than s started before change s: change s
	// happened after the probe's call.
	probes := slices.Clone(r.fin.Probes)
	slices.SortFunc(probes, func(a, b Probe) int { return cmp.Compare(a.Seq, b.Seq) })
	prefix := make([]int64, len(probes)+1) // prefix[i]: the latest call of probes[:i]
	prefix[0] = math.MinInt64
	for i, p := range probes {
		prefix[i+1] = max(prefix[i], p.Call)
	}
	for i := range r.out.Ops {
		op := &r.out.Ops[i]
		seq := r.seqs[i]
		if seq == 0 {
			continue
		}
		below, _ := slices.BinarySearchFunc(probes, seq, func(p Probe, s int64) int { return cmp.Compare(p.Seq, s) })
		if after := prefix[below]; after > op.Call {
			in := op.Input.(Input)
			if after > op.Return {
				r.problem("%s of order %s (event %d) happened after a probe that started at %v, after the operation returned at %v",
					in.Kind, in.Order, seq, time.Duration(after), time.Duration(op.Return))
				continue
			}
			op.Call, in.Call = after, after
			op.Input = in
		}
		j, _ := slices.BinarySearchFunc(ks, seq+1, func(k known, s int64) int { return cmp.Compare(k.seq, s) })
		ret := suffix[j]
		if ret >= op.Return {
			continue
		}
		if ret < op.Call {
			in := op.Input.(Input)
			r.problem("%s of order %s (event %d) happened before a later event's operation returned at %v, before its own call at %v",
				in.Kind, in.Order, seq, time.Duration(ret), time.Duration(op.Call))
			continue
		}
		op.Return = ret
		in := op.Input.(Input)
		in.Return = ret
		op.Input = in
	}
}

// payBy is an order's deadline on the history's clock, 0 for none.
func (r *resolver) payBy(o order.Order) int64 {
	if o.PayBy.IsZero() {
		return 0
	}
	return r.at(o.PayBy)
}

// claim records that a buy's 202 named id, checking it against MySQL.
func (r *resolver) claim(in Input, out Output) {
	if r.claimed[out.Order] {
		r.problem("order %s answered 202 to two buys", out.Order)
	}
	r.claimed[out.Order] = true
	row, ok := r.rows[out.Order]
	switch {
	case !ok:
		r.problem("order %s was answered 202 (%s, %d units) but is not in MySQL", out.Order, in.User, in.Qty)
	case row.UserID != in.User || row.Quantity != in.Qty:
		r.problem("order %s: MySQL has %s × %d, the 202 answered %s × %d", out.Order, row.UserID, row.Quantity, in.User, in.Qty)
	}
}

func (r *resolver) buys(recs []Record) {
	byKey := map[string][]Record{}
	var ambiguous []Record
	for _, rec := range recs {
		switch {
		case rec.In.Key != "":
			byKey[rec.In.Key] = append(byKey[rec.In.Key], rec)
		case rec.Ambiguous:
			ambiguous = append(ambiguous, rec)
		default:
			r.add(rec.Client, rec.In, rec.Out, r.buySeq(rec.Out.Order))
			if rec.Out.Code == 202 {
				r.claim(rec.In, rec.Out)
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		r.keyed(key, byKey[key])
	}
	r.unkeyed(ambiguous)
}

// keyed resolves the requests of one Idempotency-Key. A refusal keeps no
// key, so each refusal is an operation of its own; the reservation, if
// MySQL holds an order with the key, was made by one of the requests that
// had no answer or were answered 202, between the first one's call and
// the first 202 (the others answered it again, which the model checks).
func (r *resolver) keyed(key string, recs []Record) {
	var reserving []Record
	var first *Record // the earliest-returning 202
	for i := range recs {
		rec := &recs[i]
		switch {
		case rec.Ambiguous:
			reserving = append(reserving, *rec)
		case rec.Out.Code == 202:
			reserving = append(reserving, *rec)
			if first == nil || rec.In.Return < first.In.Return {
				first = rec
			}
		default:
			r.add(rec.Client, rec.In, rec.Out, 0)
		}
	}
	for _, rec := range recs {
		if !rec.Ambiguous && rec.Out.Code == 202 && rec.Out.Order != first.Out.Order {
			r.problem("Idempotency-Key %s answered two orders, %s and %s", key, first.Out.Order, rec.Out.Order)
		}
	}
	var row order.Order
	found := false
	for _, id := range slices.Sorted(maps.Keys(r.rows)) {
		if o := r.rows[id]; o.IdemKey == key {
			row, found = o, true
			break
		}
	}
	if found && len(reserving) == 0 {
		return // every request with the key was refused: unkeyed reports the row
	}
	if !found {
		if first != nil {
			r.claim(first.In, first.Out) // reports the 202 missing from MySQL
		}
		r.out.Dropped += len(reserving)
		return
	}
	in := reserving[0].In
	for _, rec := range reserving {
		in.Call = min(in.Call, rec.In.Call)
	}
	out := Output{Code: 202, Status: "accepted", Order: row.OrderID, PayBy: r.payBy(row)}
	if first != nil {
		in.Return = first.In.Return
		out = first.Out
	} else {
		in.Return = r.end
	}
	in = r.reserved(in, row)
	r.add(reserving[0].Client, in, out, r.buySeq(row.OrderID))
	r.claim(in, out)
	// The other 202s answered the reservation again.
	for i := range recs {
		if rec := &recs[i]; !rec.Ambiguous && rec.Out.Code == 202 && rec != first {
			r.add(rec.Client, rec.In, rec.Out, 0)
		}
	}
}

// unkeyed gives each row no answer named to an ambiguous buy of the same
// buyer and quantity sent before the row's reservation, the earliest such
// first (its interval is the widest, so the choice refuses nothing another
// would accept); a row left over is an order nobody asked for.
func (r *resolver) unkeyed(ambiguous []Record) {
	slices.SortFunc(ambiguous, func(a, b Record) int { return cmp.Compare(a.In.Call, b.In.Call) })
	used := make([]bool, len(ambiguous))
	var orphans []order.Order
	for _, id := range slices.Sorted(maps.Keys(r.rows)) {
		if !r.claimed[id] {
			orphans = append(orphans, r.rows[id])
		}
	}
	slices.SortFunc(orphans, func(a, b order.Order) int { return a.ReservedAt.Compare(b.ReservedAt) })
	for _, row := range orphans {
		if row.IdemKey != "" {
			r.problem("order %s (key %s) is in MySQL but no request with that key explains it", row.OrderID, row.IdemKey)
			continue
		}
		found := false
		for i, rec := range ambiguous {
			if used[i] || rec.In.User != row.UserID || rec.In.Qty != row.Quantity || rec.In.Call > r.at(row.ReservedAt)+r.spec.Skew {
				continue
			}
			used[i], found = true, true
			in := rec.In
			in.Return = r.end
			in = r.reserved(in, row)
			out := Output{Code: 202, Status: "accepted", Order: row.OrderID, PayBy: r.payBy(row)}
			r.add(rec.Client, in, out, r.buySeq(row.OrderID))
			r.claim(in, out)
			break
		}
		if !found {
			r.problem("order %s (%s × %d) is in MySQL but no buy explains it", row.OrderID, row.UserID, row.Quantity)
		}
	}
	for _, u := range used {
		if !u {
			r.out.Dropped++
		}
	}
}

// orderOps resolves pays and cancels by the order's final state: an order
// that ended paid was paid once, between the first pay's call and the
// first 200; the other pays were that pay answered again.
func (r *resolver) orderOps(recs []Record) {
	type group struct{ pays, cancels []Record }
	byOrder := map[string]*group{}
	for _, rec := range recs {
		g := byOrder[rec.In.Order]
		if g == nil {
			g = &group{}
			byOrder[rec.In.Order] = g
		}
		if rec.In.Kind == KindPay {
			g.pays = append(g.pays, rec)
		} else {
			g.cancels = append(g.cancels, rec)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byOrder)) {
		g := byOrder[id]
		row, ok := r.rows[id]
		if !ok {
			r.problem("order %s was paid or cancelled but is not in MySQL", id)
			continue
		}
		r.settle(g.pays, row.State == order.StatePaid, row)
		r.settle(g.cancels, row.State == order.StateCancelled, row)
	}
}

// settle adds the pays (or cancels) of one order: merged into one when
// the order ended in their state, else the definite ones alone.
func (r *resolver) settle(recs []Record, ended bool, row order.Order) {
	var merged []Record
	for _, rec := range recs {
		rec.In.PayBy = r.payBy(row)
		switch {
		case ended && (rec.Ambiguous || rec.Out.Code == 200):
			merged = append(merged, rec)
		case rec.Ambiguous:
			r.out.Dropped++
		default:
			r.add(rec.Client, rec.In, rec.Out, 0)
		}
	}
	if len(merged) == 0 {
		return
	}
	in := merged[0].In
	in.Return = r.end
	for _, rec := range merged {
		in.Call = min(in.Call, rec.In.Call)
		if !rec.Ambiguous {
			in.Return = min(in.Return, rec.In.Return)
		}
	}
	r.add(merged[0].Client, in, Output{Code: 200, Status: "ok"}, row.Seq)
}

// admin adds the lock, unlock and restock calls, and the views. The admin retries a lock
// or unlock until it has an answer, so those are definite. A restock
// without an answer happened when the final stock says so: each sale's
// restocks add distinct powers of two, so the stock added tells which.
func (r *resolver) admin(recs []Record) {
	added := r.fin.Stock - r.fin.InitialStock
	var open []Record
	for _, rec := range recs {
		switch {
		case rec.In.Kind == KindView && rec.Ambiguous:
			r.out.Dropped++ // a read without an answer changed nothing
		case !rec.Ambiguous:
			r.add(rec.Client, rec.In, rec.Out, 0)
			if rec.In.Kind == KindRestock && rec.Out.Code == 200 {
				added -= rec.In.Qty
			}
		case rec.In.Kind == KindRestock:
			open = append(open, rec)
		default:
			r.problem("%s of sale %s never answered (%s)", rec.In.Kind, rec.Sale, rec.Err)
		}
	}
	for _, rec := range open {
		if added&rec.In.Qty != 0 {
			added -= rec.In.Qty
			in := rec.In
			in.Return = r.end
			r.add(rec.Client, in, Output{Code: 200, Status: "ok"}, 0)
		} else {
			r.out.Dropped++
		}
	}
	if added != 0 {
		r.problem("the stock ends %d, which the restocks sent (%d units unexplained) do not explain", r.fin.Stock, added)
	}
}

// expiries adds, for each order that ended expired, its expiry: at any
// time from its pay_by on (less the skew), not later than the run's end.
func (r *resolver) expiries() {
	for _, id := range slices.Sorted(maps.Keys(r.rows)) {
		row := r.rows[id]
		if row.State != order.StateExpired {
			continue
		}
		pb := r.payBy(row)
		if pb == 0 {
			r.problem("order %s expired without a pay_by", id)
			continue
		}
		in := Input{Kind: KindExpire, Order: id, PayBy: pb, Call: min(pb-r.spec.Skew, r.end), Return: r.end}
		r.add(-1, in, Output{Code: 200, Status: "ok"}, row.Seq)
	}
}
