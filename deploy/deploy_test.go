// Package deploy holds no code: its tests check the deployment files beside
// them (compose.yaml, nginx.conf, ../Dockerfile) against the code. No Docker
// engine runs where the tests run, so they check what can be checked without
// one: the compose file parsed and held against config/, nginx.conf parsed and
// held against the compose file, and the image's build step run as a plain
// `go build`.
package deploy

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/flashgate/flashgate/config"
)

// ---------------------------------------------------------------------------
// compose.yaml

type composeFile struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

// service holds the fields the tests look at. Fields that compose accepts in
// several shapes are decoded as `any` (merge keys, `<<:`, are resolved by the
// decoder either way).
type service struct {
	Image           string                `yaml:"image"`
	Build           any                   `yaml:"build"`
	Command         any                   `yaml:"command"`
	Environment     any                   `yaml:"environment"`
	Ports           []any                 `yaml:"ports"`
	Volumes         []string              `yaml:"volumes"`
	Healthcheck     *healthcheck          `yaml:"healthcheck"`
	DependsOn       map[string]dependency `yaml:"depends_on"`
	Restart         string                `yaml:"restart"`
	StopGracePeriod string                `yaml:"stop_grace_period"`
}

type healthcheck struct {
	Test    any  `yaml:"test"`
	Disable bool `yaml:"disable"`
}

type dependency struct {
	Condition string `yaml:"condition"`
}

// testVars stands for the operator's shell when the compose file is
// interpolated. Only what the file requires (${X:?...}) is set here: every
// other variable must have a default that works.
var testVars = map[string]string{
	"FLASHGATE_ADMIN_TOKEN": "compose-test-token-0123456789",
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	raw, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("compose.yaml: %v (depends_on must use the long form with a condition)", err)
	}
	if len(f.Services) == 0 {
		t.Fatal("compose.yaml: no services")
	}
	return f
}

