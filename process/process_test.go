package process

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// TestMain fails the package when a goroutine outlives its tests: Run must
// stop every part it started.
func TestMain(m *testing.M) { localstack.Main(m) }

// testConfig is the default settings on the Redis of `make up` (or the
// cluster of FLASHGATE_REDIS_ADDRS), under a key prefix of the test's own.
func testConfig(t *testing.T) *config.Config {
	cfg := config.Default()
	cfg.Redis.Addrs = append([]string(nil), localstack.RedisAddrs...)
	cfg.Redis.KeyPrefix = "t" + localstack.RandomHex(6)
	return cfg
}

// A script reload is an audit event naming who asked and the SHAs before
// and after.
func TestReloadAudit(t *testing.T) {
	rdb := localstack.Redis(t)
	core, logs := observer.New(zapcore.InfoLevel)
	g, err := NewGateway(testConfig(t), GatewayDeps{Log: zap.New(core), Redis: rdb, NoRelay: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, who := range []string{"start", "SIGHUP"} {
		if _, err := g.Reload(ctx, who); err != nil {
			t.Fatalf("reload: %v (is Redis up? make up)", err)
		}
	}
	events := logs.FilterMessage("audit").All()
	if len(events) != 2 {
		t.Fatalf("%d audit events, want 2", len(events))
	}
	second := events[1].ContextMap()
	if second["action"] != "scripts.reload" || second["who"] != "SIGHUP" {
		t.Errorf("audit event %v", second)
	}
	old, _ := second["old"].(map[string]string)
	nw, _ := second["new"].(map[string]string)
	if len(old) != len(scripts.Names()) || len(nw) != len(scripts.Names()) || old["reserve"] != nw["reserve"] || nw["reserve"] == "" || nw["order"] == "" {
		t.Errorf("old %v, new %v: want every script's SHA, unchanged", old, nw)
	}
	if first, _ := events[0].ContextMap()["old"].(map[string]string); len(first) != 0 {
		t.Errorf("the first load had an old set: %v", first)
	}
}

// testEdge is an Edge whose Run is run and whose Reload is the process's.
type testEdge struct {
	g   *Gateway
	run func(ctx context.Context) error
}

func (e testEdge) Run(ctx context.Context) error { return e.run(ctx) }

func (e testEdge) Reload(ctx context.Context, who string) ([]scripts.Script, error) {
	return e.g.Reload(ctx, who)
}

// Run loads the scripts at start, reloads them on each Hangup, returns the
// edge's error once the edge has returned, and leaves no part running
// (TestMain checks the goroutines).
func TestGatewayRunsAroundTheEdge(t *testing.T) {
	rdb := localstack.Redis(t)
	core, logs := observer.New(zapcore.InfoLevel)
	hup := make(chan os.Signal, 1)
	g, err := NewGateway(testConfig(t), GatewayDeps{Log: zap.New(core), Redis: rdb, NoRelay: true, Hangup: hup})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Relay != nil {
		t.Fatalf("NoRelay built a relay")
	}
	reloads := func(who string) int {
		return logs.FilterMessage("audit").FilterField(zap.String("who", who)).Len()
	}
	stop := errors.New("edge stopped")
	err = g.Run(context.Background(), testEdge{g: g, run: func(ctx context.Context) error {
		for deadline := time.Now().Add(10 * time.Second); g.Loader.Scripts() == nil; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("the scripts were not loaded at start (is Redis up? make up)")
			}
		}
		hup <- os.Interrupt
		for deadline := time.Now().Add(10 * time.Second); reloads("SIGHUP") == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("no reload after a hangup")
			}
		}
		return stop
	}})
	if !errors.Is(err, stop) {
		t.Fatalf("Run = %v, want the edge's error", err)
	}
	if reloads("start") != 1 || reloads("SIGHUP") != 1 {
		t.Errorf("reloads at start %d, on hangup %d; want 1 and 1", reloads("start"), reloads("SIGHUP"))
	}
}

// The relay is built and linked unless NoRelay; bad relay settings are the
// constructor's error, and nothing is left open.
func TestNewGatewayRefusesBadRelaySettings(t *testing.T) {
	cfg := testConfig(t)
	g, err := NewGateway(cfg, GatewayDeps{Redis: localstack.Redis(t)})
	if err != nil {
		t.Fatal(err)
	}
	if g.Relay == nil {
		t.Errorf("no relay without NoRelay")
	}
	cfg.Relay.Batch = 0
	if _, err := NewGateway(cfg, GatewayDeps{}); err == nil {
		t.Errorf("relay.batch 0 was accepted")
	}
}
