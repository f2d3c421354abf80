// Package scripts is flashgate's contract with Redis: the Lua scripts, the
// key layout they work on, the outcome codes they answer and the order
// record they write, and the Loader that loads, reloads and runs them.
//
// The scripts are built into the binary; Loader reads them from a folder
// instead when one is configured. A set of scripts is loaded with SCRIPT LOAD
// and swapped in whole, atomically: a call in flight keeps the script it
// started with, whose SHA stays in Redis's script cache. Each script is run
// through go-redis's redis.Script: EVALSHA, and when Redis has lost its cache
// (restart, failover, SCRIPT FLUSH) and answers NOSCRIPT, EVAL of the source,
// which runs it and caches it again.
package scripts

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Names of the scripts every set must have.
const (
	Reserve = "reserve"
	Admin   = "admin"
	Mark    = "mark"
	Order   = "order"
)

var names = []string{Admin, Mark, Order, Reserve}

//go:embed lua/*.lua
var builtin embed.FS

// ErrCompile is returned by Load when Redis refuses a script (a syntax error).
var ErrCompile = errors.New("script does not compile")

// compileError is how Redis (6.x and 7.x) begins its answer to a script it
// cannot compile: "ERR Error compiling script (new function): user_script:1:
// ...". redis.HasErrorPrefix drops the "ERR ".
const compileError = "Error compiling script"

// Script is one loaded script.
type Script struct {
	Name string `json:"name"`
	SHA  string `json:"sha"`
	rs   *redis.Script
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
// the set in use as it was; so does any other failure. It blocks for one
// round trip per script, bounded by ctx; calls to Load are serialized.
func (l *Loader) Load(ctx context.Context) ([]Script, error) {
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	s := &set{byName: make(map[string]*Script, len(names))}
	for _, name := range names {
		src, err := l.read(name)
		if err != nil {
			return nil, err
		}
		rs := redis.NewScript(src)
		want := rs.Hash() // SHA-1 of src, before Load replaces it by Redis's answer
		sha, err := rs.Load(ctx, l.rdb).Result()
		if err != nil {
			if redis.HasErrorPrefix(err, compileError) {
				return nil, fmt.Errorf("scripts: %s: %w: %w", name, ErrCompile, err)
			}
			return nil, fmt.Errorf("scripts: load %s: %w", name, err)
		}
		if sha != want {
			return nil, fmt.Errorf("scripts: load %s: Redis answered SHA %s, want %s", name, sha, want)
		}
		s.list = append(s.list, Script{Name: name, SHA: sha, rs: rs})
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

// Run calls the named script and returns its reply, as redis.Script.Run
// does: EVALSHA, and on NOSCRIPT the source with EVAL, which runs the script
// and caches it again (counted in Stats.NoScript). It blocks for one or two
// round trips, bounded by ctx. It returns ErrNotLoaded before the first
// Load, redis.Nil for a nil reply, or the error of Redis or the connection.
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
	// Script.Run would do the same two steps, but hide the NOSCRIPT that
	// Stats counts.
	v, err := sc.rs.EvalSha(ctx, l.rdb, keys, args...).Result()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		l.noscript.Add(1)
		v, err = sc.rs.Eval(ctx, l.rdb, keys, args...).Result()
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		l.errs.Add(1)
	}
	return v, err
}
