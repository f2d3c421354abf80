package scripts

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// adminPairs is a good admin reply, field by field in the script's order,
// its names and values alternating.
func adminPairs() []any {
	return []any{"code", int64(0), "created", int64(1), "now", int64(1700000000000), "stock", int64(10),
		"sold", int64(3), "limit", int64(2), "locked", int64(1), "starts", int64(5), "ends", int64(6),
		"buyers", int64(2), "outbox", int64(1), "window", int64(60), "pending", int64(1), "paid", int64(7),
		"cancelled", int64(8), "expired", int64(9), "buckets", int64(4), "moved", int64(11),
		"room", int64(1), "rate", int64(50), "pass", int64(30), "joined", int64(12), "prequeue", int64(-1),
		"version", int64(3), "at", int64(1700000000500), "head", int64(4), "key", "00ff"}
}

// withField returns a with the value of field name replaced by v.
func withField(a []any, name string, v any) []any {
	i := slices.Index(a, any(name))
	a[i+1] = v
	return a
}

// The admin script's reply: its fields by name, each once, in any order,
// or an error naming what is wrong; never a field left at zero.
func TestDecodeAdmin(t *testing.T) {
	want := AdminReply{Code: CodeOK, Created: true, Now: 1700000000000, Stock: 10, Sold: 3, Limit: 2, Locked: true,
		StartsAt: 5, EndsAt: 6, Buyers: 2, Outbox: 1, Window: 60, Pending: 1, Paid: 7, Cancelled: 8, Expired: 9,
		Buckets: 4, Moved: 11, Room: Room{Mode: 1, Rate: 50, Pass: 30, Joined: 12, Prequeue: -1, Version: 3,
			At: 1700000000500, Head: 4, Key: "00ff"}}
	if got, err := decodeAdmin(adminPairs()); err != nil || got != want {
		t.Fatalf("decodeAdmin(good) = %+v, %v; want %+v", got, err, want)
	}
	// By name, not by place: the pairs reversed read the same.
	reversed := adminPairs()
	for i, j := 0, len(reversed)-2; i < j; i, j = i+2, j-2 {
		reversed[i], reversed[i+1], reversed[j], reversed[j+1] = reversed[j], reversed[j+1], reversed[i], reversed[i+1]
	}
	if got, err := decodeAdmin(reversed); err != nil || got != want {
		t.Fatalf("decodeAdmin(reversed) = %+v, %v; want %+v", got, err, want)
	}
	refused := withField(withField(withField(adminPairs(), "code", int64(CodeStockBelowSold)), "created", int64(0)), "locked", int64(0))
	if got, err := decodeAdmin(refused); err != nil || got.Code != CodeStockBelowSold || got.Created || got.Locked || got.Sold != 3 {
		t.Fatalf("decodeAdmin(refused) = %+v, %v", got, err)
	}
	// The positional reply of the releases before names, its 26 integers
	// and the key: a scripts folder of another release.
	positional := []any{int64(0), int64(1), int64(1700000000000), int64(10), int64(3), int64(2), int64(1),
		int64(5), int64(6), int64(2), int64(1), int64(60), int64(1), int64(7), int64(8), int64(9), int64(4), int64(11),
		int64(1), int64(50), int64(30), int64(12), int64(-1), int64(3), int64(1700000000500), int64(4), "00ff"}
	tests := []struct {
		name  string
		reply any
		err   string // part of the error
	}{
		{"code as a string", withField(adminPairs(), "code", "0"), `"code"`},
		{"stock as a string", withField(adminPairs(), "stock", "10"), `"stock"`},
		{"value nil", withField(adminPairs(), "outbox", nil), `"outbox"`},
		{"key as an integer", withField(adminPairs(), "key", int64(0)), `"key"`},
		{"a field missing", slices.Delete(adminPairs(), 6, 8), `"stock" missing`},
		{"the last field missing", adminPairs()[:52], `"key" missing`},
		{"an unknown field", append(adminPairs(), "colour", int64(0)), `unknown field "colour"`},
		{"a field twice", append(adminPairs(), "stock", int64(99)), `"stock" given twice`},
		{"odd length", adminPairs()[:5], "want name, value pairs"},
		{"a name as an integer", append([]any{int64(0), int64(0)}, adminPairs()[2:]...), "want a field name"},
		{"positional, as before names", positional, "want name, value pairs"},
		{"positional of an even length", positional[:26], "want a field name"},
		{"empty", []any{}, `"code" missing`},
		{"not an array", "pong", "want name, value pairs"},
		{"nil", nil, "want name, value pairs"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeAdmin(tc.reply)
			if err == nil || got != (AdminReply{}) {
				t.Fatalf("decodeAdmin = %+v, %v; want an error and nothing read", got, err)
			}
			if !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %q does not say %q", err, tc.err)
			}
		})
	}
}

// A sale's view is read on every public GET of a sale: decoding it by name
// allocates nothing.
func TestDecodeAdminAllocs(t *testing.T) {
	reply := any(adminPairs())
	var sum int64
	allocs := testing.AllocsPerRun(1000, func() {
		r, err := decodeAdmin(reply)
		if err != nil {
			t.Fatal(err)
		}
		sum += r.Stock
	})
	if allocs != 0 {
		t.Errorf("decoding an admin reply allocates %.1f times, want 0", allocs)
	}
	_ = sum
}

// The names the built-in admin.lua answers are adminNames, in their
// order: a field renamed on one side only fails here, before any Redis.
func TestAdminLuaFieldNames(t *testing.T) {
	src := mustBuiltin(Admin)
	view := regexp.MustCompile(`(?s)return \{'code', .*?\}\nend`).FindString(src)
	if view == "" {
		t.Fatal("admin.lua: no view table found (return {'code', …})")
	}
	var lua []string
	for _, m := range regexp.MustCompile(`[{,]\s*'([a-z]+)', `).FindAllStringSubmatch(view, -1) {
		lua = append(lua, m[1])
	}
	if !slices.Equal(lua, adminNames[:]) {
		t.Errorf("admin.lua answers %v,\nadminNames are %v", lua, adminNames)
	}
}

func TestDecodePing(t *testing.T) {
	if _, err := decodePing("pong"); err != nil {
		t.Errorf("decodePing(pong): %v", err)
	}
	for name, v := range map[string]any{
		"another string": "PONG",
		"an admin view":  []any{int64(0)},
		"nil":            nil,
		"bytes":          []byte("pong"),
	} {
		if _, err := decodePing(v); err == nil {
			t.Errorf("decodePing(%s) took it", name)
		}
	}
}
