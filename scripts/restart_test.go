package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// runIDHook makes Redis look restarted to the Loader: the INFO replication
// reply numbered n (the first is 1) carries the replication id prefixed with
// id(n), the real one when that is "". It also counts the hold passes (SMEMBERS of
// the registry).
type runIDHook struct {
	id          func(n int64) string
	infos, sets atomic.Int64
}

func (h *runIDHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *runIDHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		switch {
		case cmd.Name() == "smembers":
			h.sets.Add(1)
		case cmd.Name() == "info" && len(cmd.Args()) > 1 && cmd.Args()[1] == "replication":
			n := h.infos.Add(1)
			if sc, ok := cmd.(*redis.StringCmd); ok && err == nil && h.id(n) != "" {
				sc.SetVal(strings.Replace(sc.Val(), "master_replid:", "master_replid:"+h.id(n), 1))
			}
		}
		return err
	}
}

func (h *runIDHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A primary that restarts between the hold pass and the end of the loading
// makes the load run again, pass first; one that restarts during each of
// three attempts fails the load, and leaves no set in use.
func TestLoadRunsAgainAfterARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	srv, err := localstack.StartRedisServer(ctx, localstack.RedisOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	never := func(int64) string { return "" }
	// restartsAt is a server restarted after each INFO numbered at-1.
	restartsAt := func(at ...int64) func(int64) string {
		return func(n int64) string {
			runs := 0
			for _, a := range at {
				if n >= a {
					runs++
				}
			}
			if runs == 0 {
				return ""
			}
			return strconv.Itoa(runs)
		}
	}
	each := func(n int64) string { return strconv.FormatInt(n, 16) } // a new run at every INFO
	tests := []struct {
		name       string
		id         func(n int64) string
		ok         bool
		infos      int64 // two per attempt
		holdPasses int64
	}{
		{name: "no restart: one attempt", id: never, ok: true, infos: 2, holdPasses: 1},
		{name: "a restart before the load: one attempt", id: restartsAt(1), ok: true, infos: 2, holdPasses: 1},
		{name: "a restart during the first attempt: a second", id: restartsAt(2), ok: true, infos: 4, holdPasses: 2},
		{name: "a restart during the second attempt: a third", id: restartsAt(2, 4), ok: true, infos: 6, holdPasses: 3},
		{name: "a restart during each attempt: three, then an error", id: each, ok: false, infos: 6, holdPasses: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { rdb.Close() })
			h := &runIDHook{id: tc.id}
			rdb.AddHook(h)
			l := scripts.New(rdb, "", scripts.Keys{Prefix: "r" + localstack.RandomHex(4)})
			set, err := l.Load(ctx)
			if tc.ok != (err == nil) {
				t.Fatalf("Load: %v, want success %v", err, tc.ok)
			}
			if !tc.ok && (!strings.Contains(err.Error(), "restarted during each of 3 attempts") || l.Scripts() != nil || set != nil) {
				t.Errorf("Load: %v, set %v in use; want the restarts named and no set", err, l.Scripts())
			}
			if n := h.infos.Load(); n != tc.infos {
				t.Errorf("%d INFO server calls, want %d", n, tc.infos)
			}
			if n := h.sets.Load(); n != tc.holdPasses {
				t.Errorf("%d hold passes, want %d", n, tc.holdPasses)
			}
		})
	}
}
