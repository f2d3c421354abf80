package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// The local nginx of deploy/local/nginx.sh (tests, make run-lb): the shipped
// nginx.conf with only what must differ for a process on loopback changed.

// renderLocalNginx runs `nginx.sh conf` into a temporary folder and returns
// the folder and the parsed config. nginx need not be installed: the script
// then skips its `nginx -t`.
func renderLocalNginx(t *testing.T, listen string, gateways ...string) (string, *directive) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"local/nginx.sh", "conf", dir, listen}, gateways...)
	cmd := exec.Command("bash", args...)
	cmd.Env = append(os.Environ(), "FG_NGINX="+filepath.Join(dir, "no-nginx"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nginx.sh conf: %v\n%s", err, out)
	}
	root, err := parseNginx(readFile(t, filepath.Join(dir, "nginx.conf")))
	if err != nil {
		t.Fatalf("local nginx.conf: %v", err)
	}
	return dir, root
}

// TestNginxLocalConf: the rendered config equals deploy/nginx.conf but for
// the Docker resolver (gone), the upstream servers (the given addresses, same
// parameters, no `resolve`: nginx 1.22 lacks it), the listen addresses, and
// pid, log and temp paths (under the folder).
func TestNginxLocalConf(t *testing.T) {
	shipped, err := parseNginx(readFile(t, "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	gws := []string{"127.0.0.1:18081", "127.0.0.1:18082"}
	dir, local := renderLocalNginx(t, "127.0.0.1:18080", gws...)

	// What must differ, checked for what it became.
	var servers [][]string
	var listens []string
	var paths []string
	var walk func(d *directive, ctx string)
	walk = func(d *directive, ctx string) {
		for _, c := range d.block {
			switch {
			case c.name == "server" && ctx == "upstream":
				servers = append(servers, c.args)
			case c.name == "listen":
				listens = append(listens, c.args[0])
			case c.name == "pid" || c.name == "error_log" || c.name == "access_log" || strings.HasSuffix(c.name, "_temp_path"):
				paths = append(paths, c.args[0])
			case c.name == "resolver" || c.name == "resolver_timeout":
				t.Errorf("local config keeps %s %v: no Docker DNS on loopback", c.name, c.args)
			}
			walk(c, c.name)
		}
	}
	walk(local, "")
	for i, s := range servers {
		if i >= len(gws) || s[0] != gws[i] || slices.Contains(s, "resolve") {
			t.Errorf("upstream server %v, want %s without resolve", s, gws[min(i, len(gws)-1)])
		}
	}
	if len(servers) != len(gws) {
		t.Errorf("%d upstream servers, want %d", len(servers), len(gws))
	}
	if !slices.Equal(listens, []string{"127.0.0.1:18080", "127.0.0.1:18090"}) {
		t.Errorf("listen %v, want the given address and its port + 10 for the status server, loopback only", listens)
	}
	for _, p := range paths {
		if p != "off" && !strings.HasPrefix(p, dir+"/") {
			t.Errorf("path %s is not under %s", p, dir)
		}
	}

	// Everything else equal: both trees with what may differ blanked out.
	norm := func(root *directive) string {
		var f func(d *directive) *directive
		f = func(d *directive) *directive {
			out := &directive{name: d.name, args: d.args}
			if d.block == nil {
				return out
			}
			out.block = []*directive{}
			for _, c := range d.block {
				switch {
				case c.name == "resolver" || c.name == "resolver_timeout" || strings.HasSuffix(c.name, "_temp_path"):
					continue
				case c.name == "server" && d.name == "upstream":
					args := []string{"ADDR"}
					for _, a := range c.args[1:] {
						if a != "resolve" {
							args = append(args, a)
						}
					}
					c = &directive{name: c.name, args: args}
				case c.name == "listen" || c.name == "pid" || c.name == "error_log" || c.name == "access_log":
					c = &directive{name: c.name, args: append([]string{"X"}, c.args[1:]...)}
				}
				out.block = append(out.block, f(c))
			}
			return out
		}
		return dump(f(root))
	}
	if a, b := norm(shipped), norm(local); a != b {
		t.Errorf("the local config differs from nginx.conf beyond addresses and paths:\nshipped %s\nlocal   %s", a, b)
	}
}

// nginxDuration reads an nginx time ("5s", "500ms", "1m", a bare number is
// seconds).
func nginxDuration(t *testing.T, v string) time.Duration {
	t.Helper()
	if strings.Trim(v, "0123456789") == "" {
		v += "s"
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("nginx time %q: %v", v, err)
	}
	return d
}

// TestNginxTimeoutsMatchGateways holds nginx's timeouts against the
// gateways' settings, as compose sets them and as the defaults are (a local
// or bare-metal gateway runs with those):
//   - upstream keepalive_timeout < http.idle_timeout: nginx closes an idle
//     connection before the gateway does, so it never sends a buy on a
//     connection the gateway is closing;
//   - proxy_read_timeout >= http.write_timeout: nginx waits for an answer at
//     least as long as a gateway may take to write it, so a slow but given
//     answer (a reserved buy) does not become a 504 of unknown outcome;
//   - proxy_send_timeout <= http.read_timeout: nginx gives up sending a
//     request no later than the gateway gives up reading it;
//   - shutdown.drain_delay > 0 and fail_timeout > proxy_connect_timeout:
//     after SIGTERM a gateway keeps serving (with Connection: close) for
//     drain_delay, so nginx's kept-alive connections to it end on its
//     answers, not under a buy; then its listener closes and nginx's
//     connects fail fast (refused) and go to the other gateway.
func TestNginxTimeoutsMatchGateways(t *testing.T) {
	httpBlock, server := loadNginx(t)
	up := httpBlock.one(t, "upstream")
	keepalive := nginxDuration(t, up.one(t, "keepalive_timeout").args[0])
	read := nginxDuration(t, server.one(t, "proxy_read_timeout").args[0])
	send := nginxDuration(t, server.one(t, "proxy_send_timeout").args[0])
	connect := nginxDuration(t, server.one(t, "proxy_connect_timeout").args[0])
	for _, s := range up.all("server") {
		for _, a := range s.args[1:] {
			if v, ok := strings.CutPrefix(a, "fail_timeout="); ok && nginxDuration(t, v) <= connect {
				t.Errorf("server %s: fail_timeout %s not above proxy_connect_timeout %v", s.args[0], v, connect)
			}
		}
	}

	f := loadCompose(t)
	cfgs := map[string]*config.Config{"defaults": config.Default()}
	for _, name := range []string{"gateway-1", "gateway-2"} {
		cfgs[name] = settings(t, name, f.Services[name])
	}
	for name, c := range cfgs {
		what := fmt.Sprintf("%s: ", name)
		if keepalive >= c.HTTP.IdleTimeout {
			t.Errorf("%supstream keepalive_timeout %v not below http.idle_timeout %v", what, keepalive, c.HTTP.IdleTimeout)
		}
		if read < c.HTTP.WriteTimeout {
			t.Errorf("%sproxy_read_timeout %v below http.write_timeout %v", what, read, c.HTTP.WriteTimeout)
		}
		if send > c.HTTP.ReadTimeout {
			t.Errorf("%sproxy_send_timeout %v above http.read_timeout %v", what, send, c.HTTP.ReadTimeout)
		}
		if c.Shutdown.DrainDelay <= 0 {
			t.Errorf("%sshutdown.drain_delay %v: a SIGTERMed gateway would close its listener under nginx's kept-alive connections", what, c.Shutdown.DrainDelay)
		}
		t.Logf("%sidle %v > keepalive %v; write %v <= proxy_read %v; proxy_send %v <= read %v; drain_delay %v",
			what, c.HTTP.IdleTimeout, keepalive, c.HTTP.WriteTimeout, read, send, c.HTTP.ReadTimeout, c.Shutdown.DrainDelay)
	}
}
