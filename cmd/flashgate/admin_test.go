package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/admin"
	"github.com/flashgate/flashgate/admin/admintest"
	"github.com/flashgate/flashgate/config"
	"github.com/flashgate/flashgate/sale"
)

// The admin CLI is tested against admintest's stand-in, which records what
// it receives: what is under test is how the command line becomes calls of
// the admin client, what is printed and the exit status. How the client
// builds its requests and reads the answers is tested in admin/; the admin
// API itself against real Redis in gateway/.

const testToken = "admin-test-token-0123456789"

func req(method, path, body, auth string) admintest.Request {
	return admintest.Request{Method: method, Path: path, Body: body, Auth: auth}
}

func reply(code int, body string) admintest.Answer { return admintest.Answer{Code: code, Body: body} }

func hostPort(s *admintest.Server) string { return s.Listener.Addr().String() }

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := runAdmin(ctx, args, &out)
	return out.String(), err
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
	notFound := reply(http.StatusNotFound, `{"status":"not_found"}`)
	bearer := "Bearer " + testToken
	for _, tc := range []struct {
		name    string
		args    []string
		answers map[string]admintest.Answer
		want    []admintest.Request
		wantErr string // substring of the error; empty: success
		wantOut string // exact stdout on success; empty: not checked
	}{
		{
			name:    "show",
			args:    []string{"sale", "show", "s1"},
			want:    []admintest.Request{req("GET", "/admin/v1/sales/s1", "", bearer)},
			wantOut: "{\n  \"status\": \"ok\",\n  \"sale_id\": \"s1\",\n  \"stock\": 10\n}\n",
		},
		{
			name: "create",
			args: []string{"sale", "create", "s1", "--stock", "100", "--limit", "2",
				"--starts", "2030-01-01T09:00:00Z", "--ends", "2030-01-01T10:30:00+01:00"},
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound, "PUT /admin/v1/sales/s1": reply(201, admintest.OK)},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":100,"per_user_limit":2,"starts_at":"2030-01-01T09:00:00Z","ends_at":"2030-01-01T10:30:00+01:00"}`, bearer),
			},
		},
		{
			name:    "create with only stock leaves the rest to the API's defaults",
			args:    []string{"sale", "create", "--stock", "0", "s1"},
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":0}`, bearer),
			},
		},
		{
			name:    "create refuses an existing sale",
			args:    []string{"sale", "create", "s1", "--stock", "5"},
			want:    []admintest.Request{req("GET", "/admin/v1/sales/s1", "", bearer)},
			wantErr: `sale "s1" already exists: use sale update`,
		},
		{
			name: "update sends only what is given; clear is null",
			args: []string{"sale", "update", "s1", "--stock", "50", "--clear-ends"},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":50,"ends_at":null}`, bearer),
			},
		},
		{
			name: "update of the window",
			args: []string{"sale", "update", "s1", "--clear-starts", "--ends", "2031-06-01T00:00:00Z", "--limit", "3"},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"starts_at":null,"ends_at":"2031-06-01T00:00:00Z","per_user_limit":3}`, bearer),
			},
		},
		{
			name:    "update refuses a missing sale",
			args:    []string{"sale", "update", "s1", "--stock", "50"},
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound},
			want:    []admintest.Request{req("GET", "/admin/v1/sales/s1", "", bearer)},
			wantErr: `no sale "s1": use sale create`,
		},
		{
			name: "restock",
			args: []string{"sale", "restock", "s1", "25"},
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/restock", `{"quantity":25}`, bearer)},
		},
		{
			name: "lock",
			args: []string{"sale", "lock", "s1"},
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/lock", "", bearer)},
		},
		{
			name: "unlock",
			args: []string{"sale", "unlock", "s1"},
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/unlock", "", bearer)},
		},
		{
			name:    "create with a payment window",
			args:    []string{"sale", "create", "s1", "--stock", "3", "--payment-window", "60"},
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":3,"payment_window":60}`, bearer),
			},
		},
		{
			name: "update of the payment window, as a duration",
			args: []string{"sale", "update", "s1", "--payment-window", "15m"},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"payment_window":900}`, bearer),
			},
		},
		{
			name: "update to no payment window",
			args: []string{"sale", "update", "s1", "--payment-window", "0"},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"payment_window":0}`, bearer),
			},
		},
		{
			name:    "create with a waiting room",
			args:    []string{"sale", "create", "s1", "--stock", "3", "--waiting-room", "random", "--admit-per-second", "1000000", "--pass-seconds", "10"},
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": notFound},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":3,"waiting_room":"random","admit_per_second":1000000,"pass_seconds":10}`, bearer),
			},
		},
		{
			name: "update of the admission rate alone",
			args: []string{"sale", "update", "s1", "--admit-per-second", "1"},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"admit_per_second":1}`, bearer),
			},
		},
		{
			name: "update to no waiting room, and the longest pass",
			args: []string{"sale", "update", "s1", "--waiting-room", "off", "--pass-seconds", "3600"},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"waiting_room":"off","pass_seconds":3600}`, bearer),
			},
		},
		{
			name:    "a room change after the start is the API's refusal, exit 1",
			args:    []string{"sale", "update", "s1", "--waiting-room", "fifo"},
			answers: map[string]admintest.Answer{"PUT /admin/v1/sales/s1": reply(409, `{"status":"conflict","error":"the window has started"}`)},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"waiting_room":"fifo"}`, bearer),
			},
			wantErr: "409 Conflict: conflict: the window has started",
		},
		{
			name:    "show of a sale with a waiting room prints its fields",
			args:    []string{"sale", "show", "s1"},
			answers: map[string]admintest.Answer{"GET /admin/v1/sales/s1": reply(200, `{"status":"ok","sale_id":"s1","waiting_room":"fifo","admit_per_second":100,"pass_seconds":120,"joined":7,"admitted":3}`)},
			want:    []admintest.Request{req("GET", "/admin/v1/sales/s1", "", bearer)},
			wantOut: "{\n  \"status\": \"ok\",\n  \"sale_id\": \"s1\",\n  \"waiting_room\": \"fifo\",\n  \"admit_per_second\": 100,\n" +
				"  \"pass_seconds\": 120,\n  \"joined\": 7,\n  \"admitted\": 3\n}\n",
		},
		{
			name: "order pay",
			args: []string{"order", "pay", "s1", "o1"},
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/orders/o1/pay", "", bearer)},
		},
		{
			name: "order cancel, flags after the ids",
			args: []string{"order", "cancel", "s1", "o:1", "--token", testToken},
			want: []admintest.Request{req("POST", "/admin/v1/sales/s1/orders/o:1/cancel", "", bearer)},
		},
		{
			name:    "order pay past pay_by is the API's refusal, exit 1",
			args:    []string{"order", "pay", "s1", "o1"},
			answers: map[string]admintest.Answer{"POST /admin/v1/sales/s1/orders/o1/pay": reply(409, `{"status":"order_expired"}`)},
			want:    []admintest.Request{req("POST", "/admin/v1/sales/s1/orders/o1/pay", "", bearer)},
			wantErr: "/admin/v1/sales/s1/orders/o1/pay: 409 Conflict: order_expired",
		},
		{
			name:    "order cancel of a missing order",
			args:    []string{"order", "cancel", "s1", "o9"},
			answers: map[string]admintest.Answer{"POST /admin/v1/sales/s1/orders/o9/cancel": reply(404, `{"status":"not_found"}`)},
			want:    []admintest.Request{req("POST", "/admin/v1/sales/s1/orders/o9/cancel", "", bearer)},
			wantErr: "404 Not Found: not_found",
		},
		{
			name: "scripts list",
			args: []string{"scripts", "list"},
			want: []admintest.Request{req("GET", "/admin/v1/scripts", "", bearer)},
		},
		{
			name: "scripts reload",
			args: []string{"scripts", "reload"},
			want: []admintest.Request{req("POST", "/admin/v1/scripts/reload", "", bearer)},
		},
		{
			name:    "conflict names code, status and error",
			args:    []string{"sale", "update", "s1", "--stock", "1"},
			answers: map[string]admintest.Answer{"PUT /admin/v1/sales/s1": reply(409, `{"status":"conflict","error":"stock below sold"}`)},
			want: []admintest.Request{
				req("GET", "/admin/v1/sales/s1", "", bearer),
				req("PUT", "/admin/v1/sales/s1", `{"stock":1}`, bearer),
			},
			wantErr: "/admin/v1/sales/s1: 409 Conflict: conflict: stock below sold",
		},
		{
			name:    "script error",
			args:    []string{"scripts", "reload"},
			answers: map[string]admintest.Answer{"POST /admin/v1/scripts/reload": reply(422, `{"status":"script_error","error":"reserve.lua: line 3"}`)},
			want:    []admintest.Request{req("POST", "/admin/v1/scripts/reload", "", bearer)},
			wantErr: "422 Unprocessable Entity: script_error: reserve.lua: line 3",
		},
		{
			name:    "unauthorized says where the token comes from",
			args:    []string{"sale", "lock", "s1"},
			answers: map[string]admintest.Answer{"POST /admin/v1/sales/s1/lock": reply(401, `{"status":"unauthorized"}`)},
			want:    []admintest.Request{req("POST", "/admin/v1/sales/s1/lock", "", bearer)},
			wantErr: "401 Unauthorized: unauthorized (check --token or FLASHGATE_ADMIN_TOKEN)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := admintest.NewServer(t, tc.answers)
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
			f.Check(t, tc.want)
			for _, r := range f.Requests() {
				if r.Agent != "flashgate-admin/"+version {
					t.Errorf("User-Agent %q", r.Agent)
				}
			}
		})
	}
}

