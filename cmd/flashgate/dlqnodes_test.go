package main

import (
	"strings"
	"testing"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestDLQNodeList: flashgate dlq goes through the nodes listed in
// FLASHGATE_AMQP_URL: past a dead first node to a live one; when none
// answers, it exits 1 with an error that names each node, its password
// masked.
func TestDLQNodeList(t *testing.T) {
	cfg := localstack.Isolated(t)
	addrs, err := localstack.FreeAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	dead := func(i int) string { return "amqp://guest:dead-s3cret@" + addrs[i] + "/" }
	list := func(urls ...string) []string {
		return append(serviceEnv(cfg), "FLASHGATE_AMQP_URL="+strings.Join(urls, ","))
	}

	out, code := runFlashgate(t, list(dead(0), cfg.AMQP.URL), "dlq", "list", "--timeout", "30s")
	if code != 0 || !strings.Contains(out, "0 messages") {
		t.Fatalf("dlq list past a dead first node: exit %d, want 0 and 0 messages in\n%s", code, out)
	}

	out, code = runFlashgate(t, list(dead(0), dead(1)), "dlq", "list", "--timeout", "30s")
	if code != 1 {
		t.Fatalf("dlq list with every node dead: exit %d, want 1\n%s", code, out)
	}
	mustContain(t, "dlq list with every node dead", out, "amqp://guest:xxx@"+addrs[0]+"/", "amqp://guest:xxx@"+addrs[1]+"/")
	if strings.Contains(out, "s3cret") {
		t.Errorf("the output shows a password:\n%s", out)
	}
}
