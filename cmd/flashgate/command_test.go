package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/internal/localstack"
)

// TestCommand runs the built binary the way an operator does and checks its
// exit code and output. Every row must end before touching the network: a
// bad setting stops the process before any client is built.
func TestCommand(t *testing.T) {
	bin := localstack.Binary(t)
	dir := t.TempDir()

	files := map[string]string{
		"unknown.yaml":   "redis:\n  addrs: 127.0.0.1:6379\n  adr: 127.0.0.1:6379\n",
		"badvalue.yaml":  "redis:\n  timeout: 2h\n",
		"malformed.yaml": "redis:\n  addrs: [127.0.0.1:6379\n",
		"good.yaml":      "redis:\n  timeout: 250ms\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := func(name string) string { return filepath.Join(dir, name) }

	tests := []struct {
		name       string
		args       []string
		env        []string // NAME=value, added to a FLASHGATE_-free environment
		code       int
		stdout     string   // prefix of stdout; "" means stdout must be empty
		oneLine    bool     // stderr must be exactly one line
		stderrHas  []string // substrings of stderr
		stderrNone []string // must not appear on stderr
	}{
		{name: "version", args: []string{"version"},
			code: 0, stdout: "flashgate "},
		{name: "unknown command", args: []string{"frobnicate"},
			code: 2, stderrHas: []string{`unknown command "frobnicate"`}},
		{name: "gateway bad timeout via env", args: []string{"gateway"},
			env:  []string{"FLASHGATE_REDIS_TIMEOUT=abc"},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},
		{name: "gateway body limit out of range via env", args: []string{"gateway"},
			env:  []string{"FLASHGATE_MAX_BODY_BYTES=10"},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_MAX_BODY_BYTES", "http.max_body_bytes"}},
		{name: "gateway unparsable redis address via env", args: []string{"gateway"},
			env:  []string{"FLASHGATE_REDIS_ADDRS=localhost"},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_REDIS_ADDRS", "redis.addrs"}},
		{name: "gateway public admin without token", args: []string{"gateway"},
			env:  []string{"FLASHGATE_ADMIN_ADDR=0.0.0.0:8081"},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_ADMIN_ADDR", "admin.addr"}},
		{name: "gateway short admin token is not echoed", args: []string{"gateway"},
			env:  []string{"FLASHGATE_ADMIN_TOKEN=tiny-s3cret"},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_ADMIN_TOKEN", "admin.token"},
			stderrNone: []string{"tiny-s3cret"}},
		{name: "gateway dsn with a newline inside", args: []string{"gateway"},
			env:  []string{"FLASHGATE_MYSQL_DSN=u:p@tcp(127.0.0.1:3306)/db?parseTime=tr\nue"},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_MYSQL_DSN", "mysql.dsn"}},
		{name: "gateway unknown key via --config", args: []string{"gateway", "--config", file("unknown.yaml")},
			code: 2, oneLine: true, stderrHas: []string{"redis.adr", file("unknown.yaml")}},
		{name: "gateway unknown key via FLASHGATE_CONFIG", args: []string{"gateway"},
			env:  []string{"FLASHGATE_CONFIG=" + file("unknown.yaml")},
			code: 2, oneLine: true, stderrHas: []string{"redis.adr", file("unknown.yaml")}},
		{name: "gateway bad value in --config", args: []string{"gateway", "--config", file("badvalue.yaml")},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},
		{name: "gateway malformed --config", args: []string{"gateway", "--config", file("malformed.yaml")},
			code: 2, oneLine: true, stderrHas: []string{file("malformed.yaml")}},
		{name: "gateway env overrides a good file with a bad value", args: []string{"gateway", "--config", file("good.yaml")},
			env:  []string{"FLASHGATE_REDIS_TIMEOUT=0"},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_REDIS_TIMEOUT", "redis.timeout"}},
		{name: "gateway buyer key file not PEM", args: []string{"gateway"},
			env:  []string{"FLASHGATE_BUYER_JWT_KEY_FILE=" + file("good.yaml")},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_BUYER_JWT_KEY_FILE", "buyer.jwt_key_file", "no PEM block"}},
		{name: "consumer buyer key file missing", args: []string{"consumer"},
			env:  []string{"FLASHGATE_BUYER_JWT_KEY_FILE=" + file("missing.pem")},
			code: 2, oneLine: true, stderrHas: []string{"FLASHGATE_BUYER_JWT_KEY_FILE", "buyer.jwt_key_file", file("missing.pem")}},
		{name: "gateway stray argument", args: []string{"gateway", "extra"},
			code: 2, oneLine: true, stderrHas: []string{`"extra"`}},
		{name: "gateway unknown flag", args: []string{"gateway", "--nope"},
			code: 2, oneLine: true, stderrHas: []string{"nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tt.args...)
			cmd.Env = append(cleanEnv(), tt.env...)
			cmd.Dir = dir
			cmd.WaitDelay = time.Second
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("flashgate %v did not exit within 10s; stderr: %s", tt.args, stderr.String())
			}
			var exitErr *exec.ExitError
			if err != nil && !errors.As(err, &exitErr) {
				t.Fatalf("run flashgate %v: %v", tt.args, err)
			}
			if got := cmd.ProcessState.ExitCode(); got != tt.code {
				t.Errorf("exit code %d, want %d; stderr: %q", got, tt.code, stderr.String())
			}

			out := stdout.String()
			if tt.stdout == "" && out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if !strings.HasPrefix(out, tt.stdout) {
				t.Errorf("stdout %q, want it to start with %q", out, tt.stdout)
			}

			msg := stderr.String()
			if tt.oneLine {
				if !strings.HasSuffix(msg, "\n") || strings.Count(msg, "\n") != 1 || strings.Contains(msg, "\r") {
					t.Errorf("stderr is not exactly one line: %q", msg)
				}
			}
			for _, w := range tt.stderrHas {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr %q does not contain %q", msg, w)
				}
			}
			for _, w := range tt.stderrNone {
				if strings.Contains(msg, w) {
					t.Errorf("stderr %q shows %q", msg, w)
				}
			}
		})
	}
}

// TestReconcileUsage: a reconcile without a sale, with a negative wait or
// with a stray argument is a usage error: exit code 2.
func TestReconcileUsage(t *testing.T) {
	for _, args := range [][]string{{"reconcile"}, {"reconcile", "--sale", "s", "--wait", "-1s"}, {"reconcile", "--sale", "s", "extra"}} {
		if out, code := runFlashgate(t, nil, args...); code != 2 {
			t.Errorf("flashgate %v: exit code %d, want 2\n%s", args, code, out)
		}
	}
}
