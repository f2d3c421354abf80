package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// The admin CLI is tested against a stand-in that records what it receives:
// what is under test is how the CLI builds its requests and reads the
// answers. The admin API itself is tested against real Redis in gateway/.

const testToken = "admin-test-token-0123456789"

// request is what the stand-in received.
type request struct {
	Method, Path, Body, Auth string
}

type fakeAdmin struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
	// answers maps "METHOD PATH" to a status code and a body; anything else
	// gets 200 with okBody.
	answers map[string]answer
}

type answer struct {
	code int
	body string
}

const okBody = `{"status":"ok","sale_id":"s1","stock":10}`

func newFakeAdmin(t *testing.T, answers map[string]answer) *fakeAdmin {
	t.Helper()
	f := &fakeAdmin{answers: answers}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if len(body) > 0 && r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: body sent as %q", r.Method, r.URL.EscapedPath(), r.Header.Get("Content-Type"))
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, request{r.Method, r.URL.EscapedPath(), string(body), r.Header.Get("Authorization")})
		f.mu.Unlock()
		a, ok := f.answers[r.Method+" "+r.URL.EscapedPath()]
		if !ok {
			a = answer{http.StatusOK, okBody}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.code)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAdmin) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

func (f *fakeAdmin) hostPort() string { return f.Listener.Addr().String() }

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := runAdmin(ctx, args, &out)
	return out.String(), err
}