func TestAdminUsage(t *testing.T) {
	clearEnv(t)
	f := admintest.NewServer(t, nil)
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
		{"sale", "create", "s1", "--stock", "1", "--payment-window", "-1"},
		{"sale", "create", "s1", "--stock", "1", "--payment-window", "86401"},
		{"sale", "create", "s1", "--stock", "1", "--payment-window", "25h"},
		{"sale", "update", "s1", "--payment-window", "1.5s"},
		{"sale", "update", "s1", "--payment-window", "soon"},
		{"sale", "update", "s1", "--payment-window", ""},
		{"sale", "create", "s1", "--stock", "1", "--waiting-room", "lottery"},
		{"sale", "create", "s1", "--stock", "1", "--waiting-room", "FIFO"},
		{"sale", "update", "s1", "--waiting-room", ""},
		{"sale", "create", "s1", "--stock", "1", "--admit-per-second", "0"},
		{"sale", "create", "s1", "--stock", "1", "--admit-per-second", "1000001"},
		{"sale", "update", "s1", "--admit-per-second", "fast"},
		{"sale", "update", "s1", "--admit-per-second", "1.5"},
		{"sale", "create", "s1", "--stock", "1", "--pass-seconds", "9"},
		{"sale", "update", "s1", "--pass-seconds", "3601"},
		{"sale", "update", "s1", "--pass-seconds", "2m"},
		{"order"},
		{"order", "refund", "s1", "o1"},
		{"order", "pay", "s1"},
		{"order", "pay", "s1", "o1", "o2"},
		{"order", "cancel"},
		{"order", "show", "s1"},
		{"order", "show", "s1", "o1", "--public", "ftp://127.0.0.1:8080"},
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
	if r := f.Requests(); len(r) != 0 {
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

// The waiting room's bounds the CLI checks before any request are the
// API's own.
func TestAdminRoomBounds(t *testing.T) {
	if admin.MaxAdmitPerSecond != sale.MaxAdmitPerSecond || admin.MinPassSeconds != sale.MinPassSeconds || admin.MaxPassSeconds != sale.MaxPassSeconds {
		t.Errorf("admin's bounds %d, %d–%d; the API's %d, %d–%d", admin.MaxAdmitPerSecond, admin.MinPassSeconds, admin.MaxPassSeconds,
			sale.MaxAdmitPerSecond, sale.MinPassSeconds, sale.MaxPassSeconds)
	}
	for _, m := range []string{admin.RoomOff, admin.RoomFIFO, admin.RoomRandom} {
		if _, ok := sale.ParseRoom(m); !ok {
			t.Errorf("mode %q is not the API's", m)
		}
	}
}