// interpolate does compose's variable substitution on s with vars as the
// environment: $$, ${X}, ${X:-default}, ${X-default}, ${X:?error}, ${X?error}.
func interpolate(s string, vars map[string]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if i+1 >= len(s) || s[i+1] != '{' {
			return "", fmt.Errorf("%q: write variables as ${NAME}", s)
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("%q: unclosed ${", s)
		}
		expr := s[i+2 : i+end]
		i += end
		name, op, arg := expr, "", ""
		if k := strings.IndexAny(expr, ":-?"); k >= 0 {
			name, op = expr[:k], expr[k:]
			for _, o := range []string{":-", ":?", "-", "?"} {
				if strings.HasPrefix(op, o) {
					op, arg = o, op[len(o):]
					break
				}
			}
		}
		v, ok := vars[name]
		switch op {
		case "":
			if !ok {
				return "", fmt.Errorf("%q: ${%s} has no default and the test does not set it", s, name)
			}
		case ":-", "-":
			if !ok || (op == ":-" && v == "") {
				v = arg
			}
		case ":?", "?":
			if !ok || (op == ":?" && v == "") {
				return "", fmt.Errorf("%q: required variable %s not set: %s", s, name, arg)
			}
		default:
			return "", fmt.Errorf("%q: unknown form ${%s}", s, expr)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// env returns a service's environment, interpolated, whichever of compose's
// two forms (map or NAME=value list) it is written in.
func env(t *testing.T, name string, s service) map[string]string {
	t.Helper()
	out := map[string]string{}
	put := func(k, v string) {
		iv, err := interpolate(v, testVars)
		if err != nil {
			t.Errorf("%s: environment %s: %v", name, k, err)
		}
		out[k] = iv
	}
	switch e := s.Environment.(type) {
	case nil:
	case map[string]any:
		for k, v := range e {
			put(k, fmt.Sprint(v))
		}
	case []any:
		for _, it := range e {
			k, v, _ := strings.Cut(fmt.Sprint(it), "=")
			put(k, v)
		}
	default:
		t.Errorf("%s: environment is a %T", name, e)
	}
	return out
}

func words(v any) []string {
	switch c := v.(type) {
	case string:
		return strings.Fields(c)
	case []any:
		out := make([]string, len(c))
		for i, w := range c {
			out[i] = fmt.Sprint(w)
		}
		return out
	}
	return nil
}

// isFlashgate tells the services that run the flashgate image.
func isFlashgate(s service) bool { return strings.HasPrefix(s.Image, "flashgate:") }

func role(s service) string {
	if w := words(s.Command); len(w) > 0 {
		return w[0]
	}
	return "gateway" // the image's CMD
}

// settings loads a flashgate service's configuration exactly as the process
// in the container would: defaults, then its environment.
func settings(t *testing.T, name string, s service) *config.Config {
	t.Helper()
	e := env(t, name, s)
	cfg, err := config.Load("", func(k string) string { return e[k] })
	if err != nil {
		t.Fatalf("%s: its environment is not a valid configuration: %v", name, err)
	}
	return cfg
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestComposeServices(t *testing.T) {
	f := loadCompose(t)
	want := []string{"redis", "rabbitmq", "mysql", "migrate", "gateway-1", "gateway-2", "nginx", "consumer-1", "consumer-2"}
	for _, name := range want {
		if _, ok := f.Services[name]; !ok {
			t.Errorf("service %q missing", name)
		}
	}
	roles := map[string]string{"migrate": "migrate", "gateway-1": "gateway", "gateway-2": "gateway",
		"consumer-1": "consumer", "consumer-2": "consumer"}
	for name, s := range f.Services {
		if r, ok := roles[name]; ok {
			if !isFlashgate(s) || role(s) != r {
				t.Errorf("%s: want the flashgate image running %q, have image %q command %v", name, r, s.Image, words(s.Command))
			}
			if s.Build == nil {
				t.Errorf("%s: no build: `docker compose up --build` would not build the image", name)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s: mounts %s: %v", name, src, err)
				}
			} else if _, ok := f.Volumes[src]; !ok {
				t.Errorf("%s: volume %q is not declared under volumes:", name, src)
			}
		}
	}
}

// TestComposeEnvironment checks that every FLASHGATE_* name used is a real
// setting (a typo would be silently ignored by the process) and that each
// flashgate service's environment is a configuration the process accepts.
func TestComposeEnvironment(t *testing.T) {
	f := loadCompose(t)
	known := map[string]bool{"FLASHGATE_CONFIG": true} // the file path, not a setting
	for _, s := range config.Settings() {
		known[s.Env] = true
	}
	for name, s := range f.Services {
		for k := range env(t, name, s) {
			if strings.HasPrefix(k, "FLASHGATE_") && !known[k] {
				t.Errorf("%s: %s is not a setting of config/", name, k)
			}
		}
		if !isFlashgate(s) {
			continue
		}
		cfg := settings(t, name, s)
		if !strings.HasPrefix(cfg.Redis.Addrs[0], "redis:") {
			t.Errorf("%s: redis.addrs = %v, want the redis service", name, cfg.Redis.Addrs)
		}
		if !strings.Contains(cfg.AMQP.URL, "@rabbitmq:") {
			t.Errorf("%s: amqp.url does not point at the rabbitmq service", name)
		}
		if !strings.Contains(cfg.MySQL.DSN, "tcp(mysql:") {
			t.Errorf("%s: mysql.dsn does not point at the mysql service", name)
		}
		if role(s) == "gateway" {
			if host, _, _ := net.SplitHostPort(cfg.HTTP.Addr); host != "0.0.0.0" {
				t.Errorf("%s: http.addr = %s: nginx cannot reach a gateway bound to %s", name, cfg.HTTP.Addr, host)
			}
			m, _ := s.Environment.(map[string]any)
			raw := fmt.Sprint(m["FLASHGATE_ADMIN_TOKEN"])
			if !strings.HasPrefix(raw, "${FLASHGATE_ADMIN_TOKEN:?") {
				t.Errorf("%s: FLASHGATE_ADMIN_TOKEN = %q, want ${FLASHGATE_ADMIN_TOKEN:?...} so that compose refuses to start without one", name, raw)
			}
		}
	}
}

// TestComposeDependsOn checks the start order: each dependency is waited for
// until healthy, except the one-shot migrate, waited for until it has
// succeeded; a service waited for as healthy must have a healthcheck.
func TestComposeDependsOn(t *testing.T) {
	f := loadCompose(t)
	for name, s := range f.Services {
		for dep, d := range s.DependsOn {
			target, ok := f.Services[dep]
			if !ok {
				t.Errorf("%s: depends on unknown service %q", name, dep)
				continue
			}
			want := "service_healthy"
			if target.Restart == "no" {
				want = "service_completed_successfully"
			}
			if d.Condition != want {
				t.Errorf("%s: depends_on %s: condition %q, want %q", name, dep, d.Condition, want)
			}
			if want == "service_healthy" && (target.Healthcheck == nil || target.Healthcheck.Disable) {
				t.Errorf("%s: waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}
	}
	need := map[string][]string{
		"gateway":  {"redis", "rabbitmq"},
		"consumer": {"rabbitmq", "mysql", "migrate"},
		"migrate":  {"mysql"},
	}
	for name, s := range f.Services {
		if !isFlashgate(s) {
			continue
		}
		for _, dep := range need[role(s)] {
			if _, ok := s.DependsOn[dep]; !ok {
				t.Errorf("%s: does not wait for %s", name, dep)
			}
		}
	}
	for _, gw := range []string{"gateway-1", "gateway-2"} {
		if _, ok := f.Services["nginx"].DependsOn[gw]; !ok {
			t.Errorf("nginx: does not wait for %s", gw)
		}
	}
}

func TestComposeRedisAOF(t *testing.T) {
	s := loadCompose(t).Services["redis"]
	args := words(s.Command)
	opt := func(name string) string {
		if i := slices.Index(args, "--"+name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	if opt("appendonly") != "yes" {
		t.Errorf("redis: command %v: want --appendonly yes", args)
	}
	if fs := opt("appendfsync"); fs != "everysec" && fs != "always" {
		t.Errorf("redis: --appendfsync %q, want everysec or always", fs)
	}
	if p := opt("maxmemory-policy"); p != "" && p != "noeviction" {
		t.Errorf("redis: --maxmemory-policy %s would evict sale keys", p)
	}
	if !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
		t.Errorf("redis: /data (the AOF) is not on a volume")
	}
}

// noHealthcheck lists the long-running services that have no healthcheck,
// and why.
var noHealthcheck = map[string]string{
	// The consumer has no listener: there is nothing to probe but the
	// process, which exits on a fatal error and is restarted. No service
	// waits for a consumer.
	"consumer": "no listener",
}

func TestComposeHealthchecks(t *testing.T) {
	f := loadCompose(t)
	for name, s := range f.Services {
		if s.Restart == "no" {
			continue // one-shot (migrate): nothing stays up to check
		}
		if s.Restart == "" {
			t.Errorf("%s: no restart policy: a crashed %s stays down", name, name)
		}
		has := s.Healthcheck != nil && !s.Healthcheck.Disable && len(words(s.Healthcheck.Test)) > 1
		if _, exempt := noHealthcheck[role(s)]; exempt && isFlashgate(s) {
			if has {
				t.Errorf("%s: has a healthcheck now: remove %q from noHealthcheck", name, role(s))
			}
			continue
		}
		if !has {
			t.Errorf("%s: long-running service without a healthcheck", name)
		}
	}
	for _, name := range []string{"gateway-1", "gateway-2"} {
		hc := words(f.Services[name].Healthcheck.Test)
		// The image is distroless: exec form, the binary itself.
		if want := []string{"CMD", "/flashgate", "admin", "health"}; !slices.Equal(hc, want) {
			t.Errorf("%s: healthcheck %v, want %v (the image has no shell)", name, hc, want)
		}
	}
}

// publish is one published port: the host address it binds and the
// container port it reaches.
type publish struct{ hostIP, target string }

func publishes(t *testing.T, name string, s service) []publish {
	t.Helper()
	var out []publish
	for _, p := range s.Ports {
		switch v := p.(type) {
		case string:
			spec, _, _ := strings.Cut(v, "/")
			var host string
			if strings.HasPrefix(spec, "[") { // [::1]:8081:8081
				end := strings.Index(spec, "]")
				host, spec = spec[1:end], strings.TrimPrefix(spec[end+1:], ":")
			}
			parts := strings.Split(spec, ":")
			if len(parts) == 3 {
				host = parts[0]
			}
			out = append(out, publish{hostIP: host, target: parts[len(parts)-1]})
		case map[string]any:
			host, _ := v["host_ip"].(string)
			out = append(out, publish{hostIP: host, target: fmt.Sprint(v["target"])})
		default:
			t.Errorf("%s: port %v: unknown form", name, p)
		}
	}
	return out
}

// TestComposePorts checks that only nginx is published on every interface
// of the host; the gateways' admin listeners (and anything else) bind
// loopback only.
func TestComposePorts(t *testing.T) {
	f := loadCompose(t)
	loopback := func(h string) bool {
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	for name, s := range f.Services {
		for _, p := range publishes(t, name, s) {
			if name != "nginx" && !loopback(p.hostIP) {
				t.Errorf("%s: container port %s published on %q (every interface); bind it to 127.0.0.1", name, p.target, p.hostIP)
			}
		}
		if isFlashgate(s) && role(s) == "gateway" {
			cfg := settings(t, name, s)
			admin, public := port(t, cfg.Admin.Addr), port(t, cfg.HTTP.Addr)
			var seen bool
			for _, p := range publishes(t, name, s) {
				seen = seen || p.target == admin
				if p.target == public {
					t.Errorf("%s: public listener published directly; buyers go through nginx", name)
				}
			}
			if !seen {
				t.Errorf("%s: admin listener (port %s) not published on the host's loopback", name, admin)
			}
		}
	}
}

// TestComposeStopGrace checks that Docker gives a gateway the time its own
// shutdown deadline allows, instead of SIGKILL after its default 10 s.
func TestComposeStopGrace(t *testing.T) {
	f := loadCompose(t)
	for name, s := range f.Services {
		if !isFlashgate(s) || s.Restart == "no" {
			continue
		}
		cfg := settings(t, name, s)
		grace := 10 * time.Second // Docker's default
		if s.StopGracePeriod != "" {
			var err error
			if grace, err = time.ParseDuration(s.StopGracePeriod); err != nil {
				t.Fatalf("%s: stop_grace_period: %v", name, err)
			}
		}
		if grace <= cfg.Shutdown.Timeout {
			t.Errorf("%s: stop_grace_period %v is not above shutdown.timeout %v: Docker would kill it mid-drain", name, grace, cfg.Shutdown.Timeout)
		}
	}
}

// TestComposeGatewayHealthcheck runs the gateways' healthcheck command the
// way Docker runs it in the container (same arguments, same environment but
// for the port) against a stand-in /readyz: it must pass on 200 and fail on
// 503. The stand-in is right here: what is under test is the probe, not the
// gateway's readiness.
func TestComposeGatewayHealthcheck(t *testing.T) {
	s := loadCompose(t).Services["gateway-1"]
	hc := words(s.Healthcheck.Test)
	bin := buildDockerfile(t)
	var code atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		c := int(code.Load())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(c)
		if c == http.StatusOK {
			fmt.Fprint(w, `{"status":"ok"}`)
		} else {
			fmt.Fprint(w, `{"status":"unavailable","error":"draining"}`)
		}
	}))
	defer srv.Close()
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())

	for _, tc := range []struct {
		name string
		code int
		ok   bool
	}{
		{"ready", http.StatusOK, true},
		{"draining", http.StatusServiceUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env(t, "gateway-1", s)
			e["FLASHGATE_HTTP_ADDR"] = "0.0.0.0:" + p // as in the container: bound to all, probed on loopback
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, hc[2:]...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			for k, v := range e {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			code.Store(int32(tc.code))
			out, err := cmd.CombinedOutput()
			if tc.ok && err != nil {
				t.Errorf("healthcheck failed on a ready gateway: %v\n%s", err, out)
			}
			if !tc.ok {
				if ee, isExit := err.(*exec.ExitError); !isExit || ee.ExitCode() != 1 {
					t.Errorf("healthcheck on a draining gateway: %v, want exit status 1\n%s", err, out)
				}
			}
		})
	}
}

// ---------------------------------------------------------------------------
// nginx.conf

// directive is one nginx directive, with its block when it has one.
type directive struct {
	name  string
	args  []string
	block []*directive
}

func (d *directive) all(name string) []*directive {
	var out []*directive
	for _, c := range d.block {
		if c.name == name {
			out = append(out, c)
		}
	}
	return out
}

func (d *directive) one(t *testing.T, name string) *directive {
	t.Helper()
	l := d.all(name)
	if len(l) != 1 {
		t.Fatalf("nginx.conf: %s %v: want one %s, have %d", d.name, d.args, name, len(l))
	}
	return l[0]
}

// parseNginx is a light parser of nginx's syntax: words, quoted strings,
// comments, `;` and blocks. Enough to read the structure, not to validate it.
func parseNginx(src string) (*directive, error) {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '{' || c == '}' || c == ';':
			toks = append(toks, string(c))
			i++
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("unclosed quote at byte %d", i)
			}
			toks = append(toks, src[i+1:j])
			i = j + 1
		default:
			j := i
			for j < len(src) && !strings.ContainsRune(" \t\r\n{};", rune(src[j])) {
				j++
			}
			toks = append(toks, src[i:j])
			i = j
		}
	}
	root := &directive{name: "main"}
	stack := []*directive{root}
	var cur *directive
	for _, tok := range toks {
		top := stack[len(stack)-1]
		switch tok {
		case ";":
			if cur == nil {
				return nil, fmt.Errorf("stray ; in %s", top.name)
			}
			top.block = append(top.block, cur)
			cur = nil
		case "{":
			if cur == nil {
				return nil, fmt.Errorf("block without a name in %s", top.name)
			}
			top.block = append(top.block, cur)
			stack = append(stack, cur)
			cur = nil
		case "}":
			if cur != nil || len(stack) == 1 {
				return nil, fmt.Errorf("unexpected } in %s", top.name)
			}
			stack = stack[:len(stack)-1]
		default:
			if cur == nil {
				cur = &directive{name: tok}
			} else {
				cur.args = append(cur.args, tok)
			}
		}
	}
	if len(stack) != 1 || cur != nil {
		return nil, fmt.Errorf("unclosed block or directive at the end")
	}
	return root, nil
}

