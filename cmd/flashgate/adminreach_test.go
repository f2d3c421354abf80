package main

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/admin/admintest"
	"github.com/flashgate/flashgate/config"
)

// Where the admin CLI sends its calls and what it does when nothing
// answers: the address and token from the settings, health and the order
// view from the public listener, a refused connection.

// TestAdminSettings checks where the address and the token come from when
// no flag gives them: the settings, read as the gateway reads them.
func TestAdminSettings(t *testing.T) {
	f := admintest.NewServer(t, nil)
	_, port, _ := net.SplitHostPort(hostPort(f))

	t.Run("environment", func(t *testing.T) {
		clearEnv(t)
		// A gateway in a container binds every interface; the CLI beside
		// it reaches it on loopback.
		t.Setenv("FLASHGATE_ADMIN_ADDR", "0.0.0.0:"+port)
		t.Setenv("FLASHGATE_ADMIN_TOKEN", testToken)
		if _, err := runCLI(t, "sale", "show", "s1"); err != nil {
			t.Fatal(err)
		}
		if r := f.Requests(); r[len(r)-1].Auth != "Bearer "+testToken {
			t.Errorf("Authorization %q", r[len(r)-1].Auth)
		}
	})
	t.Run("flag token over the environment's", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("FLASHGATE_ADMIN_ADDR", "127.0.0.1:"+port)
		t.Setenv("FLASHGATE_ADMIN_TOKEN", testToken)
		if _, err := runCLI(t, "sale", "show", "s1", "--token", "other-token-0123456789"); err != nil {
			t.Fatal(err)
		}
		if r := f.Requests(); r[len(r)-1].Auth != "Bearer other-token-0123456789" {
			t.Errorf("Authorization %q", r[len(r)-1].Auth)
		}
	})
	t.Run("config file", func(t *testing.T) {
		clearEnv(t)
		path := filepath.Join(t.TempDir(), "flashgate.yaml")
		yaml := "admin:\n  addr: 127.0.0.1:" + port + "\n  token: yaml-token-0123456789\n"
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := runCLI(t, "--config", path, "scripts", "list"); err != nil {
			t.Fatal(err)
		}
		if r := f.Requests(); r[len(r)-1].Auth != "Bearer yaml-token-0123456789" || r[len(r)-1].Path != "/admin/v1/scripts" {
			t.Errorf("request %+v", r[len(r)-1])
		}
	})
	t.Run("no token on a loopback listener", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("FLASHGATE_ADMIN_ADDR", "127.0.0.1:"+port)
		if _, err := runCLI(t, "sale", "show", "s1"); err != nil {
			t.Fatal(err)
		}
		if r := f.Requests(); r[len(r)-1].Auth != "" {
			t.Errorf("Authorization %q, want none", r[len(r)-1].Auth)
		}
	})
	t.Run("bad setting", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("FLASHGATE_ADMIN_ADDR", "no-port")
		_, err := runCLI(t, "sale", "show", "s1")
		if !errors.Is(err, config.ErrInvalid) {
			t.Fatalf("error %v, want a bad setting (exit 2)", err)
		}
	})
}

func TestAdminHealth(t *testing.T) {
	srv := admintest.NewServer(t, nil)
	srv.Otherwise(reply(http.StatusNotFound, `{"status":"not_found"}`))
	_, port, _ := net.SplitHostPort(hostPort(srv))
	set := func(code int) {
		body := `{"status":"ok"}`
		if code != http.StatusOK {
			body = `{"status":"unavailable","error":"draining"}`
		}
		srv.Set("GET /readyz", reply(code, body))
	}

	clearEnv(t)
	t.Setenv("FLASHGATE_HTTP_ADDR", "0.0.0.0:"+port)
	t.Setenv("FLASHGATE_ADMIN_ADDR", "0.0.0.0:1")
	t.Setenv("FLASHGATE_ADMIN_TOKEN", testToken)

	set(http.StatusOK)
	out, err := runCLI(t, "health")
	if err != nil {
		t.Fatalf("ready gateway: %v", err)
	}
	if out != "{\n  \"status\": \"ok\"\n}\n" {
		t.Errorf("stdout %q", out)
	}

	set(http.StatusServiceUnavailable)
	_, err = runCLI(t, "health")
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "503 Service Unavailable: unavailable: draining") {
		t.Errorf("draining gateway: error %v", err)
	}

	set(http.StatusOK)
	if _, err := runCLI(t, "health", "--url", srv.URL+"/readyz"); err != nil {
		t.Errorf("--url: %v", err)
	}
	if _, err := runCLI(t, "health", "--url", srv.URL+"/nope"); err == nil {
		t.Errorf("--url to a 404: no error")
	}

	for _, r := range srv.Requests() {
		if r.Auth != "" {
			t.Errorf("health sent the admin token to the public listener")
		}
	}
}

// TestAdminOrderShow: the order view comes from the public listener (the
// settings' http.addr unless --public says otherwise), with no admin token.
func TestAdminOrderShow(t *testing.T) {
	const view = `{"status":"queued","order_id":"o1","sale_id":"s1","user_id":"u1","quantity":1,"state":"pending_payment","pay_by":"2030-01-01T09:00:00.123Z"}`
	srv := admintest.NewServer(t, map[string]admintest.Answer{
		"GET /v1/sales/s1/orders/o1": reply(200, view),
		"GET /v1/sales/s1/orders/o2": reply(401, `{"status":"unauthorized"}`),
	})
	srv.Otherwise(reply(http.StatusNotFound, `{"status":"not_found"}`))
	_, port, _ := net.SplitHostPort(hostPort(srv))
	clearEnv(t)
	t.Setenv("FLASHGATE_HTTP_ADDR", "0.0.0.0:"+port)
	t.Setenv("FLASHGATE_ADMIN_ADDR", "127.0.0.1:1")
	t.Setenv("FLASHGATE_ADMIN_TOKEN", testToken)

	out, err := runCLI(t, "order", "show", "s1", "o1")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil || got["state"] != "pending_payment" || got["pay_by"] != "2030-01-01T09:00:00.123Z" {
		t.Errorf("stdout %q (%v)", out, err)
	}
	if _, err := runCLI(t, "order", "show", "s1", "o1", "--public", srv.URL); err != nil {
		t.Errorf("--public: %v", err)
	}
	if _, err := runCLI(t, "order", "show", "s1", "nope"); err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "404") {
		t.Errorf("a missing order: error %v, want a 404 (exit 1)", err)
	}
	if _, err := runCLI(t, "order", "show", "s1", "o2"); err == nil || !strings.Contains(err.Error(), "buyer authentication is on") {
		t.Errorf("a 401: error %v, want one saying buyer authentication is on", err)
	}
	for _, r := range srv.Requests() {
		if r.Auth != "" || r.Method != "GET" {
			t.Errorf("order show sent %s with Authorization %q to the public listener", r.Method, r.Auth)
		}
	}
}

func TestAdminNoAnswer(t *testing.T) {
	clearEnv(t)
	addr := freeAddr(t) // nothing listens there
	_, err := runCLI(t, "--addr", addr, "--token", testToken, "sale", "show", "s1")
	if err == nil || errors.Is(err, errUsage) {
		t.Fatalf("error %v, want a failure (exit 1)", err)
	}
}
