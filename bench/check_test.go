package bench

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// consistent are the figures of a sale that went right: 100 units sold,
// each in its own order, every order in MySQL.
func consistent() Figures {
	return Figures{
		Limit:          1,
		AcceptedOrders: 100, AcceptedUnits: 100,
		RedisStock: 100, RedisSold: 100, RedisRemaining: 0,
		MySQL:     true,
		MySQLRows: 100, MySQLDistinct: 100, MySQLUnits: 100,
	}
}

func results(cs []Check) map[string]string {
	m := map[string]string{}
	for _, c := range cs {
		m[c.Name] = c.Result
	}
	return m
}

func failedNames(cs []Check) []string {
	var out []string
	for _, c := range cs {
		if c.Result == Fail {
			out = append(out, c.Name)
		}
	}
	slices.Sort(out)
	return out
}

func TestVerifyConsistentPasses(t *testing.T) {
	cs := Verify(consistent())
	if len(cs) != 11 {
		t.Fatalf("%d checks, want 11", len(cs))
	}
	for _, c := range cs {
		if c.Result != Pass {
			t.Errorf("%s: %s (%s)", c.Name, c.Result, c.Detail)
		}
	}
	if err := (&Report{Checks: cs}).Err(); err != nil {
		t.Errorf("Report.Err = %v", err)
	}
}

// TestVerifyEachFailure breaks one figure at a time: each named row must
// fail, and only the rows the broken figure is compared in.
func TestVerifyEachFailure(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(f *Figures)
		want   []string
	}{
		{"Redis oversold", func(f *Figures) { f.RedisSold, f.RedisRemaining = 101, -1; f.RedisStock = 100 },
			[]string{"Redis: sold + remaining = stock, remaining ≥ 0", "Redis sold = MySQL SUM(quantity)", "accepted units = Redis sold"}},
		{"Redis ledger off", func(f *Figures) { f.RedisRemaining = 3 },
			[]string{"Redis: sold + remaining = stock, remaining ≥ 0"}},
		{"a 202 Redis does not know", func(f *Figures) { f.AcceptedUnits = 101 },
			[]string{"accepted units = Redis sold"}},
		{"Redis sold more than the 202s", func(f *Figures) { f.AcceptedUnits = 99 },
			[]string{"accepted units = Redis sold"}},
		{"user over the limit in the 202s", func(f *Figures) { f.UsersOverLimit = 1 },
			[]string{"no user over the limit (202s)"}},
		{"duplicate order id in the 202s", func(f *Figures) { f.DupOrderIDs = 2 },
			[]string{"no duplicate order id (202s)"}},
		{"an Idempotency-Key reserved twice", func(f *Figures) { f.IdemReserved = 1 },
			[]string{"Idempotency-Key replays reserved nothing"}},
		{"MySQL units differ from Redis", func(f *Figures) { f.MySQLUnits = 99 },
			[]string{"Redis sold = MySQL SUM(quantity)"}},
		{"MySQL lost an order", func(f *Figures) { f.MySQLRows, f.MySQLDistinct = 99, 99 },
			[]string{"accepted orders = MySQL rows"}},
		{"MySQL has an extra order", func(f *Figures) { f.MySQLRows, f.MySQLDistinct = 101, 101 },
			[]string{"accepted orders = MySQL rows"}},
		{"user over the limit in MySQL", func(f *Figures) { f.MySQLUsersOverLimit = 1 },
			[]string{"no user over the limit (MySQL)"}},
		{"duplicate order id in MySQL", func(f *Figures) { f.MySQLDistinct = 99 },
			[]string{"no duplicate order id (MySQL)"}},
		{"a 202 missing from MySQL", func(f *Figures) { f.MissingInMySQL = 1 },
			[]string{"every 202's order id is in MySQL"}},
		{"a MySQL row without a 202", func(f *Figures) { f.ExtraInMySQL = 1 },
			[]string{"no MySQL row without a 202"}},
		{"admin view unreadable", func(f *Figures) { f.RedisErr = "connection refused" },
			[]string{"Redis: sold + remaining = stock, remaining ≥ 0", "Redis sold = MySQL SUM(quantity)", "accepted units = Redis sold"}},
		{"MySQL unreadable", func(f *Figures) { f.MySQLErr = "no such table" },
			[]string{"Redis sold = MySQL SUM(quantity)", "accepted orders = MySQL rows", "every 202's order id is in MySQL",
				"no MySQL row without a 202", "no duplicate order id (MySQL)", "no user over the limit (MySQL)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := consistent()
			tt.break_(&f)
			cs := Verify(f)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if got := failedNames(cs); !slices.Equal(got, want) {
				t.Errorf("failed %q\nwant   %q", got, want)
			}
			err := (&Report{Checks: cs}).Err()
			if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), tt.want[0]) {
				t.Errorf("Report.Err = %v", err)
			}
		})
	}
}

