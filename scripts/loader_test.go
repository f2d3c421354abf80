package scripts_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// copyBuiltin writes the built-in scripts (lua/, which the binary embeds)
// into a fresh folder.
func copyBuiltin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range scripts.Names() {
		src, err := os.ReadFile(filepath.Join("lua", name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".lua"), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func ping(ctx context.Context, l *scripts.Loader) (any, error) {
	return l.Run(ctx, scripts.Admin, []string{"{_}:m", "{_}:u", "{_}:o"}, "ping", "_", "_")
}

// A script Redis cannot compile is told apart by Redis's own answer (not by
// a word in it), and the set in use stays as it was.
func TestLoadCompileError(t *testing.T) {
	ctx := t.Context()
	rdb := localstack.Redis(t)
	dir := copyBuiltin(t)
	l := scripts.New(rdb, dir, scripts.Keys{Prefix: "t" + strconv.FormatInt(time.Now().UnixNano(), 36)})
	if _, err := ping(ctx, l); !errors.Is(err, scripts.ErrNotLoaded) {
		t.Fatalf("Run before Load: %v, want ErrNotLoaded", err)
	}
	first, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != len(scripts.Names()) {
		t.Fatalf("loaded %v", first)
	}
	for _, sc := range first {
		src, err := os.ReadFile(filepath.Join("lua", sc.Name+".lua"))
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
			path := filepath.Join(dir, scripts.Reserve+".lua")
			if tc.src == "" {
				os.Remove(path)
			} else if err := os.WriteFile(path, []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := l.Load(ctx)
			if err == nil || errors.Is(err, scripts.ErrCompile) != tc.compile {
				t.Fatalf("Load: %v; want an error, ErrCompile %v", err, tc.compile)
			}
			if tc.compile && !redis.HasErrorPrefix(err, scripts.CompileError) {
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

func shas(list []scripts.Script) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.Name+"="+s.SHA)
	}
	return out
}
