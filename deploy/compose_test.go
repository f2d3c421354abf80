package deploy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/flashgate/flashgate/config"
)

// compose.yaml, decoded with the YAML library; the fields that compose
// accepts in several shapes decode into one (merge keys, `<<:`, are
// resolved by the decoder).

type composeFile struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

// service holds the fields the tests look at.
type service struct {
	Image           string                `yaml:"image"`
	Build           any                   `yaml:"build"`
	Command         words                 `yaml:"command"`
	Environment     environment           `yaml:"environment"`
	Ports           []publish             `yaml:"ports"`
	Volumes         []string              `yaml:"volumes"`
	Healthcheck     *healthcheck          `yaml:"healthcheck"`
	DependsOn       map[string]dependency `yaml:"depends_on"`
	Restart         string                `yaml:"restart"`
	StopGracePeriod string                `yaml:"stop_grace_period"`
}

type healthcheck struct {
	Test    words `yaml:"test"`
	Disable bool  `yaml:"disable"`
}

type dependency struct {
	Condition string `yaml:"condition"`
}

// words is a command: a list, or a string split at blanks.
type words []string

func (w *words) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*w = strings.Fields(n.Value)
		return nil
	}
	var l []string
	if err := n.Decode(&l); err != nil {
		return err
	}
	*w = l
	return nil
}

// environment is a service's environment as written, not interpolated:
// NAME → value, from either of compose's forms (a mapping, or a list of
// NAME=value).
type environment map[string]string

func (e *environment) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		var m map[string]string
		if err := n.Decode(&m); err != nil {
			return err
		}
		*e = m
	case yaml.SequenceNode:
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		*e = environment{}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			(*e)[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment: want a mapping or a list of NAME=value", n.Line)
	}
	return nil
}

// UnmarshalYAML reads a published port in either of compose's forms: the
// short string (parsePublish) or the long mapping.
func (p *publish) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		v, err := parsePublish(n.Value)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		*p = v
	case yaml.MappingNode:
		var v struct {
			HostIP string `yaml:"host_ip"`
			Target string `yaml:"target"`
		}
		if err := n.Decode(&v); err != nil {
			return err
		}
		*p = publish{hostIP: v.HostIP, target: v.Target}
	default:
		return fmt.Errorf("line %d: port: unknown form", n.Line)
	}
	return nil
}

// testVars stands for the operator's shell when the compose file is
// interpolated. Only what the file requires (${X:?...}) is set here: every
// other variable must have a default that works.
var testVars = map[string]string{
	"FLASHGATE_ADMIN_TOKEN": "compose-test-token-0123456789",
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var f composeFile
	if err := yaml.Unmarshal([]byte(readFile(t, "compose.yaml")), &f); err != nil {
		t.Fatalf("compose.yaml: %v (depends_on must use the long form with a condition)", err)
	}
	if len(f.Services) == 0 {
		t.Fatal("compose.yaml: no services")
	}
	return f
}

// env returns a service's environment, interpolated.
func env(t *testing.T, name string, s service) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range s.Environment {
		iv, err := interpolate(v, testVars)
		if err != nil {
			t.Errorf("%s: environment %s: %v", name, k, err)
		}
		out[k] = iv
	}
	return out
}

// isFlashgate tells the services that run the flashgate image.
func isFlashgate(s service) bool { return strings.HasPrefix(s.Image, "flashgate:") }

func role(s service) string {
	if len(s.Command) > 0 {
		return s.Command[0]
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
				t.Errorf("%s: want the flashgate image running %q, have image %q command %v", name, r, s.Image, s.Command)
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
			raw := s.Environment["FLASHGATE_ADMIN_TOKEN"]
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
	args := s.Command
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
		has := s.Healthcheck != nil && !s.Healthcheck.Disable && len(s.Healthcheck.Test) > 1
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
		hc := f.Services[name].Healthcheck.Test
		// The image is distroless: exec form, the binary itself.
		if want := []string{"CMD", "/flashgate", "admin", "health"}; !slices.Equal(hc, want) {
			t.Errorf("%s: healthcheck %v, want %v (the image has no shell)", name, hc, want)
		}
	}
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
		for _, p := range s.Ports {
			if name != "nginx" && !loopback(p.hostIP) {
				t.Errorf("%s: container port %s published on %q (every interface); bind it to 127.0.0.1", name, p.target, p.hostIP)
			}
		}
		if isFlashgate(s) && role(s) == "gateway" {
			cfg := settings(t, name, s)
			admin, public := port(t, cfg.Admin.Addr), port(t, cfg.HTTP.Addr)
			var seen bool
			for _, p := range s.Ports {
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
	hc := s.Healthcheck.Test
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
