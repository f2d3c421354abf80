// Package scripts holds flashgate's Lua scripts and the loader that loads,
// reloads and runs them with EVALSHA, and the Redis key layout the scripts
// work on.
//
// The scripts are built into the binary; Loader reads them from a folder
// instead when one is configured. A set of scripts is loaded with SCRIPT LOAD
// and swapped in whole, atomically: a call in flight keeps the SHA it
// started with, which stays in Redis's script cache. When Redis has lost its
// cache (restart, failover, SCRIPT FLUSH), EVALSHA answers NOSCRIPT and Run
// sends the source once with EVAL, which runs it and caches it again.
package scripts

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Names of the scripts every set must have.
const (
	Reserve = "reserve"
	Admin   = "admin"
	Mark    = "mark"
)

var names = []string{Admin, Mark, Reserve}

//go:embed lua/*.lua
var builtin embed.FS

// ErrCompile is returned by Load when Redis refuses a script (a syntax error).
var ErrCompile = errors.New("script does not compile")

// Script is one loaded script.
type Script struct {
	Name string `json:"name"`
	SHA  string `json:"sha"`
	src  string
}

type set struct {
	byName map[string]*Script
	list   []Script
}

// Stats counts what the loader did; read it with Loader.Stats.
type Stats struct {
	Calls, Errors, NoScript, Reloads uint64
}

// Loader loads and runs the script set. It is safe for concurrent use.
type Loader struct {
	rdb redis.UniversalClient
	dir string

	cur    atomic.Pointer[set]
	loadMu sync.Mutex

	calls, errs, noscript, reloads atomic.Uint64
}

// New returns a loader reading from dir, or from the built-in copies when dir
// is empty. It loads nothing until Load is called.
func New(rdb redis.UniversalClient, dir string) *Loader {
	return &Loader{rdb: rdb, dir: dir}
}

// Load reads every script, loads each into Redis with SCRIPT LOAD and, only
// when all succeeded, makes them the set in use. It returns the new set. A
// script Redis cannot compile gives an error wrapping ErrCompile and leaves
// the set in use as it was; so does any other failure.
func (l *Loader) Load(ctx context.Context) ([]Script, error) {
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	s := &set{byName: make(map[string]*Script, len(names))}
	for _, name := range names {
		src, err := l.read(name)
		if err != nil {
			return nil, err
		}
		sha, err := l.rdb.ScriptLoad(ctx, src).Result()
		if err != nil {
			if strings.Contains(err.Error(), "compil") {
				return nil, fmt.Errorf("scripts: %s: %w: %v", name, ErrCompile, err)
			}
			return nil, fmt.Errorf("scripts: load %s: %w", name, err)
		}
		if want := digest(src); sha != want {
			return nil, fmt.Errorf("scripts: load %s: Redis answered SHA %s, want %s", name, sha, want)
		}
		s.list = append(s.list, Script{Name: name, SHA: sha, src: src})
	}
	for i := range s.list {
		s.byName[s.list[i].Name] = &s.list[i]
	}
	l.cur.Store(s)
	l.reloads.Add(1)
	return l.Scripts(), nil
}

func (l *Loader) read(name string) (string, error) {
	var b []byte
	var err error
	if l.dir != "" {
		b, err = os.ReadFile(filepath.Join(l.dir, name+".lua"))
	} else {
		b, err = builtin.ReadFile("lua/" + name + ".lua")
	}
	if err != nil {
		return "", fmt.Errorf("scripts: read %s: %w", name, err)
	}
	return string(b), nil
}

func digest(src string) string {
	h := sha1.Sum([]byte(src))
	return hex.EncodeToString(h[:])
}

// Scripts returns the set in use, sorted by name; nil before the first Load.
func (l *Loader) Scripts() []Script {
	s := l.cur.Load()
	if s == nil {
		return nil
	}
	return append([]Script(nil), s.list...)
}

// Stats returns the counters since start.
func (l *Loader) Stats() Stats {
	return Stats{Calls: l.calls.Load(), Errors: l.errs.Load(), NoScript: l.noscript.Load(), Reloads: l.reloads.Load()}
}

// ErrNotLoaded is returned by Run before the first successful Load.
var ErrNotLoaded = errors.New("scripts: not loaded")

// Run calls the named script with EVALSHA and returns its reply. On NOSCRIPT
// it sends the source with EVAL, which runs the script and caches it again.
// It blocks for one or two round trips, bounded by ctx.
func (l *Loader) Run(ctx context.Context, name string, keys []string, args ...any) (any, error) {
	l.calls.Add(1)
	s := l.cur.Load()
	if s == nil {
		l.errs.Add(1)
		return nil, ErrNotLoaded
	}
	sc := s.byName[name]
	if sc == nil {
		l.errs.Add(1)
		return nil, fmt.Errorf("scripts: no script %q", name)
	}
	v, err := l.rdb.EvalSha(ctx, sc.SHA, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		l.noscript.Add(1)
		v, err = l.rdb.Eval(ctx, sc.src, keys, args...).Result()
	}
	if err != nil && err != redis.Nil {
		l.errs.Add(1)
	}
	return v, err
}
