package scripts_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// breakFolder is one way an operator can leave the folder after the set
// in use was loaded from it, and what a reload then answers.
type breakFolder struct {
	name    string
	file    string // the script whose file is broken
	src     string // its new text; "" deletes the file
	compile bool   // the reload fails with ErrCompile (else another error)
	folder  string // what Compare then says of the folder
}

var brokenFolders = []breakFolder{
	{name: "syntax error in reserve", file: scripts.Reserve, src: "return {{{ not lua", compile: true, folder: scripts.FolderDiffers},
	// The hold pass runs before any SCRIPT LOAD: a hold script that does
	// not compile is ErrCompile too (422, not 503), and the NOSCRIPT path
	// must not run it.
	{name: "syntax error in hold", file: scripts.Hold, src: "x(", compile: true, folder: scripts.FolderDiffers},
	{name: "hold deleted", file: scripts.Hold, folder: scripts.FolderUnreadable},
	{name: "reserve deleted", file: scripts.Reserve, folder: scripts.FolderUnreadable},
}

// brk applies b to dir and checks that a reload is refused and keeps the
// set in use (first).
func (b breakFolder) brk(ctx context.Context, t *testing.T, l *scripts.Loader, dir string, first []scripts.Script) {
	t.Helper()
	path := filepath.Join(dir, b.file+".lua")
	if b.src == "" {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	} else if err := os.WriteFile(path, []byte(b.src), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(ctx); err == nil || errors.Is(err, scripts.ErrCompile) != b.compile {
		t.Fatalf("reload of the broken folder: %v; want an error, ErrCompile %v", err, b.compile)
	}
	if got := l.Scripts(); !reflect.DeepEqual(shas(got), shas(first)) {
		t.Fatalf("a failed reload changed the set: %v, was %v", shas(got), shas(first))
	}
}

// checkInUse checks that the set in use is still first, loaded in Redis,
// that the hold pass works (with the hold script of the set in use), and
// that Compare tells the folder apart from it.
func (b breakFolder) checkInUse(ctx context.Context, t *testing.T, l *scripts.Loader, rdb redis.Cmdable, first []scripts.Script) {
	t.Helper()
	if got := l.Scripts(); !reflect.DeepEqual(shas(got), shas(first)) {
		t.Errorf("set in use after the NOSCRIPT: %v, want the old one %v", shas(got), shas(first))
	}
	list := make([]string, len(first))
	for i, sc := range first {
		list[i] = sc.SHA
	}
	if have, err := rdb.ScriptExists(ctx, list...).Result(); err != nil || !reflect.DeepEqual(have, allTrue(len(first))) {
		t.Errorf("SCRIPT EXISTS of the old set: %v %v, want every one loaded again", have, err)
	}
	if _, err := l.HoldPass(ctx); err != nil {
		t.Errorf("hold pass with the folder broken: %v", err)
	}
	c := l.Compare()
	if c.Folder != b.folder {
		t.Errorf("Compare says the folder is %q, want %q", c.Folder, b.folder)
	}
	for _, sc := range c.Scripts {
		broken := sc.Name == b.file
		switch {
		case broken && b.src != "" && sc.FolderSHA != redis.NewScript(b.src).Hash():
			t.Errorf("%s: folder SHA %q, want the SHA-1 of the broken file", sc.Name, sc.FolderSHA)
		case broken && b.src == "" && !errors.Is(sc.FolderErr, os.ErrNotExist):
			t.Errorf("%s: folder error %v, want the file's absence", sc.Name, sc.FolderErr)
		case !broken && (sc.FolderSHA != "" || sc.FolderErr != nil):
			t.Errorf("%s: folder SHA %q, error %v; want its file the same", sc.Name, sc.FolderSHA, sc.FolderErr)
		}
	}
}

func allTrue(n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = true
	}
	return out
}

// seedSale registers a sale created under another history of Redis than
// this one's (meta rid), as a restart leaves it: the next hold pass holds it.
func seedSale(ctx context.Context, t *testing.T, rdb redis.Cmdable, keys scripts.Keys, sale string) {
	t.Helper()
	if err := rdb.HSet(ctx, keys.Meta(sale), "stock", 1, "sold", 0, "rid", "0000").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(ctx, keys.Sales(), sale).Err(); err != nil {
		t.Fatal(err)
	}
}

