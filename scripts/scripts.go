// Package scripts is flashgate's contract with Redis: the Lua scripts, the
// key layout they work on, the outcome codes they answer and the order
// record they write, the Loader that loads, reloads and runs them, and the
// client they run on (NewClient).
//
// The scripts are built into the binary; Loader reads them from a folder
// instead when one is configured. A set of scripts is loaded with SCRIPT LOAD
// and swapped in whole, atomically: a call in flight keeps the script it
// started with, whose SHA stays in Redis's script cache. Each script is run
// with EVALSHA.
//
// A restarted Redis, or a replica promoted by a failover, may hold a sale
// without its last writes while their orders are in MySQL already. Each
// sale records the replication id of the Redis it was last checked under
// (meta rid, the name of that Redis's history of writes); the scripts that
// decide anything on a sale hold it, refused with REPAIRING, when the
// running Redis's id differs, until package repair has compared it with
// MySQL. That check is the scripts' own, so it does not depend on the
// script cache (a promoted replica may hold the scripts and answer no
// NOSCRIPT). The hold pass (HoldPass) holds every such sale and lists the
// held ones for the repair: Load runs it before SCRIPT LOAD, and Watch
// runs it in the background whenever a primary's replication id changes,
// a call met NOSCRIPT or a held sale (Stale). A call answered NOSCRIPT
// loads the set in use again (never EVAL of the source) and retries; it
// runs no pass itself, since a pass scales with the sales that exist and a
// buyer waits on the call. In replicated mode (SetReplicas) a call that
// may change something is followed by WAIT on its connection (wait.go).
//
// The Loader keeps the sources of the set in use. Only Load reads the
// folder (or the built-in copies): a NOSCRIPT loads the set in use again
// from memory, and every hold pass runs the hold script of the set in use,
// so that a folder broken meanwhile (a reload refused with ErrCompile, a
// file deleted) cannot turn the loss of Redis's script cache into an
// outage (DESIGN.md, invariant 12). Compare tells whether the folder still
// holds the set in use.
//
// Each script's reply is decoded in one place, by the typed call of its
// shape (Loader.Reserve, Admin, Ping, Order, Sweep, Move, Repair):
// a reply of another shape is an error wrapping ErrReply, never a value
// read. The relay's remove script (Loader.Remove) is outside the set: see
// Remove.
package scripts

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/retry"
)

// Names of the scripts every set must have.
const (
	Reserve = "reserve"
	Admin   = "admin"
	Order   = "order"
	Hold    = "hold"
	Repair  = "repair"
	Move    = "move"
	Queue   = "queue"
)

var names = []string{Admin, Hold, Move, Order, Queue, Repair, Reserve}

// Names returns the names of the scripts every set must have, sorted: a
// folder given as scripts.dir holds one NAME.lua of each.
func Names() []string { return slices.Clone(names) }

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
	// srcs are the sources of the set, by name: what a NOSCRIPT loads
	// again and whose hold script every hold pass runs.
	srcs map[string]string
	// readAt is when Load read srcs from the folder or the built-in copies.
	readAt time.Time
}

// Stats counts what the loader did; read it with Loader.Stats.
type Stats struct {
	Calls, Errors, NoScript, Reloads uint64
	// Held counts the sales the hold passes held (a sale held again by a
	// later pass, before its repair, counts again).
	Held uint64
}

// Loader loads and runs the script set. It is safe for concurrent use.
type Loader struct {
	rdb  redis.UniversalClient
	dir  string
	keys Keys

	cur    atomic.Pointer[set]
	loadMu sync.Mutex
	gen    atomic.Uint64 // successful loads; a NOSCRIPT reloads only if none came since its call began

	calls, errs, noscript, reloads, held atomic.Uint64

	// replicas > 0 is replicated mode (SetReplicas): the calls that change
	// something are followed by WAIT replicas on their connection.
	replicas       int
	readTimeout    time.Duration
	waits, unacked atomic.Uint64
	waitNanos      atomic.Int64

	// kick asks Watch for a hold pass (Stale); passed is the histories of
	// the primaries under which the last pass ran to its end.
	kick   chan struct{}
	passMu sync.Mutex
	passed []string
}

