// Package reconcile audits one sale across Redis and MySQL: it reads the
// sale's figures and orders on both sides and lists every disagreement, so
// that an operator (`flashgate reconcile`) or a test can tell an order in
// transit from one lost or invented (Invariant 3: every 202 becomes exactly
// one MySQL row, and no row exists without a reservation).
package reconcile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/scripts"
)

// ErrNoSale is returned by Sale when neither Redis nor MySQL knows the
// sale.
var ErrNoSale = errors.New("no such sale")

// maxListed bounds the order ids a Report lists per kind of problem.
const maxListed = 10

// Report compares one sale in Redis with MySQL. The figures are read while
// the pipeline may be moving (Redis first, then MySQL in one consistent
// snapshot), so a busy sale can show a transient difference; Drift is exact
// once the outbox and the queue are drained.
type Report struct {
	Sale string

	// Redis.
	Sold          int64 // the meta hash's sold
	Buyers        int64 // users holding units (HLEN users)
	UserUnits     int64 // units over the users hash
	Accepted      int64 // orders in the orders hash: every order ever accepted
	AcceptedUnits int64
	OutboxEntries int64 // accepted orders not yet confirmed by RabbitMQ
	OutboxUnits   int64
	OutboxBad     int64 // outbox entries that are not orders
	BadRecords    int64 // orders hash values that are not order records (counted in Accepted, with no units)

	// MySQL.
	Rows         int64 // rows in orders
	Units        int64 // SUM(quantity)
	Users        int64 // COUNT(DISTINCT user_id)
	LedgerUnits  int64 // sale_ledger.units
	LedgerOrders int64 // sale_ledger.orders

	// Order by order.
	Missing    int      // accepted, neither in MySQL nor in the outbox: in RabbitMQ, or lost
	Unknown    int      // in MySQL, never accepted in Redis
	Mismatched int      // in both, with another user or quantity (a bad record is not compared)
	Examples   []string // up to a few ids of each problem, "kind id"
}

// InTransit is sold − MySQL units − outbox units: the units between the
// outbox and MySQL (in RabbitMQ or a consumer's hands). It is 0 when the
// pipeline is drained; anything else then is drift.
func (r *Report) InTransit() int64 { return r.Sold - r.Units - r.OutboxUnits }

// Drained reports whether nothing is pending or in transit.
func (r *Report) Drained() bool {
	return r.OutboxEntries == 0 && r.InTransit() == 0 && r.Missing == 0
}

// Drift lists every disagreement, one sentence each; none means Redis and
// MySQL agree.
func (r *Report) Drift() []string {
	var d []string
	if r.InTransit() != 0 {
		d = append(d, fmt.Sprintf("sold %d ≠ MySQL units %d + outbox units %d (difference %d: in transit, or lost/extra)",
			r.Sold, r.Units, r.OutboxUnits, r.InTransit()))
	}
	if r.LedgerUnits != r.Units || r.LedgerOrders != r.Rows {
		d = append(d, fmt.Sprintf("ledger %d units / %d orders ≠ orders table %d units / %d rows",
			r.LedgerUnits, r.LedgerOrders, r.Units, r.Rows))
	}
	if r.AcceptedUnits != r.Sold {
		d = append(d, fmt.Sprintf("Redis: sold %d ≠ units of accepted orders %d", r.Sold, r.AcceptedUnits))
	}
	if r.UserUnits != r.Sold {
		d = append(d, fmt.Sprintf("Redis: sold %d ≠ units held by users %d", r.Sold, r.UserUnits))
	}
	if r.BadRecords > 0 {
		d = append(d, fmt.Sprintf("%d orders hash values are not order records", r.BadRecords))
	}
	if r.OutboxBad > 0 {
		d = append(d, fmt.Sprintf("%d outbox entries are not orders", r.OutboxBad))
	}
	if r.Missing > 0 {
		d = append(d, fmt.Sprintf("%d accepted orders are neither in MySQL nor in the outbox (in transit, or lost)", r.Missing))
	}
	if r.Unknown > 0 {
		d = append(d, fmt.Sprintf("%d orders in MySQL were never accepted in Redis", r.Unknown))
	}
	if r.Mismatched > 0 {
		d = append(d, fmt.Sprintf("%d orders differ between Redis and MySQL (user or quantity)", r.Mismatched))
	}
	if r.OutboxEntries == 0 && r.InTransit() == 0 && r.Buyers != r.Users {
		d = append(d, fmt.Sprintf("buyers: Redis %d ≠ MySQL distinct users %d", r.Buyers, r.Users))
	}
	return d
}

