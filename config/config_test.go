package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate/config"
)

// apiDefaults is the settings table of API.md, copied by hand on purpose: a
// change of a documented default has to change this test too.
var apiDefaults = map[string]string{
	"FLASHGATE_HTTP_ADDR":      "127.0.0.1:8080",
	"FLASHGATE_ADMIN_ADDR":     "127.0.0.1:8081",
	"FLASHGATE_ADMIN_TOKEN":    "",
	"FLASHGATE_REDIS_ADDRS":    "127.0.0.1:6379",
	"FLASHGATE_REDIS_PASSWORD": "",
	"FLASHGATE_AMQP_URL":       "amqp://guest:guest@127.0.0.1:5672/",
	"FLASHGATE_MYSQL_DSN":      "flashgate:flashgate@tcp(127.0.0.1:3306)/flashgate?parseTime=true",
	"FLASHGATE_SCRIPTS_DIR":    "",
	"FLASHGATE_REDIS_TIMEOUT":  "500ms",
	"FLASHGATE_MAX_BODY_BYTES": "4096",
	"FLASHGATE_LOG_LEVEL":      "info",

	"FLASHGATE_BUYER_JWT_SECRET":   "",
	"FLASHGATE_BUYER_JWT_KEY_FILE": "",
}

const (
	token16  = "0123456789abcdef"
	secret32 = "0123456789abcdef0123456789abcdef"
)

// env returns a getenv that knows only kv (name, value, name, value, …).
func env(kv ...string) func(string) string {
	if len(kv)%2 != 0 {
		panic("env: odd number of arguments")
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(name string) string { return m[name] }
}

// writeYAML writes body to a fresh file and returns its path.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "flashgate.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigDefaults(t *testing.T) {
	c, err := config.Load("", env())
	if err != nil {
		t.Fatalf("Load with no file and no variables: %v", err)
	}
	if d := config.Default(); !reflect.DeepEqual(c, d) {
		t.Errorf("Load(\"\", empty env) = %+v, want Default() = %+v", c, d)
	}
	tests := []struct {
		env  string
		got  any
		want any
	}{
		{"FLASHGATE_HTTP_ADDR", c.HTTP.Addr, "127.0.0.1:8080"},
		{"FLASHGATE_ADMIN_ADDR", c.Admin.Addr, "127.0.0.1:8081"},
		{"FLASHGATE_ADMIN_TOKEN", c.Admin.Token, ""},
		{"FLASHGATE_REDIS_ADDRS", c.Redis.Addrs, []string{"127.0.0.1:6379"}},
		{"FLASHGATE_REDIS_PASSWORD", c.Redis.Password, ""},
		{"FLASHGATE_AMQP_URL", c.AMQP.URL, "amqp://guest:guest@127.0.0.1:5672/"},
		{"FLASHGATE_MYSQL_DSN", c.MySQL.DSN, "flashgate:flashgate@tcp(127.0.0.1:3306)/flashgate?parseTime=true"},
		{"FLASHGATE_SCRIPTS_DIR", c.Scripts.Dir, ""},
		{"FLASHGATE_REDIS_TIMEOUT", c.Redis.Timeout, 500 * time.Millisecond},
		{"FLASHGATE_MAX_BODY_BYTES", c.HTTP.MaxBodyBytes, 4096},
		{"FLASHGATE_LOG_LEVEL", c.Log.Level, "info"},
		{"FLASHGATE_BUYER_JWT_SECRET", c.Buyer.JWTSecret, ""},
		{"FLASHGATE_BUYER_JWT_KEY_FILE", c.Buyer.JWTKeyFile, ""},
	}
	if c.Buyer.On() {
		t.Error("buyer authentication is on by default; API.md has it off")
	}
	if len(tests) != len(apiDefaults) {
		t.Fatalf("%d rows for the %d settings of API.md", len(tests), len(apiDefaults))
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("default %s = %#v, want %#v (API.md)", tt.env, tt.got, tt.want)
			}
		})
	}
}