// New returns a loader reading from dir, or from the built-in copies when dir
// is empty, for the sales under keys. It loads nothing until Load is called.
func New(rdb redis.UniversalClient, dir string, keys Keys) *Loader {
	return &Loader{rdb: rdb, dir: dir, keys: keys, kick: make(chan struct{}, 1)}
}

// Load reads every script from the folder (or the built-in copies), runs
// the hold pass with the hold script it read, loads each script into Redis
// with SCRIPT LOAD and, only when all succeeded, makes them the set in use:
// their sources are kept, and a NOSCRIPT later loads those again, whatever
// the folder holds by then. It returns the new set. A script Redis cannot
// compile gives an error wrapping ErrCompile and leaves the set in use as
// it was; so does any other failure (a file that cannot be read, Redis).
// Should a primary's run id change between the pass and the end of the
// loading (a restart in between), the pass runs again. It blocks for a few
// round trips per script and one per holdChunk sales, bounded by ctx; calls
// to Load are serialized.
func (l *Loader) Load(ctx context.Context) ([]Script, error) {
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	readAt := time.Now()
	srcs := make(map[string]string, len(names))
	for _, name := range names {
		src, err := l.read(name)
		if err != nil {
			return nil, err
		}
		srcs[name] = src
	}
	if err := l.load(ctx, srcs, readAt); err != nil {
		return nil, err
	}
	return l.Scripts(), nil
}

// loadTries is how many times load runs the hold pass and the loading
// when a primary's run id changed meanwhile (a restart or a failover in
// between, after which the pass must run again on the new process).
const loadTries = 3

// errRestarted is what an attempt of load meets when a primary's run id
// changed during it.
var errRestarted = errors.New("a primary restarted during the load")

// load runs the hold pass with srcs' hold script, loads srcs and makes them
// the set in use, read at readAt. An attempt during which a primary
// restarted is made again, up to loadTries, after a short pause (retry's
// backoff: a restarting or failing-over Redis may not have settled); any
// other failure ends the load at once. The caller holds loadMu.
func (l *Loader) load(ctx context.Context, srcs map[string]string, readAt time.Time) error {
	err := retry.Until(ctx, retry.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond, Tries: loadTries},
		func(ctx context.Context) error {
			before, err := l.histories(ctx)
			if err != nil {
				return retry.Stop(err)
			}
			if _, err := l.holdPass(ctx, srcs[Hold]); err != nil {
				return retry.Stop(err)
			}
			s, err := l.loadSet(ctx, srcs)
			if err != nil {
				return retry.Stop(err)
			}
			after, err := l.histories(ctx)
			if err != nil {
				return retry.Stop(err)
			}
			if !slices.Equal(before, after) {
				return errRestarted
			}
			l.setPassed(after)
			s.srcs, s.readAt = srcs, readAt
			l.cur.Store(s)
			l.gen.Add(1)
			l.reloads.Add(1)
			return nil
		}, nil)
	if errors.Is(err, errRestarted) {
		if ctx.Err() == nil {
			return fmt.Errorf("scripts: load: Redis restarted during each of %d attempts", loadTries)
		}
		return fmt.Errorf("scripts: load: %w", err)
	}
	return err
}

