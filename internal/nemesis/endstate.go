package nemesis

// The end state of a sale, once the faults are healed and the pipeline has
// drained: what the admin view says against what MySQL holds.

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/orderdb"
)

// live reports whether an order in state st holds its units.
func live(st string) bool {
	return st == order.StatePendingPayment || st == order.StatePaid || st == order.StateConfirmed
}

// Figures are what MySQL's rows of one sale add up to, in the admin view's
// terms.
type Figures struct {
	Rows    int
	Sold    int64 // units of live orders
	Buyers  int64 // distinct users holding live units
	Pending int64 // orders awaiting payment
	Units   map[string]int64
}

// Sum adds up rows.
func Sum(rows []order.Order) Figures {
	f := Figures{Rows: len(rows), Units: map[string]int64{}}
	for _, r := range rows {
		if !live(r.State) {
			continue
		}
		f.Sold += int64(r.Quantity)
		f.Units[r.UserID] += int64(r.Quantity)
		if r.State == order.StatePendingPayment {
			f.Pending++
		}
	}
	f.Buyers = int64(len(f.Units))
	return f
}

// Settled reports whether MySQL has caught up with Redis for the sale: no
// order left in the outbox, none awaiting payment, and MySQL's figures are
// the admin view's.
func Settled(v *admin.Sale, f Figures) bool {
	return v.OutboxPending == 0 && v.PendingPayment == 0 && f.Pending == 0 && f.Sold == v.Sold && f.Buyers == v.Buyers
}

// ReadRows reads every row of sale from MySQL, with its state, pay_by and
// Idempotency-Key (orderdb.After, page by page).
func ReadRows(ctx context.Context, db *sql.DB, sale string) ([]order.Order, error) {
	var out []order.Order
	seq, after := int64(-1), ""
	for {
		page, err := orderdb.After(ctx, db, sale, seq, after, 1000)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out, nil
		}
		last := page[len(page)-1]
		seq, after = last.Seq, last.OrderID
	}
}

// CheckEnd checks the invariants of a settled sale: the admin view equal
// to MySQL, stock = sold + remaining, nobody over the limit, no sale left
// locked, no Idempotency-Key with two orders. It returns what is wrong.
func CheckEnd(spec SaleSpec, v *admin.Sale, rows []order.Order) []string {
	var bad []string
	f := Sum(rows)
	if v.Sold != f.Sold || v.Buyers != f.Buyers || v.PendingPayment != f.Pending {
		bad = append(bad, fmt.Sprintf("admin view sold %d, buyers %d, pending %d; MySQL %d, %d, %d",
			v.Sold, v.Buyers, v.PendingPayment, f.Sold, f.Buyers, f.Pending))
	}
	if v.Stock != v.Sold+v.Remaining || v.Remaining < 0 {
		bad = append(bad, fmt.Sprintf("admin view stock %d, sold %d, remaining %d", v.Stock, v.Sold, v.Remaining))
	}
	if v.Locked {
		bad = append(bad, "the sale ends locked, though every lock was followed by an unlock")
	}
	for _, u := range slices.Sorted(maps.Keys(f.Units)) {
		if f.Units[u] > int64(spec.Limit) {
			bad = append(bad, fmt.Sprintf("user %s holds %d units, over the limit of %d", u, f.Units[u], spec.Limit))
		}
	}
	keys := map[string]string{}
	for _, r := range rows {
		if r.IdemKey == "" {
			continue
		}
		if prev, ok := keys[r.IdemKey]; ok {
			bad = append(bad, fmt.Sprintf("Idempotency-Key %s has two orders, %s and %s", r.IdemKey, prev, r.OrderID))
		}
		keys[r.IdemKey] = r.OrderID
	}
	return bad
}
