package bench

import (
	"errors"
	"fmt"
	"strings"
)

// ErrFailed is wrapped by Report.Err when an invariant check failed.
var ErrFailed = errors.New("invariant check failed")

// Results of a Check.
const (
	Pass = "PASS"
	Fail = "FAIL"
	Skip = "SKIP"
)

// Check is the verdict on one invariant.
type Check struct {
	Name   string `json:"name"`
	Result string `json:"result"` // Pass, Fail or Skip
	Detail string `json:"detail"`
}

// Figures are what the invariant checks compare: what the buyers were told
// (the 202s), what Redis holds (the admin view) and what MySQL holds.
type Figures struct {
	Limit int64 `json:"limit"` // per_user_limit of the sale

	// From the 202 answers, counting each order id once.
	AcceptedOrders int64 `json:"accepted_orders"`
	AcceptedUnits  int64 `json:"accepted_units"`
	UsersOverLimit int64 `json:"users_over_limit"` // users whose 202s add up to more than Limit
	DupOrderIDs    int64 `json:"dup_order_ids"`    // order ids answered 202 twice, other than an Idempotency-Key replay
	IdemReserved   int64 `json:"idem_reserved"`    // Idempotency-Keys that were answered with two different order ids
	// Unanswered counts requests that ended without any answer (timeout,
	// reset), and Unavailable those answered 503 unavailable: the gateway
	// gave up on Redis in time (API.md: nothing was promised), but the
	// script it had sent may still have run. Either may have reserved a
	// unit nobody was told about, so figures from the 202s are allowed to
	// fall short of Redis's and MySQL's by that much, and no more.
	Unanswered  int64 `json:"unanswered"`
	Unavailable int64 `json:"unavailable"`

	// From Redis, through the admin view.
	RedisErr       string `json:"redis_error,omitempty"` // why the view could not be read; empty when it was
	RedisStock     int64  `json:"redis_stock"`
	RedisSold      int64  `json:"redis_sold"`
	RedisRemaining int64  `json:"redis_remaining"`

	// From MySQL; MySQL is false when it was not checked (--no-mysql).
	MySQL               bool   `json:"mysql"`
	MySQLErr            string `json:"mysql_error,omitempty"` // why the figures could not be read; empty when they were
	MySQLRows           int64  `json:"mysql_rows"`
	MySQLDistinct       int64  `json:"mysql_distinct"`         // COUNT(DISTINCT order_id)
	MySQLUnits          int64  `json:"mysql_units"`            // SUM(quantity)
	MySQLUsersOverLimit int64  `json:"mysql_users_over_limit"` // users whose rows add up to more than Limit
	MissingInMySQL      int64  `json:"missing_in_mysql"`       // order ids of 202s with no row
	ExtraInMySQL        int64  `json:"extra_in_mysql"`         // rows of the sale whose order id no 202 carried

	// Payment is true on a sale with a payment window: the run paid a
	// fraction of the accepted orders through the admin API, left the
	// others to expire, and waited until the window plus 2 s had passed
	// since the last 202 (Waited: false when interrupted before).
	Payment bool `json:"payment"`
	Waited  bool `json:"payment_waited"`
	// From the pay calls.
	PaysSent      int64 `json:"pays_sent"`
	PaysPaid      int64 `json:"pays_paid"`       // answered 200 with the order paid
	PaysExpired   int64 `json:"pays_expired"`    // answered 409 order_expired: at or after pay_by
	PayErrors     int64 `json:"pay_errors"`      // any other answer, or none
	PaidUnits     int64 `json:"paid_units"`      // units of the orders answered paid
	PaidOverLimit int64 `json:"paid_over_limit"` // users whose paid units add up to more than Limit
	// From the admin view after the wait.
	RedisPending int64 `json:"redis_pending"` // pending_payment
	// From MySQL after the wait.
	MySQLLiveUnits  int64 `json:"mysql_live_units"`  // SUM(quantity) of rows confirmed, pending_payment or paid
	MySQLStateWrong int64 `json:"mysql_state_wrong"` // accepted orders whose MySQL state is not the one they ended in
}