// sameJSON compares two JSON texts by value (key order aside).
func sameJSON(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// clearEnv keeps the settings of the machine running the tests out of them.
func clearEnv(t *testing.T) {
	for _, s := range config.Settings() {
		t.Setenv(s.Env, "")
	}
	t.Setenv("FLASHGATE_CONFIG", "")
}

func TestAdminRequests(t *testing.T) {
	clearEnv(t)
	notFound := answer{http.StatusNotFound, `{"status":"not_found"}`}
	bearer := "Bearer " + testToken
	for _, tc := range []struct {
		name    string
		args    []string
		answers map[string]answer
		want    []request
		wantErr string // substring of the error; empty: success
		wantOut string // exact stdout on success; empty: not checked
	}{
		{
			name:    "show",
			args:    []string{"sale", "show", "s1"},
			want:    []request{{"GET", "/admin/v1/sales/s1", "", bearer}},
			wantOut: "{\n  \"status\": \"ok\",\n  \"sale_id\": \"s1\",\n  \"stock\": 10\n}\n",
		},
		{
			name: "create",
			args: []string{"sale", "create", "s1", "--stock", "100", "--limit", "2",
				"--starts", "2030-01-01T09:00:00Z", "--ends", "2030-01-01T10:30:00+01:00"},
			answers: map[string]answer{"GET /admin/v1/sales/s1": notFound, "PUT /admin/v1/sales/s1": {201, okBody}},
			want: []request{
				{"GET", "/admin/v1/sales/s1", "", bearer},
				{"PUT", "/admin/v1/sales/s1", `{"stock":100,"per_user_limit":2,"starts_at":"2030-01-01T09:00:00Z","ends_at":"2030-01-01T10:30:00+01:00"}`, bearer},
			},
		},
		{
			name:    "create with only stock leaves the rest to the API's defaults",
			args:    []string{"sale", "create", "--stock", "0", "s1"},
			answers: map[string]answer{"GET /admin/v1/sales/s1": notFound},
			want: []request{
				{"GET", "/admin/v1/sales/s1", "", bearer},
				{"PUT", "/admin/v1/sales/s1", `{"stock":0}`, bearer},
			},
		},
		{
			name:    "create refuses an existing sale",
			args:    []string{"sale", "create", "s1", "--stock", "5"},
			want:    []request{{"GET", "/admin/v1/sales/s1", "", bearer}},
			wantErr: `sale "s1" already exists: use sale update`,
		},
		{
			name: "update sends only what is given; clear is null",
			args: []string{"sale", "update", "s1", "--stock", "50", "--clear-ends"},
			want: []request{
				{"GET", "/admin/v1/sales/s1", "", bearer},
				{"PUT", "/admin/v1/sales/s1", `{"stock":50,"ends_at":null}`, bearer},
			},
		},
		{
			name: "update of the window",
			args: []string{"sale", "update", "s1", "--clear-starts", "--ends", "2031-06-01T00:00:00Z", "--limit", "3"},
			want: []request{
				{"GET", "/admin/v1/sales/s1", "", bearer},
				{"PUT", "/admin/v1/sales/s1", `{"starts_at":null,"ends_at":"2031-06-01T00:00:00Z","per_user_limit":3}`, bearer},
			},
		},
		{
			name:    "update refuses a missing sale",
			args:    []string{"sale", "update", "s1", "--stock", "50"},
			answers: map[string]answer{"GET /admin/v1/sales/s1": notFound},
			want:    []request{{"GET", "/admin/v1/sales/s1", "", bearer}},
			wantErr: `no sale "s1": use sale create`,
		},
		{
			name: "restock",
			args: []string{"sale", "restock", "s1", "25"},
			want: []request{{"POST", "/admin/v1/sales/s1/restock", `{"quantity":25}`, bearer}},
		},
		{
			name: "lock",
			args: []string{"sale", "lock", "s1"},
			want: []request{{"POST", "/admin/v1/sales/s1/lock", "", bearer}},
		},
		{
			name: "unlock",
			args: []string{"sale", "unlock", "s1"},
			want: []request{{"POST", "/admin/v1/sales/s1/unlock", "", bearer}},
		},
		{
			name: "id with the punctuation ids allow",
			args: []string{"sale", "show", "Sale_1.a:b@c-d"},
			want: []request{{"GET", "/admin/v1/sales/Sale_1.a:b@c-d", "", bearer}},
		},
		{
			name: "scripts list",
			args: []string{"scripts", "list"},
			want: []request{{"GET", "/admin/v1/scripts", "", bearer}},
		},
		{
			name: "scripts reload",
			args: []string{"scripts", "reload"},
			want: []request{{"POST", "/admin/v1/scripts/reload", "", bearer}},
		},
		{
			name:    "conflict names code, status and error",
			args:    []string{"sale", "update", "s1", "--stock", "1"},
			answers: map[string]answer{"PUT /admin/v1/sales/s1": {409, `{"status":"conflict","error":"stock below sold"}`}},
			want: []request{
				{"GET", "/admin/v1/sales/s1", "", bearer},
				{"PUT", "/admin/v1/sales/s1", `{"stock":1}`, bearer},
			},
			wantErr: "/admin/v1/sales/s1: 409 Conflict: conflict: stock below sold",
		},
		{
			name:    "script error",
			args:    []string{"scripts", "reload"},
			answers: map[string]answer{"POST /admin/v1/scripts/reload": {422, `{"status":"script_error","error":"reserve.lua: line 3"}`}},
			want:    []request{{"POST", "/admin/v1/scripts/reload", "", bearer}},
			wantErr: "422 Unprocessable Entity: script_error: reserve.lua: line 3",
		},
		{
			name:    "unauthorized says where the token comes from",
			args:    []string{"sale", "lock", "s1"},
			answers: map[string]answer{"POST /admin/v1/sales/s1/lock": {401, `{"status":"unauthorized"}`}},
			want:    []request{{"POST", "/admin/v1/sales/s1/lock", "", bearer}},
			wantErr: "401 Unauthorized: unauthorized (check --token or FLASHGATE_ADMIN_TOKEN)",
		},
		{
			name:    "an answer that is not JSON",
			args:    []string{"sale", "show", "s1"},
			answers: map[string]answer{"GET /admin/v1/sales/s1": {502, `<html>bad gateway</html>`}},
			want:    []request{{"GET", "/admin/v1/sales/s1", "", bearer}},
			wantErr: "502 Bad Gateway",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t, tc.answers)
			args := append([]string{"--addr", f.URL, "--token", testToken}, tc.args...)
			out, err := runCLI(t, args...)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr != "" && errors.Is(err, errUsage):
				t.Fatalf("error %v is a usage error (exit 2); want exit 1", err)
			}
			if tc.wantErr == "" && !json.Valid([]byte(out)) {
				t.Errorf("stdout is not the JSON answer: %q", out)
			}
			if tc.wantOut != "" && out != tc.wantOut {
				t.Errorf("stdout %q, want %q", out, tc.wantOut)
			}
			got := f.requests()
			if len(got) != len(tc.want) {
				t.Fatalf("requests %+v, want %+v", got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Method != w.Method || g.Path != w.Path || g.Auth != w.Auth || !sameJSON(g.Body, w.Body) {
					t.Errorf("request %d: %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestAdminUsage(t *testing.T) {
	clearEnv(t)
	f := newFakeAdmin(t, nil)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"--no-such-flag", "sale", "show", "s1"},
		{"sale"},
		{"sale", "frobnicate", "s1"},
		{"sale", "show"},
		{"sale", "show", "s1", "s2"},
		{"sale", "create", "s1"},
		{"sale", "create", "--stock", "10"},
		{"sale", "create", "s1", "--stock", "ten"},
		{"sale", "create", "s1", "--stock", "-1"},
		{"sale", "create", "s1", "--stock", "1", "--limit", "0"},
		{"sale", "create", "s1", "--stock", "1", "--starts", "tomorrow"},
		{"sale", "create", "s1", "--stock", "1", "--clear-ends"},
		{"sale", "update", "s1"},
		{"sale", "update", "s1", "--starts", "2030-01-01T00:00:00Z", "--clear-starts"},
		{"sale", "update", "s1", "--ends", "2030-01-01"},
		{"sale", "restock", "s1"},
		{"sale", "restock", "s1", "0"},
		{"sale", "restock", "s1", "many"},
		{"sale", "restock", "s1", "5", "6"},
		{"sale", "lock"},
		{"sale", "unlock", "s1", "s2"},
		{"scripts"},
		{"scripts", "flush"},
		{"scripts", "list", "extra"},
		{"health", "extra"},
		{"health", "--url", "readyz"},
		{"--addr", "ftp://127.0.0.1:8081", "sale", "show", "s1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			all := append([]string{"--addr", f.URL, "--token", testToken}, args...)
			if len(args) > 0 && args[0] == "--addr" {
				all = append([]string{"--token", testToken}, args...)
			}
			_, err := runCLI(t, all...)
			if !errors.Is(err, errUsage) {
				t.Fatalf("error %v, want a usage error", err)
			}
			if !strings.Contains(err.Error(), "usage: flashgate admin") {
				t.Errorf("error %q does not show the usage", err)
			}
		})
	}
	if r := f.requests(); len(r) != 0 {
		t.Errorf("bad usage still sent %+v", r)
	}
}

func TestAdminHelp(t *testing.T) {
	clearEnv(t)
	for _, args := range [][]string{{"-h"}, {"--help"}, {"sale", "create", "-h"}, {"health", "--help"}} {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Errorf("%v: error %v", args, err)
		}
		if !strings.HasPrefix(out, "usage: flashgate admin") {
			t.Errorf("%v: stdout %q, want the usage", args, out)
		}
	}
}

// TestAdminSettings checks where the address and the token come from when
// no flag gives them: the settings, read as the gateway reads them.
func TestAdminSettings(t *testing.T) {
	f := newFakeAdmin(t, nil)
	_, port, _ := net.SplitHostPort(f.hostPort())

	t.Run("environment", func(t *testing.T) {
		clearEnv(t)
		// A gateway in a container binds every interface; the CLI beside
		// it reaches it on loopback.
		t.Setenv("FLASHGATE_ADMIN_ADDR", "0.0.0.0:"+port)
		t.Setenv("FLASHGATE_ADMIN_TOKEN", testToken)
		if _, err := runCLI(t, "sale", "show", "s1"); err != nil {
			t.Fatal(err)
		}
		if r := f.requests(); r[len(r)-1].Auth != "Bearer "+testToken {
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
		if r := f.requests(); r[len(r)-1].Auth != "Bearer other-token-0123456789" {
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
		if r := f.requests(); r[len(r)-1].Auth != "Bearer yaml-token-0123456789" || r[len(r)-1].Path != "/admin/v1/scripts" {
			t.Errorf("request %+v", r[len(r)-1])
		}
	})
	t.Run("no token on a loopback listener", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("FLASHGATE_ADMIN_ADDR", "127.0.0.1:"+port)
		if _, err := runCLI(t, "sale", "show", "s1"); err != nil {
			t.Fatal(err)
		}
		if r := f.requests(); r[len(r)-1].Auth != "" {
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
	var mu sync.Mutex
	code := http.StatusOK
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		auth = append(auth, r.Header.Get("Authorization"))
		if r.Method != http.MethodGet || r.URL.Path != "/readyz" {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"status":"not_found"}`)
			return
		}
		w.WriteHeader(code)
		if code == http.StatusOK {
			io.WriteString(w, `{"status":"ok"}`)
		} else {
			io.WriteString(w, `{"status":"unavailable","error":"draining"}`)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	set := func(c int) {
		mu.Lock()
		code = c
		mu.Unlock()
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

	mu.Lock()
	defer mu.Unlock()
	for _, a := range auth {
		if a != "" {
			t.Errorf("health sent the admin token to the public listener")
		}
	}
}

func TestAdminNoAnswer(t *testing.T) {
	clearEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = runCLI(t, "--addr", addr, "--token", testToken, "sale", "show", "s1")
	if err == nil || errors.Is(err, errUsage) {
		t.Fatalf("error %v, want a failure (exit 1)", err)
	}
}

func TestAdminListenerURL(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:8081":   "http://127.0.0.1:8081",
		":8081":          "http://127.0.0.1:8081",
		"[::]:8081":      "http://[::1]:8081",
		"127.0.0.1:8081": "http://127.0.0.1:8081",
		"10.1.2.3:8081":  "http://10.1.2.3:8081",
		"localhost:8081": "http://localhost:8081",
	} {
		if got := listenerURL(addr); got != want {
			t.Errorf("listenerURL(%q) = %q, want %q", addr, got, want)
		}
	}
}