// Sale reads one sale from Redis and MySQL and compares them order by
// order. It blocks while it reads every order of the sale, in pages (scans,
// never one long call that would stall Redis), so it is an operator's tool,
// not something to run per request. Concurrent calls are safe. It returns
// ErrNoSale when neither side knows the sale, or a wrapped I/O error.
//
// A value of the orders hash that is not a record ("q:QTY:USER") is counted
// in BadRecords, which is drift; its order still counts as accepted (its id
// is there), with no units, and is missing when neither MySQL nor the outbox
// holds it.
func Sale(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys, db *sql.DB, sale string) (*Report, error) {
	r := &Report{Sale: sale}

	// Redis: one MULTI for the figures, then scans for the details.
	pipe := rdb.TxPipeline()
	exists := pipe.Exists(ctx, keys.Meta(sale))
	sold := pipe.HGet(ctx, keys.Meta(sale), "sold")
	buyers := pipe.HLen(ctx, keys.Users(sale))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reconcile %s: redis: %w", sale, err)
	}
	if s, err := sold.Result(); err == nil {
		r.Sold, _ = strconv.ParseInt(s, 10, 64)
	}
	r.Buyers = buyers.Val()

	type accepted struct {
		rec   scripts.Record
		bad   bool // not a record: nothing to compare a row with
		found bool
	}
	orders := map[string]*accepted{}
	err := hscan(ctx, rdb, keys.Orders(sale), func(id, v string) {
		if _, dup := orders[id]; dup {
			return // a scan may return a field twice
		}
		rec, err := scripts.ParseRecord(v)
		orders[id] = &accepted{rec: rec, bad: err != nil}
		r.Accepted++
		r.AcceptedUnits += rec.Quantity
		if err != nil {
			r.BadRecords++
			r.example("bad", id)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: orders hash: %w", sale, err)
	}
	held := map[string]int64{}
	err = hscan(ctx, rdb, keys.Users(sale), func(user, v string) {
		held[user], _ = strconv.ParseInt(v, 10, 64)
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: users hash: %w", sale, err)
	}
	for _, n := range held {
		r.UserUnits += n
	}
	inOutbox := map[string]bool{}
	for start := "-"; ; {
		msgs, err := rdb.XRangeN(ctx, keys.Outbox(sale), start, "+", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("reconcile %s: outbox: %w", sale, err)
		}
		for _, m := range msgs {
			r.OutboxEntries++
			o, err := order.FromStream(m.Values)
			if err != nil {
				r.OutboxBad++
				continue
			}
			r.OutboxUnits += int64(o.Quantity)
			inOutbox[o.OrderID] = true
		}
		if len(msgs) < 1000 {
			break
		}
		start = "(" + msgs[len(msgs)-1].ID
	}

	// MySQL: one snapshot for the rows and the ledger.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: mysql: %w", sale, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	rows, err := tx.QueryContext(ctx, `SELECT order_id, user_id, quantity FROM orders WHERE sale_id = ?`, sale)
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: mysql: %w", sale, err)
	}
	users := map[string]struct{}{}
	for rows.Next() {
		var id, user string
		var qty int64
		if err := rows.Scan(&id, &user, &qty); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reconcile %s: mysql: %w", sale, err)
		}
		r.Rows++
		r.Units += qty
		users[user] = struct{}{}
		a := orders[id]
		switch {
		case a == nil:
			r.Unknown++
			r.example("unknown", id)
		case !a.bad && (a.rec.UserID != user || a.rec.Quantity != qty):
			r.Mismatched++
			r.example("mismatched", id)
			a.found = true
		default:
			a.found = true
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return nil, fmt.Errorf("reconcile %s: mysql: %w", sale, err)
	}
	rows.Close()
	r.Users = int64(len(users))
	err = tx.QueryRowContext(ctx, `SELECT units, orders FROM sale_ledger WHERE sale_id = ?`, sale).Scan(&r.LedgerUnits, &r.LedgerOrders)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("reconcile %s: ledger: %w", sale, err)
	}
	for id, a := range orders {
		if !a.found && !inOutbox[id] {
			r.Missing++
			r.example("missing", id)
		}
	}
	if exists.Val() == 0 && r.Accepted == 0 && r.Rows == 0 && r.LedgerOrders == 0 {
		return nil, fmt.Errorf("reconcile %s: %w", sale, ErrNoSale)
	}
	return r, nil
}

func (r *Report) example(kind, id string) {
	n := 0
	for _, e := range r.Examples {
		if strings.HasPrefix(e, kind+" ") {
			n++
		}
	}
	if n < maxListed {
		r.Examples = append(r.Examples, kind+" "+id)
	}
}

func hscan(ctx context.Context, rdb redis.UniversalClient, key string, fn func(field, value string)) error {
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, key, cursor, "*", 1000).Result()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			fn(kv[i], kv[i+1])
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