func TestConfigEnv(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		got   func(c *config.Config) any
		want  any
		notes string
	}{
		{name: "http addr", env: []string{"FLASHGATE_HTTP_ADDR", "0.0.0.0:9000"},
			got: func(c *config.Config) any { return c.HTTP.Addr }, want: "0.0.0.0:9000"},
		{name: "admin addr", env: []string{"FLASHGATE_ADMIN_ADDR", "127.0.0.1:9001"},
			got: func(c *config.Config) any { return c.Admin.Addr }, want: "127.0.0.1:9001"},
		{name: "admin addr ipv6 loopback without token", env: []string{"FLASHGATE_ADMIN_ADDR", "[::1]:9001"},
			got: func(c *config.Config) any { return c.Admin.Addr }, want: "[::1]:9001"},
		{name: "admin addr public with token", env: []string{"FLASHGATE_ADMIN_ADDR", "0.0.0.0:8081", "FLASHGATE_ADMIN_TOKEN", token16},
			got: func(c *config.Config) any { return [2]string{c.Admin.Addr, c.Admin.Token} }, want: [2]string{"0.0.0.0:8081", token16}},
		{name: "admin token", env: []string{"FLASHGATE_ADMIN_TOKEN", token16 + "xyz"},
			got: func(c *config.Config) any { return c.Admin.Token }, want: token16 + "xyz"},
		{name: "admin token of every printable kind", env: []string{"FLASHGATE_ADMIN_TOKEN", "A-z0_9.~+/=!#$%&'*^`|"},
			got: func(c *config.Config) any { return c.Admin.Token }, want: "A-z0_9.~+/=!#$%&'*^`|"},
		{name: "admin token read from a file keeps no newline", env: []string{"FLASHGATE_ADMIN_TOKEN", token16 + "\n"},
			got: func(c *config.Config) any { return c.Admin.Token }, want: token16},
		{name: "buyer jwt secret", env: []string{"FLASHGATE_BUYER_JWT_SECRET", secret32},
			got: func(c *config.Config) any { return []any{c.Buyer.JWTSecret, c.Buyer.On()} }, want: []any{secret32, true}},
		{name: "redis addrs one", env: []string{"FLASHGATE_REDIS_ADDRS", "10.0.0.1:7000"},
			got: func(c *config.Config) any { return c.Redis.Addrs }, want: []string{"10.0.0.1:7000"}},
		{name: "redis addrs cluster with spaces", env: []string{"FLASHGATE_REDIS_ADDRS", "10.0.0.1:7000, 10.0.0.2:7001 ,10.0.0.3:7002"},
			got: func(c *config.Config) any { return c.Redis.Addrs }, want: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}},
		{name: "redis password", env: []string{"FLASHGATE_REDIS_PASSWORD", "pw"},
			got: func(c *config.Config) any { return c.Redis.Password }, want: "pw"},
		{name: "redis timeout", env: []string{"FLASHGATE_REDIS_TIMEOUT", "2s"},
			got: func(c *config.Config) any { return c.Redis.Timeout }, want: 2 * time.Second},
		{name: "redis timeout lowest", env: []string{"FLASHGATE_REDIS_TIMEOUT", "1ms"},
			got: func(c *config.Config) any { return c.Redis.Timeout }, want: time.Millisecond},
		{name: "redis timeout highest", env: []string{"FLASHGATE_REDIS_TIMEOUT", "1m"},
			got: func(c *config.Config) any { return c.Redis.Timeout }, want: time.Minute},
		{name: "amqp url", env: []string{"FLASHGATE_AMQP_URL", "amqps://u:p@rabbit:5671/vh"},
			got: func(c *config.Config) any { return c.AMQP.URL }, want: "amqps://u:p@rabbit:5671/vh"},
		{name: "mysql dsn", env: []string{"FLASHGATE_MYSQL_DSN", "u:p@tcp(db:3306)/orders"},
			got: func(c *config.Config) any { return c.MySQL.DSN }, want: "u:p@tcp(db:3306)/orders"},
		{name: "scripts dir", env: []string{"FLASHGATE_SCRIPTS_DIR", "/srv/lua"},
			got: func(c *config.Config) any { return c.Scripts.Dir }, want: "/srv/lua"},
		{name: "max body bytes lowest", env: []string{"FLASHGATE_MAX_BODY_BYTES", "64"},
			got: func(c *config.Config) any { return c.HTTP.MaxBodyBytes }, want: 64},
		{name: "max body bytes highest", env: []string{"FLASHGATE_MAX_BODY_BYTES", "1048576"},
			got: func(c *config.Config) any { return c.HTTP.MaxBodyBytes }, want: 1 << 20},
		{name: "log level", env: []string{"FLASHGATE_LOG_LEVEL", "debug"},
			got: func(c *config.Config) any { return c.Log.Level }, want: "debug"},
		{name: "key prefix", env: []string{"FLASHGATE_REDIS_KEY_PREFIX", "shop-2.eu_1"},
			got: func(c *config.Config) any { return c.Redis.KeyPrefix }, want: "shop-2.eu_1"},
		{name: "max conns derived by default", env: nil,
			got: func(c *config.Config) any { return [2]int{c.HTTP.MaxConns, c.HTTP.MaxConnsPerIP} }, want: [2]int{0, 0}},
		{name: "max conns zero is derived", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "0"},
			got: func(c *config.Config) any { return c.HTTP.MaxConns }, want: 0},
		{name: "max conns lowest", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "16"},
			got: func(c *config.Config) any { return c.HTTP.MaxConns }, want: 16},
		{name: "max conns highest", env: []string{"FLASHGATE_HTTP_MAX_CONNS", "10000000"},
			got: func(c *config.Config) any { return c.HTTP.MaxConns }, want: 10_000_000},
		{name: "max conns per ip", env: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "64"},
			got: func(c *config.Config) any { return c.HTTP.MaxConnsPerIP }, want: 64},
		{name: "max conns per ip highest", env: []string{"FLASHGATE_HTTP_MAX_CONNS_PER_IP", "1000000"},
			got: func(c *config.Config) any { return c.HTTP.MaxConnsPerIP }, want: 1_000_000},
		{name: "empty variable is unset", env: []string{"FLASHGATE_HTTP_ADDR", "", "FLASHGATE_REDIS_TIMEOUT", ""},
			got: func(c *config.Config) any { return fmt.Sprint(c.HTTP.Addr, " ", c.Redis.Timeout) }, want: "127.0.0.1:8080 500ms"},
		{name: "both listeners on port 0", env: []string{"FLASHGATE_HTTP_ADDR", "127.0.0.1:0", "FLASHGATE_ADMIN_ADDR", "127.0.0.1:0"},
			got: func(c *config.Config) any { return c.HTTP.Addr + " " + c.Admin.Addr }, want: "127.0.0.1:0 127.0.0.1:0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load("", env(tt.env...))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestConfigYAML(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		got  func(c *config.Config) any
		want any
	}{
		{name: "every documented section",
			yaml: `
http:
  addr: 127.0.0.1:9080
  max_body_bytes: 8192
admin:
  addr: 127.0.0.1:9081
  token: ` + token16 + `
redis:
  addrs: 10.0.0.1:6379
  password: pw
  timeout: 250ms
amqp:
  url: amqp://u:p@rabbit:5672/
mysql:
  dsn: u:p@tcp(db:3306)/orders
scripts:
  dir: /srv/lua
log:
  level: warn
`,
			got: func(c *config.Config) any {
				return []any{c.HTTP.Addr, c.HTTP.MaxBodyBytes, c.Admin.Addr, c.Admin.Token, c.Redis.Addrs,
					c.Redis.Password, c.Redis.Timeout, c.AMQP.URL, c.MySQL.DSN, c.Scripts.Dir, c.Log.Level}
			},
			want: []any{"127.0.0.1:9080", 8192, "127.0.0.1:9081", token16, []string{"10.0.0.1:6379"},
				"pw", 250 * time.Millisecond, "amqp://u:p@rabbit:5672/", "u:p@tcp(db:3306)/orders", "/srv/lua", "warn"}},
		{name: "redis addrs as a list",
			yaml: "redis:\n  addrs:\n    - 10.0.0.1:7000\n    - 10.0.0.2:7001\n",
			got:  func(c *config.Config) any { return c.Redis.Addrs },
			want: []string{"10.0.0.1:7000", "10.0.0.2:7001"}},
		{name: "redis addrs as a flow list",
			yaml: "redis:\n  addrs: [10.0.0.1:7000, 10.0.0.2:7001]\n",
			got:  func(c *config.Config) any { return c.Redis.Addrs },
			want: []string{"10.0.0.1:7000", "10.0.0.2:7001"}},
		{name: "redis addrs as a comma string",
			yaml: "redis:\n  addrs: 10.0.0.1:7000,10.0.0.2:7001, 10.0.0.3:7002\n",
			got:  func(c *config.Config) any { return c.Redis.Addrs },
			want: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}},
		{name: "durations",
			yaml: "redis:\n  timeout: 500ms\nshutdown:\n  drain_delay: 0s\n  timeout: 1m30s\n",
			got: func(c *config.Config) any {
				return []time.Duration{c.Redis.Timeout, c.Shutdown.DrainDelay, c.Shutdown.Timeout}
			},
			want: []time.Duration{500 * time.Millisecond, 0, 90 * time.Second}},
		{name: "connection limits",
			yaml: "http:\n  max_conns: 5000\n  max_conns_per_ip: 32\n",
			got:  func(c *config.Config) any { return [2]int{c.HTTP.MaxConns, c.HTTP.MaxConnsPerIP} },
			want: [2]int{5000, 32}},
		{name: "quoted values",
			yaml: "http:\n  addr: \"127.0.0.1:9080\"\n  max_body_bytes: '2048'\n",
			got:  func(c *config.Config) any { return []any{c.HTTP.Addr, c.HTTP.MaxBodyBytes} },
			want: []any{"127.0.0.1:9080", 2048}},
		{name: "env overrides yaml",
			yaml: "redis:\n  timeout: 250ms\n  addrs: [10.0.0.1:7000]\nlog:\n  level: warn\n",
			env:  []string{"FLASHGATE_REDIS_TIMEOUT", "750ms", "FLASHGATE_REDIS_ADDRS", "10.0.0.9:7009"},
			got:  func(c *config.Config) any { return []any{c.Redis.Timeout, c.Redis.Addrs, c.Log.Level} },
			want: []any{750 * time.Millisecond, []string{"10.0.0.9:7009"}, "warn"}},
		{name: "env rescues a bad yaml pair",
			// http and admin equal in the file, told apart by the environment:
			// Validate runs after both sources, not after the file alone.
			yaml: "http:\n  addr: 127.0.0.1:9000\nadmin:\n  addr: 127.0.0.1:9000\n",
			env:  []string{"FLASHGATE_ADMIN_ADDR", "127.0.0.1:9001"},
			got:  func(c *config.Config) any { return c.Admin.Addr },
			want: "127.0.0.1:9001"},
		{name: "unset variables keep yaml secrets",
			yaml: "admin:\n  addr: 0.0.0.0:8081\n  token: " + token16 + "\nredis:\n  password: pw\n",
			got:  func(c *config.Config) any { return []string{c.Admin.Addr, c.Admin.Token, c.Redis.Password} },
			want: []string{"0.0.0.0:8081", token16, "pw"}},
		{name: "empty file",
			yaml: "",
			got:  func(c *config.Config) any { return c },
			want: config.Default()},
		{name: "comments only",
			yaml: "# nothing set here\n",
			got:  func(c *config.Config) any { return c },
			want: config.Default()},
		{name: "null value is empty",
			yaml: "scripts:\n  dir:\nadmin:\n  token: ~\n",
			got:  func(c *config.Config) any { return c.Scripts.Dir + "|" + c.Admin.Token },
			want: "|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load(writeYAML(t, tt.yaml), env(tt.env...))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := tt.got(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

// Zero-loss mode is off unless asked for, from either source.
func TestZeroLossSetting(t *testing.T) {
	if config.Default().Redis.ZeroLoss {
		t.Fatal("redis.zero_loss is on by default")
	}
	for _, tt := range []struct {
		name, yaml string
		env        []string
		want       bool
	}{
		{name: "env true", env: []string{"FLASHGATE_REDIS_ZERO_LOSS", "true"}, want: true},
		{name: "env TRUE", env: []string{"FLASHGATE_REDIS_ZERO_LOSS", " TRUE "}, want: true},
		{name: "yaml true", yaml: "redis:\n  zero_loss: true\n", want: true},
		{name: "env false over yaml true", yaml: "redis:\n  zero_loss: true\n", env: []string{"FLASHGATE_REDIS_ZERO_LOSS", "false"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeYAML(t, tt.yaml)
			}
			c, err := config.Load(path, env(tt.env...))
			if err != nil {
				t.Fatal(err)
			}
			if c.Redis.ZeroLoss != tt.want {
				t.Errorf("redis.zero_loss = %v, want %v", c.Redis.ZeroLoss, tt.want)
			}
			if got := c.Fields()["redis.zero_loss"]; got != strconv.FormatBool(tt.want) {
				t.Errorf("Fields: redis.zero_loss = %q", got)
			}
		})
	}
}
