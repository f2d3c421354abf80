package consumer

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

// ErrNoSale is returned by Reconcile when neither Redis nor MySQL knows the
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

	// MySQL.
	Rows         int64 // rows in orders
	Units        int64 // SUM(quantity)
	Users        int64 // COUNT(DISTINCT user_id)
	LedgerUnits  int64 // sale_ledger.units
	LedgerOrders int64 // sale_ledger.orders

	// Order by order.
	Missing    int      // accepted, neither in MySQL nor in the outbox: in RabbitMQ, or lost
	Unknown    int      // in MySQL, never accepted in Redis
	Mismatched int      // in both, with another user or quantity
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

// Reconcile reads one sale from Redis and MySQL and compares them order by
// order. It reads every order id of the sale (scans, not one blocking call),
// so it is an operator's tool, not something to run per request. It returns
// ErrNoSale when neither side knows the sale, or a wrapped I/O error.
func Reconcile(ctx context.Context, rdb redis.UniversalClient, keys scripts.Keys, db *sql.DB, sale string) (*Report, error) {
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
		user  string
		qty   int64
		found bool
	}
	orders := map[string]*accepted{}
	err := hscan(ctx, rdb, keys.Orders(sale), func(id, v string) {
		if _, dup := orders[id]; dup {
			return // a scan may return a field twice
		}
		// "q:QTY:USER" or "c:QTY:USER"
		parts := strings.SplitN(v, ":", 3)
		a := &accepted{}
		if len(parts) == 3 {
			a.qty, _ = strconv.ParseInt(parts[1], 10, 64)
			a.user = parts[2]
		}
		orders[id] = a
		r.Accepted++
		r.AcceptedUnits += a.qty
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
		case a.user != user || a.qty != qty:
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