// loadSet loads every script with SCRIPT LOAD (on every primary of a
// cluster) and returns them as a set.
func (l *Loader) loadSet(ctx context.Context, srcs map[string]string) (*set, error) {
	s := &set{byName: make(map[string]*Script, len(names))}
	for _, name := range names {
		rs := redis.NewScript(srcs[name])
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
	return s, nil
}

// holdChunk is how many sales one pipeline of the hold pass asks about.
const holdChunk = 256

// HoldPass runs the hold script of the set in use on every sale in the
// registry and adds the sales it held, or found held, to the Held set; it
// returns how many those are. Load runs it before SCRIPT LOAD; package
// repair runs it from time to time too, so that a sale held by a process
// that died before it could add the sale to the set is found. Before the
// first Load there is no set in use, and it reads the hold script as that
// Load would. It blocks for about one round trip per holdChunk sales,
// bounded by ctx, and returns the first error (one wrapping ErrCompile
// when Redis cannot compile the hold script).
func (l *Loader) HoldPass(ctx context.Context) (int, error) {
	if s := l.cur.Load(); s != nil {
		return l.holdPass(ctx, s.srcs[Hold])
	}
	src, err := l.read(Hold)
	if err != nil {
		return 0, err
	}
	return l.holdPass(ctx, src)
}

func (l *Loader) holdPass(ctx context.Context, src string) (int, error) {
	sales, err := l.rdb.SMembers(ctx, l.keys.Sales()).Result()
	if err != nil {
		return 0, fmt.Errorf("scripts: hold pass: read the sales: %w", err)
	}
	if len(sales) == 0 {
		return 0, nil
	}
	rs := redis.NewScript(src)
	n := 0
	for start := 0; start < len(sales); start += holdChunk {
		chunk := sales[start:min(start+holdChunk, len(sales))]
		cmds := make([]*redis.Cmd, len(chunk))
		// The hold script is loaded before each chunk: a SCRIPT FLUSH may
		// come at any time, and a chunk that meets one is asked again, at
		// once: the remedy is the load, not time, so there is no backoff
		// to wait (nor retry.Until, whose pauses are for a server coming
		// back), and the pass may run under loadMu, which every NOSCRIPT
		// of the process waits for.
		for try := 0; ; try++ {
			if err := rs.Load(ctx, l.rdb).Err(); err != nil {
				if redis.HasErrorPrefix(err, compileError) {
					return n, fmt.Errorf("scripts: %s: %w: %w", Hold, ErrCompile, err)
				}
				return n, fmt.Errorf("scripts: hold pass: load: %w", err)
			}
			pipe := l.rdb.Pipeline()
			for i, sale := range chunk {
				cmds[i] = rs.EvalSha(ctx, pipe, []string{l.keys.Meta(sale)})
			}
			_, _ = pipe.Exec(ctx) // each command's error is read below
			if try == noscriptTries || !slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { return redis.HasErrorPrefix(c.Err(), "NOSCRIPT") }) {
				break
			}
		}
		var held []any
		for i, c := range cmds {
			v, err := c.Result()
			if err != nil {
				return n, fmt.Errorf("scripts: hold pass: sale %s: %w", chunk[i], err)
			}
			h, err := decodeHold(v)
			if err != nil {
				return n, fmt.Errorf("scripts: hold pass: sale %s: %w", chunk[i], replyError(Hold, err))
			}
			if h {
				held = append(held, chunk[i])
			}
		}
		if len(held) > 0 {
			if err := l.rdb.SAdd(ctx, l.keys.Held(), held...).Err(); err != nil {
				return n, fmt.Errorf("scripts: hold pass: record held sales: %w", err)
			}
			n += len(held)
			l.held.Add(uint64(len(held)))
		}
	}
	return n, nil
}

