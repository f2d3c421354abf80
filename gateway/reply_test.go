package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/scripts"
)

// Invariant 7: a reply the gateway cannot read promises nothing. The reply
// here stands in for the reserve script's (what is under test is the
// decoding); a mistyped code once read as 0, accepted.
func TestDecodeReserve(t *testing.T) {
	tests := []struct {
		name  string
		reply any
		n     int     // reservations sent
		want  []error // per reservation, when the reply is readable
	}{
		{"accepted and sold out", []any{int64(0), "o1", int64(0), int64(6), "", int64(0)}, 2, []error{nil, ErrSoldOut}},
		{"accepted with a pay_by", []any{int64(0), "o1", int64(1735689600123)}, 1, []error{nil}},
		{"limit reached", []any{int64(5), "", int64(0)}, 1, []error{ErrLimitReached}},
		{"unknown code", []any{int64(99), "", int64(0)}, 1, []error{ErrUnavailable}},
		{"order id collision", []any{int64(scripts.CodeOrderIDCollision), "o1", int64(0)}, 1, []error{ErrUnavailable}},
		{"code as a string", []any{"0", "o1", int64(0)}, 1, nil},
		{"code as nil", []any{nil, "o1", int64(0)}, 1, nil},
		{"second code mistyped", []any{int64(0), "o1", int64(0), "6", "", int64(0)}, 2, nil},
		{"order id as an integer", []any{int64(0), int64(0), int64(0)}, 1, nil},
		{"accepted without an order id", []any{int64(0), "", int64(0)}, 1, nil},
		{"pay_by as a string", []any{int64(0), "o1", "0"}, 1, nil},
		{"pay_by negative", []any{int64(0), "o1", int64(-1)}, 1, nil},
		{"short", []any{int64(0), "o1"}, 1, nil},
		{"empty", []any{}, 1, nil},
		{"long", []any{int64(0), "o1", int64(0), int64(0), "o2", int64(0)}, 1, nil},
		{"not an array", "OK", 1, nil},
		{"nil", nil, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := make([]Result, tc.n)
			err := decodeReserve(tc.reply, out)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("decodeReserve(%#v) = %+v, want an error", tc.reply, out)
				}
				for i, r := range out {
					if r != (Result{}) {
						t.Errorf("result %d set by a refused reply: %+v", i, r)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("decodeReserve(%#v): %v", tc.reply, err)
			}
			for i, want := range tc.want {
				if want == nil && out[i].Err != nil || want != nil && !errors.Is(out[i].Err, want) {
					t.Errorf("result %d = %+v, want %v", i, out[i], want)
				}
			}
		})
	}
}

// Invariant 7, for the admin script's reply: eighteen integers or an error.
func TestDecodeAdmin(t *testing.T) {
	good := func() []any {
		return []any{int64(0), int64(1), int64(1700000000000), int64(10), int64(3), int64(2), int64(0),
			int64(0), int64(0), int64(2), int64(1), int64(60), int64(1), int64(0), int64(0), int64(0), int64(1), int64(0)}
	}
	if n, err := decodeAdmin(good()); err != nil || n[3] != 10 || n[9] != 2 {
		t.Fatalf("decodeAdmin(good) = %v, %v", n, err)
	}
	tests := []struct {
		name  string
		reply func() any
	}{
		{"code as a string", func() any { a := good(); a[0] = "0"; return a }},
		{"stock as a string", func() any { a := good(); a[3] = "10"; return a }},
		{"element nil", func() any { a := good(); a[10] = nil; return a }},
		{"short", func() any { return good()[:15] }},
		{"eleven, as before payment windows", func() any { return good()[:11] }},
		{"sixteen, as before buckets", func() any { return good()[:16] }},
		{"long", func() any { return append(good(), int64(0)) }},
		{"not an array", func() any { return "pong" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if n, err := decodeAdmin(tc.reply()); err == nil {
				t.Errorf("decodeAdmin = %v, want an error", n)
			}
		})
	}
}