func loadNginx(t *testing.T) (httpBlock, server *directive) {
	t.Helper()
	raw, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	root, err := parseNginx(string(raw))
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

// route returns the location nginx picks for path: an exact match, else the
// longest prefix if it is ^~, else the first matching regex, else the
// longest prefix.
func route(t *testing.T, server *directive, path string) *directive {
	t.Helper()
	var prefix *directive
	var prefixLen int
	var regexes []*directive
	for _, l := range server.all("location") {
		switch {
		case len(l.args) == 2 && l.args[0] == "=":
			if l.args[1] == path {
				return l
			}
		case len(l.args) == 2 && (l.args[0] == "~" || l.args[0] == "~*"):
			regexes = append(regexes, l)
		case len(l.args) == 2 && l.args[0] == "^~", len(l.args) == 1 && !strings.HasPrefix(l.args[0], "@"):
			p := l.args[len(l.args)-1]
			if strings.HasPrefix(path, p) && len(p) > prefixLen {
				prefix, prefixLen = l, len(p)
			}
		}
	}
	if prefix != nil && prefix.args[0] == "^~" {
		return prefix
	}
	for _, l := range regexes {
		re := l.args[1]
		if l.args[0] == "~*" {
			re = "(?i)" + re
		}
		if regexp.MustCompile(re).MatchString(path) {
			return l
		}
	}
	return prefix
}

// nginxSize reads an nginx size: bytes, or k/m suffixed.
func nginxSize(v string) (int, error) {
	mult := 1
	switch strings.ToLower(v[len(v)-1:]) {
	case "k":
		mult, v = 1<<10, v[:len(v)-1]
	case "m":
		mult, v = 1<<20, v[:len(v)-1]
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%q: want a size such as 4096 or 4k", v)
	}
	return n * mult, nil
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
	for _, p := range publishes(t, "nginx", f.Services["nginx"]) {
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

// ---------------------------------------------------------------------------
// Dockerfile

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, rest string
}

func loadDockerfile(t *testing.T) []instruction {
	t.Helper()
	raw, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if more, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(more + " ")
			continue
		}
		cur.WriteString(line)
		cmd, rest, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(rest)})
		cur.Reset()
	}
	return out
}

