package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// Invariant 12 through the real binaries (issue 18): a gateway and a
// consumer load their scripts from a folder; an operator breaks the folder
// (a syntax error in the gateway's reserve script and in the consumer's
// repair script) and reloads, which is refused, by the admin API (422) and
// by SIGHUP alike. Then Redis loses its
// script cache, by SCRIPT FLUSH and by a restart of the test's own
// redis-server: each time the processes load the set in use again from
// memory, and buys go on being accepted on it. Before, the NOSCRIPT path
// read the broken folder, and every buy answered 503 until it was fixed.
func TestFailedReloadSurvivesRedisRestart(t *testing.T) {
	dir := t.TempDir()
	for _, name := range scripts.Names() {
		src, err := os.ReadFile(filepath.Join("..", "..", "scripts", "lua", name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := startRedis(t)
	s := newStack(t, "FLASHGATE_REDIS_ADDRS="+r.addr, "FLASHGATE_SCRIPTS_DIR="+dir)
	s.useRedis(r)
	g := s.startGateway(nil)
	s.startConsumers(1)
	const sale = "scriptset"
	s.createSale(g, sale, 100, 1)
	c := adminOf(t, g)

	// buy sends u's buy until it is answered other than 503 (a sale held
	// after the restart, Redis coming back), with one Idempotency-Key, for
	// up to wait, and returns the 202's order id.
	buy := func(u string, wait time.Duration) string {
		t.Helper()
		var code int
		var raw string
		localstack.WaitFor(t, wait, "an answer other than 503 to the buy of "+u, func() bool {
			var err error
			code, raw, err = postBuy(paymentClient, g, sale, "k-"+u, `{"user_id":"`+u+`","quantity":1}`)
			return err == nil && code != http.StatusServiceUnavailable
		})
		var a buyAnswer
		if err := json.Unmarshal([]byte(raw), &a); err != nil || code != http.StatusAccepted || a.OrderID == "" {
			t.Fatalf("buy of %s: %d %s", u, code, raw)
		}
		return a.OrderID
	}
	// created waits until the order is in MySQL and marked so in Redis by
	// the consumer.
	created := func(id string) {
		t.Helper()
		localstack.WaitFor(t, time.Minute, "order "+id+" created", func() bool {
			o, err := admin.ShowOrder(bg(t, 5*time.Second), "http://"+g.public, sale, id, admin.WithHTTPClient(paymentClient))
			return err == nil && o.Status == "created"
		})
	}
	noscript := func() float64 { return scrapeURL(t, "http://"+g.admin+"/metrics")["flashgate_script_noscript_total"] }

	// The consumer loads its set at its start, in the background: one
	// order through to MySQL gives it the time to, before the folder
	// breaks.
	created(buy("u0", 10*time.Second))
	inUse, err := c.Scripts(bg(t, 10*time.Second))
	if err != nil || inUse.Folder != admin.FolderSame || inUse.ReadAt == nil {
		t.Fatalf("scripts before the break: %+v %v, want the folder the same", inUse, err)
	}

	broken := map[string]string{scripts.Reserve: "return {{{ not lua", scripts.Repair: "x("}
	for name, src := range broken {
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.ReloadScripts(bg(t, 10*time.Second))
	if ae, ok := errors.AsType[*admin.APIError](err); !ok || ae.Code != http.StatusUnprocessableEntity || ae.Status != "script_error" {
		t.Fatalf("reload of the broken folder: %v, want 422 script_error", err)
	}
	g.signal(t, syscall.SIGHUP)
	localstack.WaitFor(t, 10*time.Second, "the SIGHUP reload refused", func() bool {
		return strings.Contains(g.out.String(), "script reload on SIGHUP failed")
	})
	// What the gateway says of its set and the folder; the set stays the
	// one read before the break, whatever happens to Redis.
	checkSet := func(when string) {
		t.Helper()
		l, err := c.Scripts(bg(t, 10*time.Second))
		if err != nil {
			t.Fatalf("%s: scripts: %v", when, err)
		}
		if l.Folder != admin.FolderDiffers || l.ReadAt == nil || !l.ReadAt.Equal(*inUse.ReadAt) || len(l.Scripts) != len(inUse.Scripts) {
			t.Fatalf("%s: scripts %s, want the set read at %v and the folder differing", when, l.Raw, inUse.ReadAt)
		}
		for i, sc := range l.Scripts {
			if sc.Name != inUse.Scripts[i].Name || sc.SHA != inUse.Scripts[i].SHA {
				t.Errorf("%s: script %+v, was %+v", when, sc, inUse.Scripts[i])
			}
			want := ""
			if src, ok := broken[sc.Name]; ok {
				want = redis.NewScript(src).Hash()
			}
			if sc.FolderSHA != want || sc.FolderError != "" {
				t.Errorf("%s: %s: folder_sha %q, folder_error %q; want folder_sha %q", when, sc.Name, sc.FolderSHA, sc.FolderError, want)
			}
		}
	}
	checkSet("after the refused reloads")

	// SCRIPT FLUSH: the next call meets NOSCRIPT and loads the set again;
	// a flush is no restart, so nothing is held.
	before := noscript()
	if err := s.rdb.ScriptFlush(bg(t, 5*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	created(buy("u1", 10*time.Second))
	if noscript() == before {
		t.Errorf("no NOSCRIPT after SCRIPT FLUSH: the test did not exercise the path")
	}
	checkSet("after SCRIPT FLUSH")

	// A restart: the cache is empty again and the run id new, so the sale
	// is held until the consumer's repairer has checked it against MySQL
	// (with the set it keeps: its folder is as broken). Buys are accepted
	// once it is released.
	before = noscript()
	r.restart(t)
	created(buy("u2", 2*time.Minute))
	if noscript() == before {
		t.Errorf("no NOSCRIPT after the Redis restart: the test did not exercise the path")
	}
	checkSet("after the Redis restart")

	// The folder fixed, a reload takes it.
	for name := range broken {
		src, err := os.ReadFile(filepath.Join("..", "..", "scripts", "lua", name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := c.ReloadScripts(bg(t, 10*time.Second)); err != nil || l.Folder != admin.FolderSame {
		t.Fatalf("reload of the fixed folder: %+v %v", l, err)
	}
	buy("u3", 10*time.Second)
}
