package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/order"
	"github.com/flashgate/flashgate/retry"
	"github.com/flashgate/flashgate/scripts"
)

// checkPending checks the 202s of a sale with a payment window of window:
// each is pending_payment, due window after Redis accepted it (between the
// request leaving and its answer, to the millisecond pay_by is given in).
func checkPending(t *testing.T, got []bought, window time.Duration) {
	t.Helper()
	for _, b := range got {
		if b.state != order.StatePendingPayment || b.payBy.IsZero() {
			t.Fatalf("order %s: state %q, pay_by %v; want pending_payment with a pay_by", b.id, b.state, b.payBy)
		}
		lo, hi := b.sent.Add(window).Truncate(time.Millisecond), b.answered.Add(window)
		if b.payBy.Before(lo) || b.payBy.After(hi) {
			t.Fatalf("order %s: pay_by %v, want accepted + %v, between %v and %v", b.id, b.payBy, window, lo, hi)
		}
	}
}

// settleAll pays (or cancels, with cancel) every order of ids from eight
// goroutines and returns the state each must end in (see settle).
func settleAll(t *testing.T, c *admin.Client, sale string, ids []string, cancel bool) map[string]string {
	t.Helper()
	ctx := bg(t, 2*time.Minute)
	call, what, want := c.Pay, "pay", order.StatePaid
	if cancel {
		call, what, want = c.Cancel, "cancel", order.StateCancelled
	}
	out := make([]string, len(ids))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				o, err := call(ctx, sale, ids[i])
				if err != nil && !isAPIError(err) {
					// No answer: the call is idempotent, so send it again.
					o, err = call(ctx, sale, ids[i])
				}
				out[i] = settle(t, what, ids[i], o, err, want)
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	m := make(map[string]string, len(ids))
	for i, id := range ids {
		m[id] = out[i]
	}
	return m
}

// settle is the outcome of a pay or a cancel: the state the order must end
// in, from the call's answer (200: the view's state, want; 409
// order_expired: the call came at or after pay_by and the order is
// expired). Any other answer is an error of the test, reported with
// t.Errorf (settleAll calls it from its goroutines) and "?" returned.
func settle(t *testing.T, what, id string, o *admin.Order, err error, want string) string {
	t.Helper()
	if ae, ok := errors.AsType[*admin.APIError](err); ok && ae.Code == http.StatusConflict && ae.Status == "order_expired" {
		return order.StateExpired
	}
	if err != nil {
		t.Errorf("%s %s: %v", what, id, err)
		return "?"
	}
	if o.ID != id || o.State != want || o.PayBy != nil {
		t.Errorf("%s %s: %s; want state %s, pay_by null", what, id, o.Raw, want)
		return "?"
	}
	return want
}

func isAPIError(err error) bool {
	_, ok := errors.AsType[*admin.APIError](err)
	return ok
}

// wantAPIError fails the test unless err is the API's answer code/status.
func wantAPIError(t *testing.T, what string, err error, code int, status string) {
	t.Helper()
	if ae, ok := errors.AsType[*admin.APIError](err); !ok || ae.Code != code || ae.Status != status {
		t.Fatalf("%s: error %v, want %d %s", what, err, code, status)
	}
}

// views reads the order view of every id from the gateway's public
// listener, from 16 goroutines.
func views(t *testing.T, g *gatewayProc, sale string, ids []string) map[string]*admin.Order {
	t.Helper()
	usePaymentClient(t)
	ctx := bg(t, 2*time.Minute)
	out := make([]*admin.Order, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				out[i], errs[i] = admin.ShowOrder(ctx, "http://"+g.public, sale, ids[i], admin.WithHTTPClient(paymentClient))
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	m := make(map[string]*admin.Order, len(ids))
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("order view %s: %v", id, errs[i])
		}
		m[id] = out[i]
	}
	return m
}

// waitNoneDue waits until no order of the sale awaits payment: the due set
// is empty and the pending counter 0. It returns when that was seen.
func (s *stack) waitNoneDue(sale string, timeout time.Duration) time.Time {
	s.t.Helper()
	ctx := context.Background()
	localstack.WaitFor(s.t, timeout, "every due order of "+sale+" expired", func() bool {
		due, err := s.rdb.ZCard(ctx, s.keys.Due(sale)).Result()
		pending, _ := s.rdb.HGet(ctx, s.keys.Meta(sale), "pending").Int64()
		return err == nil && due == 0 && pending == 0
	})
	return time.Now()
}

// orderRow is an order as MySQL holds it.
type orderRow struct {
	user  string
	qty   int64
	state string
}

// mysqlStates returns every order of the sale in MySQL, failing the test
// on an order id seen twice.
func (s *stack) mysqlStates(sale string) map[string]orderRow {
	s.t.Helper()
	out := map[string]orderRow{}
	for _, r := range s.orders(sale) {
		out[r.OrderID] = orderRow{user: r.UserID, qty: r.Quantity, state: r.State}
	}
	return out
}

// ledger is what the tests expect of a sale's orders: id → the 202 and
// the state the order must end in.
type ledger map[string]*expected

type expected struct {
	bought
	final string
}

func (l ledger) add(bs []bought, state string) {
	for _, b := range bs {
		l[b.id] = &expected{b, state}
	}
}

func (l ledger) set(states map[string]string) {
	for id, st := range states {
		l[id].final = st
	}
}