// Every code the scripts can answer has its outcome; only an order id
// collision, a sale held for repair, a bucketed sale's home (which
// Store.Reserve never lets a buyer hear), a stock below what a home handed
// its buckets (which Store.Upsert never lets an admin hear) and codes no
// script has are 503.
func TestOutcomeOfEveryCode(t *testing.T) {
	seen := map[error]scripts.Code{}
	for c := scripts.Code(0); c.Known(); c++ {
		err := outcome(c)
		switch {
		case c == scripts.CodeOK:
			if err != nil {
				t.Errorf("%s: %v", c, err)
			}
		case c == scripts.CodeOrderIDCollision || c == scripts.CodeRepairing || c == scripts.CodeBucketed ||
			c == scripts.CodeStockBelowMoved:
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("%s: %v, want ErrUnavailable", c, err)
			}
		case err == nil || errors.Is(err, ErrUnavailable):
			t.Errorf("%s has no outcome: %v", c, err)
		default:
			if prev, dup := seen[err]; dup {
				t.Errorf("%s and %s are both %v", prev, c, err)
			}
			seen[err] = c
		}
	}
}

// Invariant 7 against real Redis: a script (loaded from scripts.dir, as an
// operator could) whose reply has the wrong shape gets 503 unavailable,
// never a 202 or a made-up sale.
func TestMalformedScriptReplyIs503(t *testing.T) {
	dir := t.TempDir()
	builtin := map[string][]byte{}
	for _, name := range scripts.Names() {
		src, err := os.ReadFile(filepath.Join("..", "scripts", "lua", name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		builtin[name] = src
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, func(c *config.Config) { c.Scripts.Dir = dir })
	g.mustSale("mal", `{"stock":10,"per_user_limit":10}`)

	// Each reserve reply names the order it was sent (ARGV[3]), as the real
	// script does, so that only its shape is wrong.
	const adminPing = "if ARGV[1] == 'ping' then return 'pong' end\n"
	rows := []struct {
		name, script, src string
	}{
		{"reserve: code as a string", scripts.Reserve, "return {'0', ARGV[3], 0}"},
		{"reserve: order id as an integer", scripts.Reserve, "return {0, 0, 0}"},
		{"reserve: pay_by as a string", scripts.Reserve, "return {0, ARGV[3], '0'}"},
		{"reserve: short", scripts.Reserve, "return {0, ARGV[3]}"},
		{"reserve: long", scripts.Reserve, "return {0, ARGV[3], 0, 0, ARGV[3], 0}"},
		{"reserve: not a table", scripts.Reserve, "return 'OK'"},
		{"admin: code as a string", scripts.Admin, adminPing + "return {'0', 0, 0, 10, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}"},
		{"admin: stock as a string", scripts.Admin, adminPing + "return {0, 0, 0, '10', 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}"},
		{"admin: short", scripts.Admin, adminPing + "return {0, 0, 0, 10}"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			load := func(src []byte) {
				t.Helper()
				if err := os.WriteFile(filepath.Join(dir, r.script+".lua"), src, 0o644); err != nil {
					t.Fatal(err)
				}
				if _, err := g.loader.Load(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			load([]byte(r.src))
			defer load(builtin[r.script])
			var checks []response
			if r.script == scripts.Reserve {
				checks = append(checks, g.buy("mal", "mona", 1, ""), g.buy("mal", "mona", 1, "key-1"))
			} else {
				checks = append(checks, g.view("mal"), g.do("GET", g.base+"/v1/sales/mal", "", nil),
					g.adminPost("mal", "lock", ""))
			}
			for i, res := range checks {
				if res.code != 503 || res.status() != "unavailable" {
					t.Errorf("request %d: %d %s, want 503 unavailable", i, res.code, res.raw)
				}
			}
		})
	}
	if sold := g.checkLedger("mal"); sold != 0 {
		t.Errorf("sold %d with broken scripts, want 0", sold)
	}
	if r := g.buy("mal", "mona", 1, ""); r.code != 202 {
		t.Errorf("buy with the scripts restored: %d %s", r.code, r.raw)
	}
}