// histories returns the replication id (master_replid) of every primary,
// sorted: the name of each one's history of writes, which a restart or a
// promotion changes (the hold script).
func (l *Loader) histories(ctx context.Context) ([]string, error) {
	var mu sync.Mutex
	var ids []string
	err := ForEachPrimary(ctx, l.rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
		info, err := node.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		_, rest, ok := strings.Cut(info, "master_replid:")
		id, _, _ := strings.Cut(rest, "\r\n")
		if !ok || id == "" {
			return fmt.Errorf("INFO replication of %s has no master_replid", addr)
		}
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scripts: read the primaries' replication ids: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
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
	return Stats{Calls: l.calls.Load(), Errors: l.errs.Load(), NoScript: l.noscript.Load(), Reloads: l.reloads.Load(),
		Held: l.held.Load()}
}

// ErrNotLoaded is returned by Run before the first successful Load.
var ErrNotLoaded = errors.New("scripts: not loaded")

// Run calls the named script with EVALSHA and returns its reply, as
// go-redis read it; the typed calls (Reserve, Admin, Ping, Order, Sweep,
// Move, Repair) run a script through Run and decode its reply, and
// are what callers use. On
// NOSCRIPT (counted in Stats.NoScript) it loads the set in use again, from
// the sources the Loader keeps and hold pass first, unless another call has
// done so since this one began, and calls once more, up to noscriptTries
// times. It blocks for one round trip, or for a few loads and calls,
// bounded by ctx. It returns ErrNotLoaded before the first Load, redis.Nil
// for a nil reply, or the error of Redis or the connection.
func (l *Loader) Run(ctx context.Context, name string, keys []string, args ...any) (any, error) {
	l.calls.Add(1)
	gen := l.gen.Load()
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
	v, err := l.eval(ctx, sc, keys, args)
	// Another flush may come between the load and the call (each is a
	// NOSCRIPT again): a few rounds, each bounded by ctx. A round follows
	// the last at once, not after a pause (so not retry.Until): the remedy
	// of a NOSCRIPT is the load, not time, and a buyer waits on the call.
	for try := 0; try < noscriptTries && redis.HasErrorPrefix(err, "NOSCRIPT"); try++ {
		l.noscript.Add(1)
		if err = l.reloadSince(ctx, gen); err != nil {
			break
		}
		gen = l.gen.Load()
		if sc = l.cur.Load().byName[name]; sc == nil {
			err = fmt.Errorf("scripts: no script %q", name)
			break
		}
		v, err = l.eval(ctx, sc, keys, args)
	}
	if err != nil && !errors.Is(err, redis.Nil) && !errors.Is(err, ErrUnconfirmed) {
		l.errs.Add(1)
	}
	return v, err
}

// eval calls sc once: with EVALSHA, and in replicated mode, when the call
// may change something, with WAIT on the same connection (evalWait).
func (l *Loader) eval(ctx context.Context, sc *Script, keys []string, args []any) (any, error) {
	if l.replicas > 0 && changes(sc.Name, args) {
		return l.evalWait(ctx, sc, keys, args)
	}
	return sc.rs.EvalSha(ctx, l.rdb, keys, args...).Result()
}

// noscriptTries is how many times Run loads the set again for one call.
// Each round is a load and a call, both bounded by the caller's ctx, so
// under a script cache emptied again and again (SCRIPT FLUSH in a loop, a
// node restarting) it is the caller's deadline that ends the rounds: a
// buyer waits longer rather than getting a 503 it need not. The count only
// bounds a ctx without a deadline. (8 rounds gave 503s on a cluster flushed
// every 2 ms under the race detector: a flush fell between the load and
// the call eight times running.)
const noscriptTries = 64

// reloadSince loads the set in use again, from the sources it keeps (never
// from the folder), unless a load succeeded after generation gen: the many
// calls that meet one NOSCRIPT together load once. It runs no hold pass: a
// NOSCRIPT is met on a buyer's clock, and a pass scales with the sales that
// exist (DESIGN.md, invariant 14). None is needed first: each script holds
// the sale it touches when the sale's history is not this Redis's (the hold
// script), so a restarted Redis sells nothing it should not. It asks Watch
// for a pass, which lists the held sales for package repair.
func (l *Loader) reloadSince(ctx context.Context, gen uint64) error {
	l.Stale()
	l.loadMu.Lock()
	defer l.loadMu.Unlock()
	if l.gen.Load() != gen {
		return nil
	}
	s := l.cur.Load()
	loaded, err := l.loadSet(ctx, s.srcs)
	if err != nil {
		return err
	}
	loaded.srcs, loaded.readAt = s.srcs, s.readAt
	l.cur.Store(loaded)
	l.gen.Add(1)
	l.reloads.Add(1)
	return nil
}
