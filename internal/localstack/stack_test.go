package localstack

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/flashgate/flashgate/config"
)

// envLine is what both bash (sourcing it) and parseEnv read the same way:
// a name, =, and a value without quotes, blanks, $, backslashes or
// backquotes.
var envLine = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=([^\s'"$\\` + "`" + `]*)$`)

// parseEnv reads a stack.env: KEY=VALUE lines, blank lines and # comments.
// Anything else is an error, so that the tests never read a value other
// than the one the scripts get.
func parseEnv(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		m := envLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q: want KEY=VALUE, the value without quotes, blanks or $", n, line)
		}
		if _, dup := out[m[1]]; dup {
			return nil, fmt.Errorf("line %d: %s declared twice", n, m[1])
		}
		out[m[1]] = m[2]
	}
	return out, sc.Err()
}

func TestParseEnv(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want map[string]string // nil: an error
	}{
		{name: "pairs, comments and blank lines", src: "# c\nA=1\n\n  # indented comment\nB_2=x:y/z@w\n",
			want: map[string]string{"A": "1", "B_2": "x:y/z@w"}},
		{name: "empty value", src: "A=\n", want: map[string]string{"A": ""}},
		{name: "empty file", src: "", want: map[string]string{}},
		{name: "quoted value", src: "A='1'\n"},
		{name: "double-quoted value", src: "A=\"1\"\n"},
		{name: "expansion", src: "A=$HOME\n"},
		{name: "command substitution", src: "A=`id`\n"},
		{name: "blank in value", src: "A=1 2\n"},
		{name: "blank around =", src: "A = 1\n"},
		{name: "export", src: "export A=1\n"},
		{name: "no =", src: "A\n"},
		{name: "bad name", src: "1A=1\n"},
		{name: "declared twice", src: "A=1\nA=2\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEnv(strings.NewReader(tt.src))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("parsed %v, want an error", got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// stackEnv reads deploy/local/stack.env.
func stackEnv(t *testing.T) map[string]string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "deploy", "local", "stack.env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env, err := parseEnv(f)
	if err != nil {
		t.Fatalf("deploy/local/stack.env: %v", err)
	}
	return env
}

// TestDefaultsAreTheLocalStack holds config's defaults, which a flashgate
// started with no settings uses and through them every test, to the stack
// that deploy/local starts: same ports, same credentials.
func TestDefaultsAreTheLocalStack(t *testing.T) {
	env := stackEnv(t)
	get := func(k string) string {
		v, ok := env[k]
		if !ok || v == "" {
			t.Fatalf("deploy/local/stack.env: no %s", k)
		}
		return v
	}
	def := config.Default()

	if want := []string{"127.0.0.1:" + get("FG_REDIS_PORT")}; !reflect.DeepEqual(def.Redis.Addrs, want) {
		t.Errorf("config: redis.addrs %v, stack.env says %v", def.Redis.Addrs, want)
	}

	u, err := url.Parse(def.AMQP.URL)
	if err != nil {
		t.Fatalf("config: amqp.url: %v", err)
	}
	pass, _ := u.User.Password()
	if u.Scheme != "amqp" || u.Host != "127.0.0.1:"+get("FG_RABBITMQ_PORT") ||
		u.User.Username() != get("FG_RABBITMQ_USER") || pass != get("FG_RABBITMQ_PASSWORD") {
		t.Errorf("config: amqp.url %s, stack.env says amqp://%s:%s@127.0.0.1:%s/", def.AMQP.URL,
			get("FG_RABBITMQ_USER"), get("FG_RABBITMQ_PASSWORD"), get("FG_RABBITMQ_PORT"))
	}

	dc, err := mysql.ParseDSN(def.MySQL.DSN)
	if err != nil {
		t.Fatalf("config: mysql.dsn: %v", err)
	}
	if dc.Net != "tcp" || dc.Addr != "127.0.0.1:"+get("FG_MARIADB_PORT") || dc.DBName != get("FG_MARIADB_DB") ||
		dc.User != get("FG_MARIADB_USER") || dc.Passwd != get("FG_MARIADB_PASSWORD") {
		t.Errorf("config: mysql.dsn %s, stack.env says %s:%s@tcp(127.0.0.1:%s)/%s", def.MySQL.DSN,
			get("FG_MARIADB_USER"), get("FG_MARIADB_PASSWORD"), get("FG_MARIADB_PORT"), get("FG_MARIADB_DB"))
	}
}
