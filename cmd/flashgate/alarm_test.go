package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/internal/localstack"
)

// TestRabbitMQMemoryAlarm guards invariants 3 and 6 against a broker that
// blocks its publishers (a memory alarm: RabbitMQ stops reading from every
// publishing connection, which stays open): buys go on being accepted into
// the outbox while the relay cannot publish; SIGTERM stops the gateway
// within its shutdown deadline, exit code 0, though its relay's connection
// is stuck; and once the alarm clears, a new gateway's relay takes over
// what the first left pending, and every accepted order reaches MySQL
// once.
func TestRabbitMQMemoryAlarm(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	s.startConsumers(1)
	s.createSale(g, "alarm", 1000000, 1)
	b := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + g.public}, Sales: []string{"alarm"}, Workers: 16, Users: -1, Pause: 2 * time.Millisecond})
	b.WaitAccepted(500, time.Minute)

	memoryAlarm(t, true)
	// Blocked: what is accepted stays in the outbox.
	ctx := context.Background()
	at := b.N202()
	localstack.WaitFor(t, 2*time.Minute, "1,000 buys accepted and kept in the outbox while RabbitMQ blocks publishers", func() bool {
		q, _ := s.rdb.HGet(ctx, s.keys.Meta("alarm"), "outq").Int64() // orders in the outbox
		return b.N202() >= at+1000 && q >= 1000
	})
	t.Logf("%d buys accepted during the alarm, outbox %d entries of %s orders", b.N202()-at,
		s.rdb.XLen(ctx, s.keys.Outbox("alarm")).Val(), s.rdb.HGet(ctx, s.keys.Meta("alarm"), "outq").Val())

	sent := time.Now()
	g.signal(t, syscall.SIGTERM)
	// The bound only keeps the test from hanging: the gateway's own
	// deadline is its shutdown timeout.
	if code := g.waitExit(t, s.cfg.Shutdown.Timeout+time.Minute); code != 0 {
		t.Fatalf("gateway exit code %d after SIGTERM with RabbitMQ blocking\n%s", code, g.out)
	}
	t.Logf("gateway exited %v after SIGTERM (shutdown timeout %v)", time.Since(sent).Round(100*time.Millisecond), s.cfg.Shutdown.Timeout)
	for _, line := range strings.Split(g.out.String(), "\n") {
		if strings.Contains(line, "drain") || strings.Contains(line, "stopped") || strings.Contains(line, "shutdown") {
			t.Log(line)
		}
	}
	b.Stop()
	accepted := b.Check()["alarm"]

	memoryAlarm(t, false)
	s.startGateway(g)
	s.waitDrained("alarm", 3*time.Minute)
	s.checkExactlyOnce("alarm", accepted)
	s.checkNoDrift("alarm")
}

// memoryAlarm raises RabbitMQ's memory alarm (a high watermark no node
// stays under) or clears it (the local stack's 0.4 again), and waits until
// the node reports it so. Raising it makes sure it is cleared when the test
// ends. Only a package that holds the fault lock exclusively may raise it:
// it blocks every publisher of the node.
func memoryAlarm(t *testing.T, on bool) {
	t.Helper()
	mark := "0.4" // vm_memory_high_watermark.relative of deploy/local/service.sh
	if on {
		mark = "0.0000001"
		t.Cleanup(func() {
			if out, err := rabbitmqCLI("rabbitmqctl", "set_vm_memory_high_watermark", "0.4"); err != nil {
				t.Errorf("clearing the memory alarm: %v\n%s", err, out)
			}
		})
	}
	if out, err := rabbitmqCLI("rabbitmqctl", "set_vm_memory_high_watermark", mark); err != nil {
		t.Fatalf("set_vm_memory_high_watermark %s: %v\n%s", mark, err, out)
	}
	localstack.WaitFor(t, time.Minute, "RabbitMQ reports its memory alarm raised="+map[bool]string{true: "yes", false: "no"}[on], func() bool {
		out, err := rabbitmqCLI("rabbitmq-diagnostics", "alarms")
		return err == nil && strings.Contains(out, "Memory alarm") == on
	})
}

// rabbitmqCLI runs a RabbitMQ CLI tool against the local node
// (deploy/local/rabbitmq-cli.sh), bounded by a minute.
func rabbitmqCLI(tool string, args ...string) (string, error) {
	root, err := localstack.Root()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "deploy", "local", "rabbitmq-cli.sh"), append([]string{tool}, args...)...).CombinedOutput()
	return string(out), err
}
