package deploy

import (
	"fmt"
	"strings"
	"testing"
)

// Two small syntaxes of compose that a YAML decoder leaves as strings.

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

func TestInterpolate(t *testing.T) {
	vars := map[string]string{"SET": "v", "EMPTY": ""}
	tests := []struct {
		name, in string
		want     string
		err      bool
	}{
		{name: "no variable", in: "redis:6379", want: "redis:6379"},
		{name: "dollar escaped", in: "a$$b", want: "a$b"},
		{name: "set", in: "x${SET}y", want: "xvy"},
		{name: "unset without default", in: "${UNSET}", err: true},
		{name: "empty without default", in: "${EMPTY}", want: ""},
		{name: ":- on unset", in: "${UNSET:-d}", want: "d"},
		{name: ":- on empty", in: "${EMPTY:-d}", want: "d"},
		{name: ":- on set", in: "${SET:-d}", want: "v"},
		{name: "- on unset", in: "${UNSET-d}", want: "d"},
		{name: "- on empty keeps empty", in: "${EMPTY-d}", want: ""},
		{name: "default with colons", in: "${UNSET:-amqp://u:p@h:5672/}", want: "amqp://u:p@h:5672/"},
		{name: ":? on unset", in: "${UNSET:?need it}", err: true},
		{name: ":? on empty", in: "${EMPTY:?need it}", err: true},
		{name: ":? on set", in: "${SET:?need it}", want: "v"},
		{name: "? on empty passes", in: "${EMPTY?need it}", want: ""},
		{name: "? on unset", in: "${UNSET?need it}", err: true},
		{name: "bare $NAME", in: "$SET", err: true},
		{name: "trailing $", in: "a$", err: true},
		{name: "unclosed", in: "${SET", err: true},
		{name: "two in a row", in: "${SET}${UNSET:-w}", want: "vw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := interpolate(tt.in, vars)
			if tt.err {
				if err == nil {
					t.Fatalf("interpolate(%q) = %q, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("interpolate(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

// publish is one published port: the host address it binds ("" for every
// interface) and the container port it reaches.
type publish struct{ hostIP, target string }

// parsePublish reads the short form of a published port:
// [[HOST:]PUBLISHED:]TARGET[/PROTOCOL], HOST an IPv6 address in brackets.
func parsePublish(v string) (publish, error) {
	spec, _, _ := strings.Cut(v, "/")
	var host string
	if strings.HasPrefix(spec, "[") { // [::1]:8081:8081
		end := strings.Index(spec, "]")
		if end < 0 {
			return publish{}, fmt.Errorf("port %q: unclosed [", v)
		}
		host, spec = spec[1:end], strings.TrimPrefix(spec[end+1:], ":")
	}
	parts := strings.Split(spec, ":")
	if len(parts) > 3 {
		return publish{}, fmt.Errorf("port %q: write an IPv6 host in brackets", v)
	}
	if len(parts) == 3 {
		host = parts[0]
	}
	if parts[len(parts)-1] == "" {
		return publish{}, fmt.Errorf("port %q: no container port", v)
	}
	return publish{hostIP: host, target: parts[len(parts)-1]}, nil
}

func TestParsePublish(t *testing.T) {
	tests := []struct {
		in   string
		want publish
		err  bool
	}{
		{in: "8080", want: publish{"", "8080"}},
		{in: "8080:80", want: publish{"", "80"}},
		{in: "8080:80/tcp", want: publish{"", "80"}},
		{in: "127.0.0.1:8081:8081", want: publish{"127.0.0.1", "8081"}},
		{in: "127.0.0.1::8081", want: publish{"127.0.0.1", "8081"}},
		{in: "0.0.0.0:8080:8080/udp", want: publish{"0.0.0.0", "8080"}},
		{in: "[::1]:8081:8081", want: publish{"::1", "8081"}},
		{in: "[::]:8080:8080/tcp", want: publish{"::", "8080"}},
		{in: "[::1:8081:8081", err: true},
		{in: "::1:8081:8081", err: true},
		{in: "8080:", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parsePublish(tt.in)
			if tt.err {
				if err == nil {
					t.Fatalf("parsePublish(%q) = %+v, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parsePublish(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}