// Verify returns one Check per invariant, in a fixed order. It is a pure
// function of f, so that each verdict can be tested on made-up figures.
func Verify(f Figures) []Check {
	var out []Check
	add := func(name string, ok bool, detail string, args ...any) {
		r := Fail
		if ok {
			r = Pass
		}
		out = append(out, Check{Name: name, Result: r, Detail: fmt.Sprintf(detail, args...)})
	}
	// upTo reports whether got is want, or, with answers that may hide a
	// reservation, between want and want plus their number.
	unknown := f.Unanswered + f.Unavailable
	upTo := func(want, got int64) bool {
		return got == want || (got > want && got-want <= unknown)
	}
	slack := ""
	switch {
	case f.Unanswered > 0 && f.Unavailable > 0:
		slack = fmt.Sprintf(" (%d requests got no answer and %d got 503, either may have reserved; allowed for)", f.Unanswered, f.Unavailable)
	case f.Unanswered > 0:
		slack = fmt.Sprintf(" (%d requests got no answer; allowed for)", f.Unanswered)
	case f.Unavailable > 0:
		slack = fmt.Sprintf(" (%d requests got 503, which may have reserved; allowed for)", f.Unavailable)
	}

	const ledger, soldName = "Redis: sold + remaining = stock, remaining ≥ 0", "accepted units = Redis sold"
	if f.RedisErr != "" {
		out = append(out, Check{ledger, Fail, "admin view: " + f.RedisErr})
		if !f.Payment {
			out = append(out, Check{soldName, Fail, "admin view: " + f.RedisErr})
		}
	} else {
		add(ledger, f.RedisSold+f.RedisRemaining == f.RedisStock && f.RedisRemaining >= 0,
			"sold %d + remaining %d, stock %d", f.RedisSold, f.RedisRemaining, f.RedisStock)
		if !f.Payment {
			add(soldName, upTo(f.AcceptedUnits, f.RedisSold), "202s %d, Redis %d%s", f.AcceptedUnits, f.RedisSold, slack)
		}
	}
	if f.Payment {
		out = append(out, verifyPayment(f)...)
	} else {
		add("no user over the limit (202s)", f.UsersOverLimit == 0, "%d users over %d", f.UsersOverLimit, f.Limit)
	}
	add("no duplicate order id (202s)", f.DupOrderIDs == 0, "%d order ids answered twice", f.DupOrderIDs)
	add("Idempotency-Key replays reserved nothing", f.IdemReserved == 0, "%d keys got a second order", f.IdemReserved)

	mysqlChecks := []string{
		"Redis sold = MySQL SUM(quantity)",
		"accepted orders = MySQL rows",
		"no user over the limit (MySQL)",
		"no duplicate order id (MySQL)",
		"every 202's order id is in MySQL",
		"no MySQL row without a 202",
	}
	if f.Payment {
		mysqlChecks[0] = "Redis sold = MySQL live units"
		mysqlChecks = append(mysqlChecks, "MySQL state of every order as it ended (paid or expired)")
	}
	switch {
	case !f.MySQL:
		for _, n := range mysqlChecks {
			out = append(out, Check{n, Skip, "--no-mysql"})
		}
	case f.MySQLErr != "":
		for _, n := range mysqlChecks {
			out = append(out, Check{n, Fail, "mysql: " + f.MySQLErr})
		}
	default:
		switch {
		case f.RedisErr != "":
			out = append(out, Check{mysqlChecks[0], Fail, "admin view: " + f.RedisErr})
		case f.Payment:
			add(mysqlChecks[0], f.MySQLLiveUnits == f.RedisSold, "Redis %d, MySQL %d (confirmed, pending_payment or paid)", f.RedisSold, f.MySQLLiveUnits)
		default:
			add(mysqlChecks[0], f.MySQLUnits == f.RedisSold, "Redis %d, MySQL %d", f.RedisSold, f.MySQLUnits)
		}
		add(mysqlChecks[1], upTo(f.AcceptedOrders, f.MySQLRows), "202s %d, MySQL %d%s", f.AcceptedOrders, f.MySQLRows, slack)
		add(mysqlChecks[2], f.MySQLUsersOverLimit == 0, "%d users over %d", f.MySQLUsersOverLimit, f.Limit)
		add(mysqlChecks[3], f.MySQLDistinct == f.MySQLRows, "%d rows, %d distinct order ids", f.MySQLRows, f.MySQLDistinct)
		add(mysqlChecks[4], f.MissingInMySQL == 0, "%d missing", f.MissingInMySQL)
		add(mysqlChecks[5], f.ExtraInMySQL <= unknown, "%d rows no 202 announced%s", f.ExtraInMySQL, slack)
		if f.Payment {
			add(mysqlChecks[6], f.MySQLStateWrong == 0, "%d of %d orders differ", f.MySQLStateWrong, f.AcceptedOrders)
		}
	}
	return out
}

// verifyPayment returns the checks of a sale with a payment window
// (Invariant 8), in a fixed order: every pay got an answer that decides the
// order; after the window plus 2 s no order awaits payment; Redis sold
// exactly the paid units, so every unpaid order's units are back in
// remaining; and no buyer paid for more than the limit. A request that got
// no answer, or a 503, may have left an order nobody knew of: it is not
// paid, so it expires and changes none of these.
func verifyPayment(f Figures) []Check {
	var out []Check
	add := func(name string, ok bool, detail string, args ...any) {
		r := Fail
		if ok {
			r = Pass
		}
		out = append(out, Check{Name: name, Result: r, Detail: fmt.Sprintf(detail, args...)})
	}
	add("every pay answered paid or order_expired", f.PayErrors == 0 && f.PaysPaid+f.PaysExpired == f.PaysSent,
		"%d pays: %d paid, %d order_expired, %d other or no answer", f.PaysSent, f.PaysPaid, f.PaysExpired, f.PayErrors)
	const (
		settled = "every order paid or expired 2 s after its window"
		sold    = "Redis sold = paid units"
		back    = "units of expired orders back in remaining"
	)
	switch {
	case !f.Waited:
		for _, n := range []string{settled, sold, back} {
			out = append(out, Check{n, Skip, "interrupted before the window had passed"})
		}
	case f.RedisErr != "":
		for _, n := range []string{settled, sold, back} {
			out = append(out, Check{n, Fail, "admin view: " + f.RedisErr})
		}
	default:
		add(settled, f.RedisPending == 0, "%d orders still pending_payment", f.RedisPending)
		add(sold, f.RedisSold == f.PaidUnits, "paid %d units, Redis sold %d", f.PaidUnits, f.RedisSold)
		add(back, f.RedisRemaining == f.RedisStock-f.PaidUnits,
			"remaining %d, stock %d − paid %d = %d", f.RedisRemaining, f.RedisStock, f.PaidUnits, f.RedisStock-f.PaidUnits)
	}
	add("no user over the limit (paid orders)", f.PaidOverLimit == 0, "%d users over %d", f.PaidOverLimit, f.Limit)
	return out
}

// failed names the checks that failed, or "" when none did.
func failed(cs []Check) string {
	var names []string
	for _, c := range cs {
		if c.Result == Fail {
			names = append(names, c.Name)
		}
	}
	return strings.Join(names, "; ")
}