// Invariant 12 at SCRIPT FLUSH: after a reload refused because of the
// folder, the loss of the script cache loads the set in use again, from
// memory, and calls go on; the folder is not read. The call runs no hold
// pass on its clock (invariant 14): it asks Watch for one, and that pass
// runs the hold script of the set in use.
func TestNoScriptLoadsTheSetInUse(t *testing.T) {
	rdb := localstack.Redis(t)
	for _, b := range brokenFolders {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			dir := copyBuiltin(t)
			keys := scripts.Keys{Prefix: "t" + strconv.FormatInt(time.Now().UnixNano(), 36)}
			t.Cleanup(func() { localstack.DropKeys(t, rdb, keys.Prefix) })
			l := scripts.New(rdb, dir, keys)
			first, err := l.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if c := l.Compare(); c.Folder != scripts.FolderSame || c.ReadAt.IsZero() {
				t.Fatalf("Compare after the load: folder %q, read at %v; want same, a time", c.Folder, c.ReadAt)
			}
			b.brk(ctx, t, l, dir, first)

			seedSale(ctx, t, rdb, keys, "s1")
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			before := l.Stats()
			if v, err := ping(ctx, l); err != nil || v != "pong" {
				t.Fatalf("a call after SCRIPT FLUSH: %v, %v", v, err)
			}
			after := l.Stats()
			if after.NoScript == before.NoScript {
				t.Errorf("no NOSCRIPT was met: the test did not exercise the path")
			}
			if after.Held != before.Held {
				t.Errorf("the NOSCRIPT's load held %d sales: a hold pass ran on the caller's clock", after.Held-before.Held)
			}
			if !l.Asked() {
				t.Errorf("the NOSCRIPT did not ask for a hold pass")
			}
			if n, err := l.HoldPass(ctx); err != nil || n != 1 {
				t.Errorf("the hold pass asked for: held %d, %v; want 1, nil", n, err)
			}
			if hold, _ := rdb.HGet(ctx, keys.Meta("s1"), "hold").Result(); hold != "1" {
				t.Errorf("the seeded sale's hold is %q after the hold pass, want 1", hold)
			}
			b.checkInUse(ctx, t, l, rdb, first)
		})
	}
}

// Invariant 12 at a Redis restart, on a redis-server of the test's own:
// the restart empties the script cache and changes the replication id; the
// first call loads the set in use again (not the broken folder) and asks
// for the hold pass, which holds the sale the restart may have set back.
func TestRestartLoadsTheSetInUse(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("no redis-server on PATH (make up installs it): %v", err)
	}
	ctx := t.Context()
	srv, err := localstack.StartRedisServer(ctx, localstack.RedisOptions{Dir: t.TempDir(),
		Args: []string{"--appendonly", "yes", "--appendfsync", "always", "--save", ""}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	for i, b := range brokenFolders {
		t.Run(b.name, func(t *testing.T) {
			dir := copyBuiltin(t)
			keys := scripts.Keys{Prefix: "r" + strconv.Itoa(i)}
			l := scripts.New(rdb, dir, keys)
			first, err := l.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// A sale created under this history: only the restart makes
			// the hold pass hold it.
			run, err := rdb.Info(ctx, "replication").Result()
			if err != nil {
				t.Fatal(err)
			}
			_, run, _ = strings.Cut(run, "master_replid:")
			run, _, _ = strings.Cut(run, "\r\n")
			seedSale(ctx, t, rdb, keys, "s1")
			if err := rdb.HSet(ctx, keys.Meta("s1"), "rid", run).Err(); err != nil {
				t.Fatal(err)
			}
			b.brk(ctx, t, l, dir, first)

			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if v, err := ping(ctx, l); err != nil || v != "pong" {
				t.Fatalf("a call after the restart: %v, %v", v, err)
			}
			if !l.Asked() {
				t.Errorf("the restart's NOSCRIPT did not ask for a hold pass")
			}
			if n, err := l.HoldPass(ctx); err != nil || n != 1 {
				t.Errorf("the hold pass asked for: held %d, %v; want 1, nil", n, err)
			}
			if hold, _ := rdb.HGet(ctx, keys.Meta("s1"), "hold").Result(); hold != "1" {
				t.Errorf("the sale's hold is %q after the restart's hold pass, want 1", hold)
			}
			b.checkInUse(ctx, t, l, rdb, first)
		})
	}
}
