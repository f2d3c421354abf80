package scripts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testRedis is a client of the Redis of `make up` (FLASHGATE_REDIS_ADDRS
// overrides it); it fails the test when Redis does not answer.
func testRedis(t *testing.T) *redis.Client {
	t.Helper()
	addr := "127.0.0.1:6379"
	if a := os.Getenv("FLASHGATE_REDIS_ADDRS"); a != "" {
		addr = strings.Split(a, ",")[0]
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (run `make up`): %v", addr, err)
	}
	return rdb
}

// copyBuiltin writes the embedded scripts into a fresh folder.
func copyBuiltin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		src, err := builtin.ReadFile("lua/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func ping(ctx context.Context, l *Loader) (any, error) {
	return l.Run(ctx, Admin, []string{"{_}:m", "{_}:u", "{_}:o"}, "ping", "_", "_")
}

// A script Redis cannot compile is told apart by Redis's own answer (not by
// a word in it), and the set in use stays as it was.
func TestLoadCompileError(t *testing.T) {
	ctx := t.Context()
	rdb := testRedis(t)
	dir := copyBuiltin(t)
	l := New(rdb, dir, Keys{Prefix: "t" + strconv.FormatInt(time.Now().UnixNano(), 36)})
	if _, err := ping(ctx, l); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("Run before Load: %v, want ErrNotLoaded", err)
	}
	first, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(names) {
		t.Fatalf("loaded %v", first)
	}
	for _, sc := range first {
		src, err := builtin.ReadFile("lua/" + sc.Name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		if want := redis.NewScript(string(src)).Hash(); sc.SHA != want {
			t.Errorf("%s: SHA %s, want the SHA-1 of its source %s", sc.Name, sc.SHA, want)
		}
	}

	tests := []struct {
		name, src string
		compile   bool
	}{
		{"syntax error", "x(", true},
		{"unclosed table", "return {{{ not lua", true},
		{"missing file", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, Reserve+".lua")
			if tc.src == "" {
				os.Remove(path)
			} else if err := os.WriteFile(path, []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := l.Load(ctx)
			if err == nil || errors.Is(err, ErrCompile) != tc.compile {
				t.Fatalf("Load: %v; want an error, ErrCompile %v", err, tc.compile)
			}
			if tc.compile && !redis.HasErrorPrefix(err, compileError) {
				t.Errorf("Load: %v does not carry Redis's error", err)
			}
			if got := l.Scripts(); !reflect.DeepEqual(shas(got), shas(first)) {
				t.Errorf("a failed Load changed the set: %v, was %v", got, first)
			}
			if v, err := ping(ctx, l); err != nil || v != "pong" {
				t.Errorf("ping after a failed Load: %v, %v", v, err)
			}
		})
	}
	if s := l.Stats(); s.Reloads != 1 || s.Errors != 1 {
		t.Errorf("stats %+v, want 1 reload and 1 error (the call before Load)", s)
	}
}

func shas(list []Script) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.Name+"="+s.SHA)
	}
	return out
}
