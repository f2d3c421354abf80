package deploy

import (
	"net"
	"slices"
	"strings"
	"testing"
)

// nginx.conf, held against the compose file and the gateways' settings.

func loadNginx(t *testing.T) (httpBlock, server *directive) {
	t.Helper()
	root, err := parseNginx(readFile(t, "nginx.conf"))
	if err != nil {
		t.Fatalf("nginx.conf: %v", err)
	}
	httpBlock = root.one(t, "http")
	for _, s := range httpBlock.all("server") {
		for _, l := range s.all("listen") {
			if !strings.HasPrefix(l.args[0], "127.") {
				server = s
			}
		}
	}
	if server == nil {
		t.Fatal("nginx.conf: no server listening beyond loopback")
	}
	return httpBlock, server
}

func TestNginxUpstreams(t *testing.T) {
	f := loadCompose(t)
	httpBlock, server := loadNginx(t)
	upstreams := map[string]bool{}
	for _, u := range httpBlock.all("upstream") {
		upstreams[u.args[0]] = true
		if len(u.all("keepalive")) != 1 {
			t.Errorf("upstream %s: no keepalive: every request would open a new connection", u.args[0])
		}
		servers := u.all("server")
		if len(servers) < 2 {
			t.Errorf("upstream %s: %d servers, want both gateways", u.args[0], len(servers))
		}
		for _, s := range servers {
			host, p, err := net.SplitHostPort(s.args[0])
			if err != nil {
				t.Errorf("upstream %s: server %s: %v", u.args[0], s.args[0], err)
				continue
			}
			svc, ok := f.Services[host]
			if !ok {
				t.Errorf("upstream %s: server %s is not a compose service", u.args[0], host)
				continue
			}
			if !isFlashgate(svc) || role(svc) != "gateway" {
				t.Errorf("upstream %s: %s is not a gateway", u.args[0], host)
				continue
			}
			if want := port(t, settings(t, host, svc).HTTP.Addr); p != want {
				t.Errorf("upstream %s: %s port %s, but the gateway listens on %s", u.args[0], host, p, want)
			}
			params := strings.Join(s.args[1:], " ")
			if !strings.Contains(params, "max_fails=") || !strings.Contains(params, "fail_timeout=") {
				t.Errorf("upstream %s: server %s without max_fails/fail_timeout", u.args[0], host)
			}
		}
	}
	for _, l := range server.all("location") {
		for _, pp := range l.all("proxy_pass") {
			name := strings.TrimPrefix(pp.args[0], "http://")
			if !upstreams[name] {
				t.Errorf("location %v: proxy_pass to %s, not an upstream", l.args, pp.args[0])
			}
		}
	}
	// The nginx service publishes the port this server listens on, and
	// mounts this file.
	listen := server.one(t, "listen").args[0]
	var published bool
	for _, p := range f.Services["nginx"].Ports {
		published = published || p.target == listen
	}
	if !published {
		t.Errorf("nginx listens on %s, which compose does not publish", listen)
	}
	if !slices.Contains(f.Services["nginx"].Volumes, "./nginx.conf:/etc/nginx/nginx.conf:ro") {
		t.Errorf("compose does not mount this nginx.conf as /etc/nginx/nginx.conf")
	}
}

func TestNginxRoutes(t *testing.T) {
	f := loadCompose(t)
	_, server := loadNginx(t)

	// Proxied (and how) or answered by nginx.
	for _, tc := range []struct {
		path     string
		proxied  bool
		retry503 bool // may be retried on the other gateway after a 503
	}{
		{path: "/v1/sales/s1/orders", proxied: true}, // the buy: never
		{path: "/v1/sales/s1", proxied: true, retry503: true},
		{path: "/v1/sales/s1/orders/o-1", proxied: true, retry503: true},
		{path: "/readyz", proxied: true, retry503: true},
		{path: "/healthz", proxied: true, retry503: true},
		{path: "/admin/v1/sales/s1"},
		{path: "/admin/v1/scripts/reload"},
		{path: "/metrics"},
		{path: "/"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			l := route(t, server, tc.path)
			if l == nil {
				t.Fatalf("no location matches (nginx would serve files)")
			}
			proxied := len(l.all("proxy_pass")) > 0
			if proxied != tc.proxied {
				t.Fatalf("location %v: proxied %v, want %v", l.args, proxied, tc.proxied)
			}
			if !proxied {
				return
			}
			var next []string
			for _, d := range l.all("proxy_next_upstream") {
				next = append(next, d.args...)
			}
			if slices.Contains(next, "non_idempotent") {
				t.Errorf("location %v: non_idempotent would resend a buy that a gateway may have reserved", l.args)
			}
			if has := slices.Contains(next, "http_503"); has != tc.retry503 {
				t.Errorf("location %v: retry on 503 is %v, want %v", l.args, has, tc.retry503)
			}
		})
	}
	if l := route(t, server, "/readyz"); l == nil || len(l.args) != 2 || l.args[0] != "=" {
		t.Errorf("no `location = /readyz`")
	}

	// Same body limit as the gateways.
	limit := server.one(t, "client_max_body_size").args[0]
	n, err := nginxSize(limit)
	if err != nil {
		t.Fatalf("client_max_body_size: %v", err)
	}
	if want := settings(t, "gateway-1", f.Services["gateway-1"]).HTTP.MaxBodyBytes; n != want {
		t.Errorf("client_max_body_size %s = %d bytes, gateways' max body %d", limit, n, want)
	}

	// Keep-alive to the upstream needs HTTP/1.1 and no Connection: close.
	if v := server.one(t, "proxy_http_version").args; !slices.Equal(v, []string{"1.1"}) {
		t.Errorf("proxy_http_version %v, want 1.1", v)
	}
	var conn bool
	for _, h := range server.all("proxy_set_header") {
		conn = conn || (h.args[0] == "Connection" && len(h.args) == 2 && h.args[1] == "")
	}
	if !conn {
		t.Errorf(`no proxy_set_header Connection "": upstream keepalive would not work`)
	}
}
