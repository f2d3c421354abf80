package gateway

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Every admin change is an audit event with the action, the sale and who
// made it; reads and refused changes are not.
func TestAdminAuditLog(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	g := startGatewayLog(t, zap.New(core))
	g.mustSale("au", `{"stock":5}`)
	g.adminPost("au", "restock", `{"quantity":3}`)
	g.adminPost("au", "lock", "")
	g.adminPost("au", "unlock", "")
	g.view("au")
	g.adminPost("au", "restock", `{"quantity":0}`) // refused: no event
	g.buy("au", "u1", 1, "")                       // buyers are never logged at info

	var actions []string
	for _, e := range logs.FilterMessage("audit").All() {
		f := e.ContextMap()
		if f["sale_id"] != "au" || f["who"] == "" {
			t.Errorf("audit event without sale or who: %v", f)
		}
		actions = append(actions, f["action"].(string))
	}
	want := []string{"sale.upsert", "sale.restock", "sale.lock", "sale.unlock"}
	if len(actions) != len(want) {
		t.Fatalf("audit actions %v, want %v", actions, want)
	}
	for i := range want {
		if actions[i] != want[i] {
			t.Errorf("audit action %d = %s, want %s", i, actions[i], want[i])
		}
	}
	for _, e := range logs.All() {
		if e.Message != "audit" && e.Message != "listening" {
			t.Errorf("unexpected info log: %s %v", e.Message, e.ContextMap())
		}
	}
}
