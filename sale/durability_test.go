package sale

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// What each answer of CONFIG GET append* means.
func TestNodeDurable(t *testing.T) {
	for _, tt := range []struct {
		name    string
		val     map[string]string
		err     error
		ok      bool
		refused bool
		reason  string
	}{
		{name: "always", val: map[string]string{"appendonly": "yes", "appendfsync": "always", "appendfilename": "appendonly.aof"}, ok: true},
		{name: "everysec", val: map[string]string{"appendonly": "yes", "appendfsync": "everysec"}, reason: "appendfsync everysec"},
		{name: "no fsync", val: map[string]string{"appendonly": "yes", "appendfsync": "no"}, reason: "appendfsync no"},
		{name: "AOF off", val: map[string]string{"appendonly": "no", "appendfsync": "always"}, reason: "appendonly no"},
		{name: "filtered answer", val: map[string]string{}, refused: true, reason: "does not show"},
		{name: "ACL", err: replyError("NOPERM User default has no permissions to run the 'config|get' command"), refused: true, reason: "refuses"},
		{name: "renamed", err: replyError("ERR unknown command 'CONFIG', with args beginning with: 'GET' 'append*'"), refused: true, reason: "refuses"},
		{name: "loading", err: replyError("LOADING Redis is loading the dataset in memory"), reason: "cannot be asked"},
		{name: "timeout", err: context.DeadlineExceeded, reason: "cannot be asked"},
		{name: "down", err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), reason: "cannot be asked"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := redis.NewMapStringStringCmd(context.Background(), "config", "get", "append*")
			cmd.SetVal(tt.val)
			cmd.SetErr(tt.err)
			v := nodeDurable("127.0.0.1:6379", cmd)
			if v.ok != tt.ok || v.refused != tt.refused || !strings.Contains(v.reason, tt.reason) {
				t.Errorf("got ok %v refused %v reason %q, want ok %v refused %v reason with %q", v.ok, v.refused, v.reason, tt.ok, tt.refused, tt.reason)
			}
			if !v.ok && v.detail == "" {
				t.Error("no detail for the log")
			}
		})
	}
}

// The check asks every primary: each master of the Redis Cluster of `make
// test-cluster`, or the one Redis of `make up`. Read only (CONFIG GET), so
// it runs on the shared servers; its verdict must be what each primary's
// own answer says.
func TestZeroLossAsksEveryPrimary(t *testing.T) {
	rdb := localstack.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		primary []string
		notYet  []string // primaries that do not fsync every write
	)
	err := scripts.ForEachPrimary(ctx, rdb, func(ctx context.Context, node redis.Cmdable, addr string) error {
		m, err := node.ConfigGet(ctx, "append*").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		primary = append(primary, addr)
		if m["appendonly"] != "yes" || m["appendfsync"] != "always" {
			notYet = append(notYet, addr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if localstack.Cluster() && len(primary) < 2 {
		t.Fatalf("a cluster of %d primaries", len(primary))
	}
	st := newDurability(rdb, zap.NewNop(), 5*time.Second, metrics.NewSet()).check(ctx)
	if st.ok != (len(notYet) == 0) {
		t.Fatalf("verdict ok=%v (%s: %s); primaries %v, not fsyncing every write %v", st.ok, st.reason, st.detail, primary, notYet)
	}
	for _, addr := range notYet {
		if !strings.Contains(st.detail, addr+": ") {
			t.Errorf("detail %q does not name %s", st.detail, addr)
		}
	}
	t.Logf("%d primaries, %d not fsyncing every write: %s", len(primary), len(notYet), st.detail)
}

// replyError is an error reply of Redis, as go-redis reads one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")
