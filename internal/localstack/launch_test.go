package localstack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The environment a launched program sees: no FLASHGATE_* of the caller's,
// free listeners unless Env says otherwise, and Public and Admin last.
func TestLaunchEnv(t *testing.T) {
	t.Setenv("FLASHGATE_LOG_LEVEL", "debug")
	for _, tc := range []struct {
		name          string
		env           []string
		public, admin string
		want          string
	}{
		{"clean", nil, "", "", "|127.0.0.1:0|127.0.0.1:0"},
		{"env wins over the clean one", []string{"FLASHGATE_LOG_LEVEL=warn", "FLASHGATE_HTTP_ADDR=127.0.0.1:9"}, "", "", "warn|127.0.0.1:9|127.0.0.1:0"},
		{"the listeners win over env", []string{"FLASHGATE_HTTP_ADDR=127.0.0.1:9"}, "127.0.0.1:7", "127.0.0.1:8", "|127.0.0.1:7|127.0.0.1:8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &Output{}
			p := LaunchT(t, LaunchOptions{Bin: "sh", Args: []string{"-c", `echo "$FLASHGATE_LOG_LEVEL|$FLASHGATE_HTTP_ADDR|$FLASHGATE_ADMIN_ADDR"`},
				Env: tc.env, Public: tc.public, Admin: tc.admin, Log: out})
			if code, err := p.Wait(10 * time.Second); err != nil || code != 0 {
				t.Fatalf("exit %d, %v", code, err)
			}
			if got := strings.TrimSpace(out.String()); got != tc.want {
				t.Errorf("the program saw %q, want %q", got, tc.want)
			}
		})
	}
}

// Launch waits until Ready answers 200 (any status under 500 with
// AnyAnswer), and fails when the program exits first.
func TestLaunchReady(t *testing.T) {
	var calls atomic.Int64
	answer := func(code int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Not ready for the first three looks.
			if calls.Add(1) <= 3 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(code)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		code    int
		any     bool
		program string
		ready   bool
	}{
		{"200", http.StatusOK, false, "sleep 60", true},
		{"410 is not 200", http.StatusGone, false, "sleep 60", false},
		{"410 is an answer", http.StatusGone, true, "sleep 60", true},
		{"exits first", http.StatusOK, false, "exit 3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls.Store(0)
			srv := answer(tc.code)
			p, err := Launch(ctx, LaunchOptions{Bin: "sh", Args: []string{"-c", tc.program}, Ready: srv.URL, AnyAnswer: tc.any, ReadyWait: 2 * time.Second})
			if !tc.ready {
				if err == nil {
					p.Stop()
					t.Fatal("ready")
				}
				if tc.program == "exit 3" && !strings.Contains(err.Error(), "exited at start") {
					t.Errorf("error %v, want it to say the program exited", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Stop()
			if n := calls.Load(); n < 4 {
				t.Errorf("ready after %d looks, before the fourth answered", n)
			}
		})
	}
}

// Stop ends a program with SIGTERM, Kill with SIGKILL; both wait, and
// calling them again is harmless.
func TestLaunchStopKill(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		end  func(*Process) error
		sig  syscall.Signal
	}{
		{"stop", (*Process).Stop, syscall.SIGTERM},
		{"kill", (*Process).Kill, syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Launch(ctx, LaunchOptions{Bin: "sleep", Args: []string{"60"}})
			if err != nil {
				t.Fatal(err)
			}
			if p.Pid() <= 0 || p.Err() != nil {
				t.Fatalf("pid %d, err %v", p.Pid(), p.Err())
			}
			tc.end(p)
			select {
			case <-p.Exited():
			default:
				t.Fatal("running after it returned")
			}
			st, ok := p.Cmd().ProcessState.Sys().(syscall.WaitStatus)
			if !ok || !st.Signaled() || st.Signal() != tc.sig {
				t.Errorf("ended by %v, want %v", st.Signal(), tc.sig)
			}
			if code, err := p.Wait(time.Second); err != nil || code != -1 {
				t.Errorf("Wait: %d, %v; want -1 (a signal)", code, err)
			}
			p.Stop()
			if err := p.Kill(); err != nil {
				t.Errorf("Kill after the end: %v", err)
			}
		})
	}
}
