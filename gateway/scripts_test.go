package gateway

import (
	"context"
	"fmt"
	"github.com/flashgate/flashgate/sale/saletest"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/scripts"
)

// runBurstWith runs a buy burst on a fresh sale while op runs `times` times
// on another goroutine, and checks no buy got a 5xx and the ledger holds.
func runBurstWith(t *testing.T, g *testGateway, sale string, times int, op func()) {
	t.Helper()
	g.mustSale(sale, `{"stock":400,"per_user_limit":1}`)
	var done atomic.Bool
	opDone := make(chan struct{})
	go func() {
		defer close(opDone)
		for i := 0; i < times && !done.Load(); i++ {
			op()
		}
	}()
	o := newOutcomes()
	saletest.Burst(1500, 64, func(i int) {
		user := fmt.Sprintf("p%d", i)
		o.add(t, g.buy(sale, user, 1, ""), user)
	})
	done.Store(true)
	<-opDone
	if len(o.fivexx) > 0 {
		t.Errorf("%d answers were 5xx, first: %s", len(o.fivexx), o.fivexx[0])
	}
	if _, units := o.accepted(); units != 400 {
		t.Errorf("accepted %d units of 400 (%v)", units, o.byStatus)
	}
	g.checkLedger(sale)
}

// Invariant 1 while Redis loses its script cache mid-burst: NOSCRIPT is
// handled by loading the set again (hold pass first: a flush is no restart,
// so nothing is held), and no buy gets a 5xx.
func TestScriptFlushDuringBurst(t *testing.T) {
	g := startGateway(t, onOwnRedis(t))
	before := g.loader.Stats().NoScript
	runBurstWith(t, g, "flush", 20, func() {
		if err := g.rdb.ScriptFlush(context.Background()).Err(); err != nil {
			t.Errorf("SCRIPT FLUSH: %v", err)
		}
	})
	if g.loader.Stats().NoScript == before {
		t.Errorf("no NOSCRIPT was met: the test did not exercise the reload path")
	}
}

// Invariant 1 while an operator reloads the scripts mid-burst: each call
// runs one whole set, old or new.
func TestReloadDuringBurst(t *testing.T) {
	g := startGateway(t)
	runBurstWith(t, g, "reload", 30, func() {
		if r := g.do("POST", g.admin+"/admin/v1/scripts/reload", "", auth); r.code != 200 {
			t.Errorf("reload: %d %s", r.code, r.raw)
		}
	})
}

// A reload with a script Redis cannot compile is refused (422) and keeps
// the set in use: buyers never meet a half-loaded set. That set also
// survives the loss of the script cache (invariant 12): after a SCRIPT
// FLUSH, the NOSCRIPT loads it again from memory, not the broken folder,
// and buys go on; the admin view says the folder differs from it.
func TestBrokenScriptKeepsOldSet(t *testing.T) {
	dir := t.TempDir()
	for _, name := range scripts.Names() {
		src, err := os.ReadFile(filepath.Join("..", "scripts", "lua", name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, func(c *config.Config) { c.Scripts.Dir = dir })
	g.mustSale("broken", `{"stock":10}`)
	list := g.do("GET", g.admin+"/admin/v1/scripts", "", auth)
	if list.code != 200 || len(list.body["scripts"].([]any)) != len(scripts.Names()) || list.str("folder") != "same" || list.str("read_at") == "" {
		t.Fatalf("list: %d %s", list.code, list.raw)
	}
	const broken = "return {{{ not lua"
	if err := os.WriteFile(filepath.Join(dir, "reserve.lua"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	r := g.do("POST", g.admin+"/admin/v1/scripts/reload", "", auth)
	if r.code != 422 || r.status() != "script_error" || r.str("error") == "" {
		t.Fatalf("reload of a broken script: %d %s", r.code, r.raw)
	}
	// The set in use, the same as before, and the folder's broken file.
	checkInUse := func(when string) {
		t.Helper()
		after := g.do("GET", g.admin+"/admin/v1/scripts", "", auth)
		if after.code != 200 || after.str("folder") != "differs" || after.str("read_at") != list.str("read_at") {
			t.Errorf("%s: %d %s, want the folder differing from the set read at %s", when, after.code, after.raw, list.str("read_at"))
		}
		was, now := list.body["scripts"].([]any), after.body["scripts"].([]any)
		if len(now) != len(was) {
			t.Fatalf("%s: scripts %s, were %s", when, after.raw, list.raw)
		}
		for i := range now {
			w, n := was[i].(map[string]any), now[i].(map[string]any)
			if n["name"] != w["name"] || n["sha"] != w["sha"] {
				t.Errorf("%s: script %v, was %v", when, n, w)
			}
			wantFolder := any(nil)
			if n["name"] == "reserve" {
				wantFolder = redis.NewScript(broken).Hash()
			}
			if n["folder_sha"] != wantFolder {
				t.Errorf("%s: %s: folder_sha %v, want %v", when, n["name"], n["folder_sha"], wantFolder)
			}
		}
	}
	checkInUse("after a failed reload")
	if r := g.buy("broken", "kim", 1, ""); r.code != 202 {
		t.Errorf("buy after a failed reload: %d %s", r.code, r.raw)
	}

	// Redis loses its script cache: the buys load the set in use again.
	before := g.loader.Stats().NoScript
	if err := scripts.ForEachPrimary(t.Context(), g.rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
		return node.ScriptFlush(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"ann", "bob", "cid"} {
		if r := g.buy("broken", user, 1, ""); r.code != 202 {
			t.Errorf("buy by %s after SCRIPT FLUSH: %d %s", user, r.code, r.raw)
		}
	}
	if g.loader.Stats().NoScript == before {
		t.Errorf("no NOSCRIPT was met: the test did not exercise the path")
	}
	checkInUse("after SCRIPT FLUSH")

	// A fixed script is taken by the next reload, with a new SHA.
	src, _ := os.ReadFile(filepath.Join("..", "scripts", "lua", "reserve.lua"))
	os.WriteFile(filepath.Join(dir, "reserve.lua"), append(src, "\n-- changed\n"...), 0o644)
	r = g.do("POST", g.admin+"/admin/v1/scripts/reload", "", auth)
	if r.code != 200 || reflect.DeepEqual(r.body["scripts"], list.body["scripts"]) || r.str("folder") != "same" {
		t.Errorf("reload of a fixed script: %d %s", r.code, r.raw)
	}
	if r := g.buy("broken", "lee", 1, ""); r.code != 202 {
		t.Errorf("buy after reload: %d %s", r.code, r.raw)
	}
}

// Without a folder the set is the built-in copies, which cannot differ.
func TestScriptsBuiltinFolderNone(t *testing.T) {
	g := startGateway(t)
	r := g.do("GET", g.admin+"/admin/v1/scripts", "", auth)
	if r.code != 200 || r.status() != "ok" || r.str("folder") != "none" || r.str("read_at") == "" ||
		len(r.body["scripts"].([]any)) != len(scripts.Names()) {
		t.Errorf("GET /admin/v1/scripts: %d %s", r.code, r.raw)
	}
}
