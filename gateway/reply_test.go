package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/scripts"
)

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

	// Each reserve reply names the order it was sent (oid, the first field
	// of ARGV[3]), as the real script does, so that only its shape is wrong.
	const oid = "local oid = string.match(ARGV[3], '^[^\\t]+')\n"
	const adminPing = "if ARGV[1] == 'ping' then return 'pong' end\n"
	rows := []struct {
		name, script, src string
	}{
		{"reserve: code not a number", scripts.Reserve, oid + "return 'ok\\t' .. oid .. '\\t0\\n'"},
		{"reserve: no order id", scripts.Reserve, "return '0\\t\\t0\\n'"},
		{"reserve: pay_by not a number", scripts.Reserve, oid + "return '0\\t' .. oid .. '\\tsoon\\n'"},
		{"reserve: short", scripts.Reserve, oid + "return '0\\t' .. oid .. '\\n'"},
		{"reserve: long", scripts.Reserve, oid + "return '0\\t' .. oid .. '\\t0\\n0\\t' .. oid .. '\\t0\\n'"},
		{"reserve: no newline", scripts.Reserve, oid + "return '0\\t' .. oid .. '\\t0'"},
		{"reserve: a table, the old form", scripts.Reserve, oid + "return {0, oid, 0}"},
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
