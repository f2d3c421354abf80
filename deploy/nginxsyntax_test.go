package deploy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// nginx's configuration syntax, enough of it to read nginx.conf's structure
// and to pick a location as nginx does. No library of the module reads it.

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
	if v == "" {
		return 0, fmt.Errorf("empty size")
	}
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

// dump writes a parsed tree back as one line, for comparing in tests:
// `name args;` or `name args { ... }`.
func dump(d *directive) string {
	var b strings.Builder
	for i, c := range d.block {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strings.Join(append([]string{c.name}, c.args...), " "))
		if c.block != nil {
			b.WriteString(" { " + dump(c) + " }")
		} else {
			b.WriteByte(';')
		}
	}
	return b.String()
}

func TestParseNginx(t *testing.T) {
	tests := []struct {
		name, src string
		want      string // dump of the tree; "" with err
		err       bool
	}{
		{name: "directives", src: "worker_processes auto;\npid /run/nginx.pid;", want: "worker_processes auto; pid /run/nginx.pid;"},
		{name: "nested blocks", src: "http { upstream gw { server a:1 max_fails=3; keepalive 8; } server { listen 8080; } }",
			want: "http { upstream gw { server a:1 max_fails=3; keepalive 8; } server { listen 8080; } }"},
		{name: "comments", src: "# top\nevents { # inline\n worker_connections 1024; }\n", want: "events { worker_connections 1024; }"},
		{name: "quoted strings keep blanks and ;", src: `log_format main '$remote_addr "$request";';`, want: `log_format main $remote_addr "$request";;`},
		{name: "empty quoted argument", src: `proxy_set_header Connection "";`, want: "proxy_set_header Connection ;"},
		{name: "escaped quote", src: `return 200 "a\"b";`, want: `return 200 a\"b;`},
		{name: "location modifiers", src: "server { location = /readyz { proxy_pass http://gw; } location ^~ /admin/ { return 404; } }",
			want: "server { location = /readyz { proxy_pass http://gw; } location ^~ /admin/ { return 404; } }"},
		{name: "unclosed quote", src: `return 200 "a;`, err: true},
		{name: "unclosed block", src: "http { server { listen 80; }", err: true},
		{name: "stray }", src: "listen 80; }", err: true},
		{name: "stray ;", src: "http { ; }", err: true},
		{name: "block without a name", src: "{ listen 80; }", err: true},
		{name: "directive without ;", src: "listen 80", err: true},
		{name: "} ends an open directive", src: "http { listen 80 }", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, err := parseNginx(tt.src)
			if tt.err {
				if err == nil {
					t.Fatalf("parsed %q, want an error", dump(root))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := dump(root); got != tt.want {
				t.Fatalf("parsed\n %s\nwant\n %s", got, tt.want)
			}
		})
	}
}

// TestNginxRoute holds route to nginx's rules for choosing a location.
func TestNginxRoute(t *testing.T) {
	root, err := parseNginx(`server {
		location / { return 404; }
		location /v1/ { proxy_pass http://a; }
		location /v1/sales/ { proxy_pass http://b; }
		location = /readyz { proxy_pass http://exact; }
		location ^~ /static/ { return 200; }
		location ~ \.php$ { return 403; }
		location ~* ^/ADMIN/ { return 403; }
		location ~ ^/v1/sales/[^/]+/orders$ { proxy_pass http://buy; }
		location @fallback { return 502; }
	}`)
	if err != nil {
		t.Fatal(err)
	}
	server := root.one(t, "server")
	tests := []struct {
		path string
		want string // the location's arguments
	}{
		{"/readyz", "= /readyz"},
		{"/readyz/x", "/"},                                    // = matches the whole path only
		{"/v1/x", "/v1/"},                                     // longest prefix
		{"/v1/sales/s1", "/v1/sales/"},                        // longer prefix wins
		{"/v1/sales/s1/orders", "~ ^/v1/sales/[^/]+/orders$"}, // a regex beats a plain prefix
		{"/static/x.php", "^~ /static/"},                      // ^~ stops the regex search
		{"/x.php", "~ \\.php$"},
		{"/admin/x", "~* ^/ADMIN/"}, // ~* ignores case
		{"/other", "/"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			l := route(t, server, tt.path)
			if l == nil {
				t.Fatalf("no location, want %q", tt.want)
			}
			if got := strings.Join(l.args, " "); got != tt.want {
				t.Fatalf("location %q, want %q", got, tt.want)
			}
		})
	}
	if l := route(t, &directive{name: "server"}, "/"); l != nil {
		t.Errorf("a server without locations routed / to %v", l.args)
	}
}

func TestNginxSize(t *testing.T) {
	tests := []struct {
		in   string
		want int
		err  bool
	}{
		{in: "4096", want: 4096},
		{in: "4k", want: 4096},
		{in: "4K", want: 4096},
		{in: "1m", want: 1 << 20},
		{in: "2M", want: 2 << 20},
		{in: "k", err: true},
		{in: "4g", err: true},
		{in: "4 k", err: true},
		{in: "", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := nginxSize(tt.in)
			if tt.err {
				if err == nil {
					t.Fatalf("nginxSize(%q) = %d, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("nginxSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}