// shellWords splits a command line the way sh does for the simple lines of a
// Dockerfile: blanks, single and double quotes, backslash escapes. Variables
// are expanded from vars; an unknown one is an error.
func shellWords(s string, vars map[string]string) ([]string, error) {
	var out []string
	var w strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'' && c != '\'':
			w.WriteByte(c)
		case c == quote:
			quote = 0
		case quote == 0 && (c == '\'' || c == '"'):
			quote, inWord = c, true
		case c == '\\' && i+1 < len(s):
			i++
			w.WriteByte(s[i])
			inWord = true
		case c == '$':
			name := ""
			if i+1 < len(s) && s[i+1] == '{' {
				end := strings.IndexByte(s[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("unclosed ${ in %q", s)
				}
				name, i = s[i+2:i+end], i+end
			} else {
				j := i + 1
				for j < len(s) && (s[j] == '_' || 'A' <= s[j] && s[j] <= 'Z' || 'a' <= s[j] && s[j] <= 'z' || '0' <= s[j] && s[j] <= '9') {
					j++
				}
				name, i = s[i+1:j], j-1
			}
			v, ok := vars[name]
			if !ok {
				return nil, fmt.Errorf("$%s is not known to the test", name)
			}
			w.WriteString(v)
			inWord = true
		case quote == 0 && (c == ' ' || c == '\t'):
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote in %q", s)
	}
	if inWord {
		out = append(out, w.String())
	}
	return out, nil
}