// TestVerifyAllowsForUnansweredRequests: two requests whose outcome the
// bench cannot know (no answer, or a 503 from a gateway whose script may
// have run after its Redis timeout): Redis and MySQL may hold up to two
// orders nobody was told about, and no more.
func TestVerifyAllowsForUnansweredRequests(t *testing.T) {
	tests := []struct {
		name                    string
		unanswered, unavailable int64
	}{
		{"no answer", 2, 0},
		{"503 unavailable", 0, 2},
		{"one of each", 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := consistent()
			f.Unanswered, f.Unavailable = tt.unanswered, tt.unavailable
			f.AcceptedOrders, f.AcceptedUnits = 98, 98
			f.ExtraInMySQL = 2
			if got := failedNames(Verify(f)); len(got) != 0 {
				t.Errorf("within the slack, failed %q", got)
			}
			f.AcceptedOrders, f.AcceptedUnits = 97, 97
			f.ExtraInMySQL = 3
			want := []string{"accepted orders = MySQL rows", "accepted units = Redis sold", "no MySQL row without a 202"}
			if got := failedNames(Verify(f)); !slices.Equal(got, want) {
				t.Errorf("beyond the slack, failed %q, want %q", got, want)
			}
			// The slack never excuses a 202 that Redis does not know.
			f = consistent()
			f.Unanswered, f.Unavailable = tt.unanswered+3, tt.unavailable+3
			f.AcceptedUnits = 101
			if r := results(Verify(f))["accepted units = Redis sold"]; r != Fail {
				t.Errorf("more 202s than Redis sold: %s", r)
			}
		})
	}
}

func TestVerifyNoMySQLSkips(t *testing.T) {
	f := consistent()
	f.MySQL = false
	f.MySQLRows = 0 // not read
	cs := Verify(f)
	var skipped int
	for _, c := range cs {
		switch c.Result {
		case Skip:
			skipped++
		case Fail:
			t.Errorf("%s failed without MySQL", c.Name)
		}
	}
	if skipped != 6 {
		t.Errorf("%d skipped, want the 6 MySQL checks", skipped)
	}
	if err := (&Report{Checks: cs}).Err(); err != nil {
		t.Errorf("skips should not fail: %v", err)
	}
}

func TestLedger(t *testing.T) {
	l := newLedger()
	l.accept("o1", "u1", 1, "k1")
	l.accept("o1", "u1", 1, "k1") // replay of k1: fine
	l.accept("o2", "u2", 1, "")
	l.accept("o3", "u2", 1, "k3") // u2's second unit, over a limit of 1
	l.accept("o2", "u2", 1, "")   // same order id without a key: duplicate
	l.accept("o4", "u4", 1, "k1") // k1 answered with another order: reserved twice
	l.accept("o1", "u9", 1, "k1") // k1's order for another user: duplicate
	f := Figures{Limit: 1}
	l.figures(&f)
	if f.AcceptedOrders != 4 || f.AcceptedUnits != 4 {
		t.Errorf("orders %d units %d, want 4 4", f.AcceptedOrders, f.AcceptedUnits)
	}
	if f.UsersOverLimit != 1 {
		t.Errorf("users over the limit %d, want 1 (u2)", f.UsersOverLimit)
	}
	if f.DupOrderIDs != 2 {
		t.Errorf("duplicate order ids %d, want 2", f.DupOrderIDs)
	}
	if f.IdemReserved != 1 {
		t.Errorf("keys reserved twice %d, want 1", f.IdemReserved)
	}
	if l.replays != 1 {
		t.Errorf("replays %d, want 1", l.replays)
	}
	if ids := l.ids(); len(ids) != 4 {
		t.Errorf("ids %v", ids)
	}
}

