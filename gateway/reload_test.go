package gateway

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashgate/flashgate/internal/localstack"
	"github.com/flashgate/flashgate/scripts"
)

// A script reload is an audit event naming who asked and the SHAs before
// and after.
func TestReloadAudit(t *testing.T) {
	rdb := localstack.Redis(t)
	core, logs := observer.New(zapcore.InfoLevel)
	loader := scripts.New(rdb, "", scripts.Keys{Prefix: "t" + localstack.RandomHex(5)})
	reload := AuditedReload(zap.New(core), loader)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, who := range []string{"start", "SIGHUP"} {
		if _, err := reload(ctx, who); err != nil {
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