func TestDockerfileStages(t *testing.T) {
	ins := loadDockerfile(t)
	args := map[string]string{}
	var froms []string
	var final []instruction // the instructions of the last stage
	for _, in := range ins {
		switch in.cmd {
		case "ARG":
			if len(froms) == 0 { // global ARGs: usable in FROM
				for _, a := range strings.Fields(in.rest) {
					k, v, _ := strings.Cut(a, "=")
					args[k] = v
				}
			}
		case "FROM":
			f := strings.Fields(in.rest)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			img, err := shellWords(f[0], args)
			if err != nil {
				t.Fatalf("FROM %s: %v", in.rest, err)
			}
			froms = append(froms, img[0])
			final = nil
		default:
			final = append(final, in)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("FROM %v: want a build stage and a final stage", froms)
	}

	// The build image's Go is the go line of go.mod.
	goMod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)(\.\d+)?\s*$`).FindSubmatch(goMod)
	if m == nil {
		t.Fatal("go.mod: no go line")
	}
	if want := "golang:" + string(m[1]); froms[0] != want && !strings.HasPrefix(froms[0], want+".") && !strings.HasPrefix(froms[0], want+"-") {
		t.Errorf("build stage FROM %s, want %s (go.mod says go %s%s)", froms[0], want, m[1], m[2])
	}

	if last := froms[len(froms)-1]; last != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final stage FROM %s, want gcr.io/distroless/static-debian12:nonroot", last)
	}
	want := map[string]string{
		"COPY":       "--from=build /out/flashgate /flashgate",
		"USER":       "nonroot",
		"ENTRYPOINT": `["/flashgate"]`,
		"CMD":        `["gateway"]`,
		"EXPOSE":     port(t, config.Default().HTTP.Addr) + " " + port(t, config.Default().Admin.Addr),
	}
	for _, in := range final {
		if w, ok := want[in.cmd]; ok {
			if in.rest != w {
				t.Errorf("final stage: %s %s, want %s %s", in.cmd, in.rest, in.cmd, w)
			}
			delete(want, in.cmd)
		}
		if in.cmd == "HEALTHCHECK" {
			t.Errorf("final stage: HEALTHCHECK applies to every subcommand; set it per service in compose.yaml")
		}
	}
	for cmd, w := range want {
		t.Errorf("final stage: no %s %s", cmd, w)
	}
}

// dockerBuild returns the environment and the arguments of the Dockerfile's
// `go build`, its variables expanded to test values.
func dockerBuild(t *testing.T, vars map[string]string) (env, argv []string) {
	t.Helper()
	for _, in := range loadDockerfile(t) {
		if in.cmd != "RUN" || !strings.Contains(in.rest, "go build") {
			continue
		}
		w, err := shellWords(in.rest, vars)
		if err != nil {
			t.Fatalf("RUN %s: %v", in.rest, err)
		}
		for len(w) > 0 && strings.HasPrefix(w[0], "--") { // --mount=...
			w = w[1:]
		}
		for len(w) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(w[0]) {
			env, w = append(env, w[0]), w[1:]
		}
		if len(w) < 2 || w[0] != "go" || w[1] != "build" {
			t.Fatalf("RUN %s: want [VAR=value ...] go build ...", in.rest)
		}
		return env, w
	}
	t.Fatal("Dockerfile: no RUN ... go build")
	return nil, nil
}

// buildDockerfile runs the Dockerfile's `go build`, flags and environment
// as they are, from the repository root, into a temporary folder, and
// returns the binary's path.
func buildDockerfile(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	vars := map[string]string{
		"VERSION": "v0.0.0-dockertest", "COMMIT": "c0ffee",
		"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH,
	}
	env, argv := dockerBuild(t, vars)
	if !slices.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("build environment %v: want CGO_ENABLED=0 (a static binary for distroless/static)", env)
	}
	if !slices.Contains(argv, "-trimpath") {
		t.Errorf("go build %v: want -trimpath", argv)
	}
	i := slices.Index(argv, "-ldflags")
	if i < 0 || !strings.HasPrefix(argv[i+1], "-s -w ") ||
		!strings.Contains(argv[i+1], "-X main.version="+vars["VERSION"]) || !strings.Contains(argv[i+1], "-X main.commit="+vars["COMMIT"]) {
		t.Errorf("go build %v: want -ldflags \"-s -w -X main.version=$VERSION -X main.commit=$COMMIT\"", argv)
	}
	o := slices.Index(argv, "-o")
	if o < 0 || argv[o+1] != "/out/flashgate" || argv[len(argv)-1] != "./cmd/flashgate" {
		t.Fatalf("go build %v: want -o /out/flashgate ./cmd/flashgate (the final stage copies it)", argv)
	}
	bin := filepath.Join(t.TempDir(), "flashgate")
	argv[o+1] = bin

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", argv[1:]...)
	cmd.Dir = ".."
	// The build context has no .git (.dockerignore), so the image's build
	// stamps no VCS information: neither does this one.
	cmd.Env = append(append(os.Environ(), env...), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(argv[1:], " "), err, out)
	}
	return bin
}

// TestDockerBuild runs the image's build step as a plain go build and checks
// the binary: stamped with the version, static (distroless/static has no C
// library and no dynamic loader), stripped.
func TestDockerBuild(t *testing.T) {
	bin := buildDockerfile(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("flashgate version: %v\n%s", err, out)
	}
	if want := "flashgate v0.0.0-dockertest (commit c0ffee,"; !strings.HasPrefix(string(out), want) {
		t.Errorf("flashgate version = %q, want it to start with %q", out, want)
	}

	if runtime.GOOS != "linux" {
		t.Skip("the ELF checks need a linux build")
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_INTERP:
			t.Errorf("the binary asks for a dynamic loader (PT_INTERP): not static")
		case elf.PT_DYNAMIC:
			t.Errorf("the binary has a dynamic section (PT_DYNAMIC): not static")
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("the binary has a symbol table: -ldflags -s did not apply")
	}
}