func TestJSONString(t *testing.T) {
	tests := []struct {
		name, body, key, want string
	}{
		{"accepted", `{"status":"accepted","order_id":"abc-1","sale_id":"s"}`, `"order_id"`, "abc-1"},
		{"first field", `{"status":"sold_out"}`, `"status"`, "sold_out"},
		{"spaces", `{ "status" : "locked" }`, `"status"`, "locked"},
		{"key text inside a value", `{"user_id":"status","status":"ok"}`, `"status"`, "ok"},
		{"missing", `{"status":"ok"}`, `"order_id"`, ""},
		{"not a string", `{"status":5}`, `"status"`, ""},
		{"truncated", `{"status":"acc`, `"status"`, ""},
		{"empty body", ``, `"status"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(jsonString([]byte(tt.body), []byte(tt.key))); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if classify([]byte(`{"status":"rate_limited"}`)) != oRateLimited || classify([]byte(`<html>`)) != oOther {
		t.Error("classify")
	}
}

func TestOptionsRefuseRemoteTargets(t *testing.T) {
	base := Options{URL: "http://127.0.0.1:8080", AdminURL: "http://localhost:8081",
		MySQLDSN: "u:p@tcp(127.0.0.1:3306)/db", Stock: 10}
	tests := []struct {
		name   string
		change func(o *Options)
		ok     bool
	}{
		{"loopback", func(o *Options) {}, true},
		{"IPv6 loopback", func(o *Options) { o.URL = "http://[::1]:8080" }, true},
		{"remote gateway", func(o *Options) { o.URL = "http://10.0.0.1:8080" }, false},
		{"remote admin", func(o *Options) { o.AdminURL = "http://example.com" }, false},
		{"remote MySQL", func(o *Options) { o.MySQLDSN = "u:p@tcp(db.example.com:3306)/db" }, false},
		{"remote MySQL skipped", func(o *Options) { o.MySQLDSN = "u:p@tcp(db.example.com:3306)/db"; o.NoMySQL = true }, true},
		{"unix socket MySQL", func(o *Options) { o.MySQLDSN = "u:p@unix(/run/mysqld.sock)/db" }, true},
		{"remote allowed", func(o *Options) { o.URL = "http://10.0.0.1:8080"; o.AllowRemote = true }, true},
		{"a path in the URL", func(o *Options) { o.URL = "http://127.0.0.1:8080/v1" }, false},
		{"bad scheme", func(o *Options) { o.URL = "ftp://127.0.0.1" }, false},
		{"bad sale", func(o *Options) { o.Sale = "-x" }, false},
		{"dup ratio 1", func(o *Options) { o.DupRatio = 1 }, false},
		{"negative stock", func(o *Options) { o.Stock = -1 }, false},
		{"no database", func(o *Options) { o.MySQLDSN = "u:p@tcp(127.0.0.1:3306)/" }, false},
		{"a payment window, half paid", func(o *Options) { o.PaymentWindow, o.PayRatio = 5, 0.5 }, true},
		{"a payment window, none paid", func(o *Options) { o.PaymentWindow = 86400 }, true},
		{"all paid", func(o *Options) { o.PaymentWindow, o.PayRatio = 5, 1 }, true},
		{"pay ratio without a window", func(o *Options) { o.PayRatio = 0.5 }, false},
		{"pay ratio over 1", func(o *Options) { o.PaymentWindow, o.PayRatio = 5, 1.5 }, false},
		{"pay ratio NaN", func(o *Options) { o.PaymentWindow, o.PayRatio = 5, math.NaN() }, false},
		{"window over a day", func(o *Options) { o.PaymentWindow = 86401 }, false},
		{"negative window", func(o *Options) { o.PaymentWindow = -1 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base
			tt.change(&o)
			n, err := o.normalize()
			if tt.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrOptions) {
				t.Fatalf("accepted (err %v)", err)
			}
			if tt.ok && (n.Conns != 64 || n.Limit != 1 || !strings.HasPrefix(n.Sale, "bench-")) {
				t.Errorf("defaults not filled: %+v", n)
			}
		})
	}
}

// paying are the figures of a sale with a payment window that went right:
// 100 orders, 50 pays of which 48 came in time, the other 52 orders
// expired and their units back.
func paying() Figures {
	f := consistent()
	f.Payment, f.Waited = true, true
	f.PaysSent, f.PaysPaid, f.PaysExpired, f.PaidUnits = 50, 48, 2, 48
	f.RedisSold, f.RedisRemaining = 48, 52
	f.MySQLLiveUnits = 48
	return f
}

// TestVerifyPayment breaks one figure of a paying sale at a time: each
// named row must fail, and only the rows the broken figure is compared in.
func TestVerifyPayment(t *testing.T) {
	cs := Verify(paying())
	if len(cs) != 15 {
		t.Fatalf("%d checks, want 15", len(cs))
	}
	for _, c := range cs {
		if c.Result != Pass {
			t.Errorf("%s: %s (%s)", c.Name, c.Result, c.Detail)
		}
	}
	tests := []struct {
		name   string
		break_ func(f *Figures)
		want   []string
	}{
		{"a pay without an answer", func(f *Figures) { f.PaysSent, f.PayErrors = 51, 1 },
			[]string{"every pay answered paid or order_expired"}},
		{"an order still pending after the window", func(f *Figures) { f.RedisPending = 3 },
			[]string{"every order paid or expired 2 s after its window"}},
		{"Redis holds units nobody paid", func(f *Figures) { f.RedisSold, f.RedisRemaining = 50, 50 },
			[]string{"Redis sold = paid units", "units of expired orders back in remaining", "Redis sold = MySQL live units"}},
		{"units of an expired order not back", func(f *Figures) { f.RedisRemaining = 50 },
			[]string{"Redis: sold + remaining = stock, remaining ≥ 0", "units of expired orders back in remaining"}},
		{"units of an expired order back twice", func(f *Figures) { f.RedisRemaining = 54 },
			[]string{"Redis: sold + remaining = stock, remaining ≥ 0", "units of expired orders back in remaining"}},
		{"a buyer paid over the limit", func(f *Figures) { f.PaidOverLimit = 1 },
			[]string{"no user over the limit (paid orders)"}},
		{"MySQL missed a state change", func(f *Figures) { f.MySQLStateWrong = 2 },
			[]string{"MySQL state of every order as it ended (paid or expired)"}},
		{"MySQL live units differ", func(f *Figures) { f.MySQLLiveUnits = 50 },
			[]string{"Redis sold = MySQL live units"}},
		{"admin view unreadable", func(f *Figures) { f.RedisErr = "connection refused" },
			[]string{"Redis: sold + remaining = stock, remaining ≥ 0", "every order paid or expired 2 s after its window",
				"Redis sold = paid units", "units of expired orders back in remaining", "Redis sold = MySQL live units"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := paying()
			tt.break_(&f)
			want := slices.Clone(tt.want)
			slices.Sort(want)
			if got := failedNames(Verify(f)); !slices.Equal(got, want) {
				t.Errorf("failed %q\nwant   %q", got, want)
			}
		})
	}

	// Interrupted before the window passed: the expiry is not judged.
	f := paying()
	f.Waited, f.RedisPending = false, 30
	var skipped int
	for _, c := range Verify(f) {
		switch c.Result {
		case Skip:
			skipped++
		case Fail:
			t.Errorf("interrupted: %s failed", c.Name)
		}
	}
	if skipped != 3 {
		t.Errorf("interrupted: %d checks skipped, want 3", skipped)
	}
}

func TestLagHistogram(t *testing.T) {
	before := &lagHistogram{buckets: map[float64]float64{0.25: 5, 0.5: 10, 1: 10, math.Inf(1): 10}, sum: 2, count: 10}
	after := &lagHistogram{buckets: map[float64]float64{0.25: 55, 0.5: 108, 1: 110, math.Inf(1): 110}, sum: 32, count: 110, present: true}
	got := after.since(before)
	want := SweepLag{Expired: 100, Mean: 300 * time.Millisecond, P50: 250 * time.Millisecond, P99: time.Second, Max: time.Second}
	if *got != want {
		t.Errorf("lag %+v, want %+v", *got, want)
	}
	after.buckets[math.Inf(1)] = 111
	after.count = 111
	if got := after.since(before); got.Max != -1 {
		t.Errorf("an order over the last bucket: max %v, want -1", got.Max)
	}
	if got := after.since(after); got.Expired != 0 {
		t.Errorf("nothing expired: %+v", got)
	}
	if got := before.since(&lagHistogram{}); got != nil {
		t.Errorf("no histogram on the gateway: %+v, want nil", got)
	}
}