func (l ledger) ids(filter func(*expected) bool) []string {
	var out []string
	for id, e := range l {
		if filter == nil || filter(e) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// counts returns the orders in each final state and the live units
// (pending_payment, paid, confirmed), in all and per user.
func (l ledger) counts() (states map[string]int64, live int64, perUser map[string]int64) {
	states, perUser = map[string]int64{}, map[string]int64{}
	for _, e := range l {
		states[e.final]++
		if order.Live(e.final) {
			live += e.qty
			perUser[e.user] += e.qty
		}
	}
	return states, live, perUser
}

// checkRedis guards Invariants 1 and 8 in Redis once no order is due:
// every record holds the state its order must end in, sold is the units of
// live orders (sold + remaining = stock, remaining ≥ 0), each buyer holds
// exactly the units of their live orders (no entry at 0), and the order
// counters count each final state once, no order pending.
func (s *stack) checkRedis(g *gatewayProc, sale string, stock int64, l ledger) {
	s.t.Helper()
	ctx := context.Background()
	records := s.rdb.HGetAll(ctx, s.keys.Orders(sale)).Val()
	if len(records) != len(l) {
		s.t.Fatalf("Redis holds %d orders of %s, the buyers saw %d accepted", len(records), sale, len(l))
	}
	for id, e := range l {
		r, err := scripts.ParseRecord(records[id])
		if err != nil {
			s.t.Fatalf("order %s: %v", id, err)
		}
		if r.State != e.final || r.Quantity != e.qty || r.UserID != e.user {
			s.t.Fatalf("order %s in Redis: %+v; want state %s, %d units of %s", id, r, e.final, e.qty, e.user)
		}
	}
	states, live, perUser := l.counts()
	v, err := adminOf(s.t, g).Sale(bg(s.t, 10*time.Second), sale)
	if err != nil {
		s.t.Fatal(err)
	}
	if v.Stock != stock || v.Sold != live || v.Remaining != stock-live || v.Remaining < 0 || v.PendingPayment != 0 {
		s.t.Fatalf("admin view %s; want stock %d, sold %d (the live units), remaining %d, pending_payment 0", v.Raw, stock, live, stock-live)
	}
	users := s.rdb.HGetAll(ctx, s.keys.Users(sale)).Val()
	for u, n := range perUser {
		if users[u] != strconv.FormatInt(n, 10) {
			s.t.Fatalf("user %s holds %q units in Redis, want %d", u, users[u], n)
		}
	}
	if len(users) != len(perUser) {
		s.t.Fatalf("%d users hold units in Redis, want %d (a buyer at 0 is removed)", len(users), len(perUser))
	}
	meta := s.rdb.HGetAll(ctx, s.keys.Meta(sale)).Val()
	for field, state := range map[string]string{"pending": order.StatePendingPayment, "paid": order.StatePaid,
		"cancelled": order.StateCancelled, "expired": order.StateExpired} {
		if got, _ := strconv.ParseInt(meta[field], 10, 64); got != states[state] {
			s.t.Fatalf("Redis counter %s of %s is %q, want %d (meta %v)", field, sale, meta[field], states[state], meta)
		}
	}
	s.t.Logf("Redis: %v orders, sold %d of %d", states, live, stock)
}

// checkMySQLStates guards Invariant 3 and the MySQL half of Invariant 8:
// it waits until MySQL's `state` of every order is the one the order ended
// in, then checks that MySQL holds exactly the accepted orders, each once
// and with its units, that its live units are Redis's sold, and that the
// ledger counted every order once.
func (s *stack) checkMySQLStates(sale string, l ledger, timeout time.Duration) {
	s.t.Helper()
	var rows map[string]orderRow
	var diff string
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: 200 * time.Millisecond}, func(context.Context) error {
		rows = s.mysqlStates(sale)
		n := 0
		diff = ""
		for id, e := range l {
			if r, ok := rows[id]; !ok || r.state != e.final {
				if n++; n == 1 {
					diff = fmt.Sprintf("order %s: MySQL %+v (present %v), want %s", id, r, ok, e.final)
				}
			}
		}
		if n > 0 {
			return fmt.Errorf("%d orders not yet as in Redis; %s", n, diff)
		}
		return nil
	}, nil)
	if err != nil {
		s.t.Fatalf("MySQL after %v: %v", timeout, err)
	}
	if len(rows) != len(l) {
		s.t.Fatalf("MySQL holds %d orders of %s, %d were accepted: a row without a reservation", len(rows), sale, len(l))
	}
	var liveRows, units int64
	for id, e := range l {
		r := rows[id]
		if r.qty != e.qty || r.user != e.user {
			s.t.Fatalf("order %s in MySQL: %+v, want %d units of %s", id, r, e.qty, e.user)
		}
		units += r.qty
		if order.Live(r.state) {
			liveRows += r.qty
		}
	}
	sold, _ := s.rdb.HGet(context.Background(), s.keys.Meta(sale), "sold").Int64()
	if liveRows != sold {
		s.t.Fatalf("MySQL's live units %d, Redis sold %d", liveRows, sold)
	}
	var lu, lo int64
	err = s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(units), 0), COALESCE(SUM(orders), 0) FROM sale_ledger WHERE sale_id = ?`, sale).Scan(&lu, &lo)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		s.t.Fatal(err)
	}
	if lu != units || lo != int64(len(l)) {
		s.t.Fatalf("ledger %d units / %d orders, want %d / %d: an order counted twice or never", lu, lo, units, len(l))
	}
	s.t.Logf("MySQL: %d orders of %s, each once, states as in Redis; live units %d = Redis sold", len(rows), sale, liveRows)
}
