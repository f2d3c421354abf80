package deploy

import (
	"bufio"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The Dockerfile's syntax, enough of it for ../Dockerfile: instructions
// with their continuation lines, and the shell words of a simple RUN or
// FROM line. No library of the module reads it.

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, rest string
}

// parseDockerfile splits a Dockerfile into its instructions, the command
// upper-cased, comments and blank lines skipped. A continuation at the end
// of the file is an error.
func parseDockerfile(src string) ([]instruction, error) {
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
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
	if cur.Len() > 0 {
		return nil, fmt.Errorf("the last instruction ends with a continuation: %q", cur.String())
	}
	return out, sc.Err()
}

func TestParseDockerfile(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []instruction // nil: an error
	}{
		{name: "one per line, command upper-cased", src: "FROM a AS b\nrun go build\n",
			want: []instruction{{"FROM", "a AS b"}, {"RUN", "go build"}}},
		{name: "comments and blank lines", src: "# c\n\nUSER nonroot\n  # indented\n",
			want: []instruction{{"USER", "nonroot"}}},
		{name: "continuation lines joined", src: "RUN A=1 \\\n    go build \\\n  -o /out/x .\nCMD [\"x\"]\n",
			want: []instruction{{"RUN", "A=1  go build  -o /out/x ."}, {"CMD", `["x"]`}}},
		{name: "comment inside a continuation", src: "RUN a \\\n# note\n  b\n",
			want: []instruction{{"RUN", "a  b"}}},
		{name: "no argument", src: "HEALTHCHECK\n", want: []instruction{{"HEALTHCHECK", ""}}},
		{name: "continuation at the end", src: "RUN a \\\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDockerfile(tt.src)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("parsed %q, want an error", got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
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

func TestShellWords(t *testing.T) {
	vars := map[string]string{"GOOS": "linux", "V": "v1 2"}
	tests := []struct {
		name string
		in   string
		want []string // nil: an error
	}{
		{name: "blanks", in: " go  build\t-o x ", want: []string{"go", "build", "-o", "x"}},
		{name: "single quotes keep everything", in: `'a $V \b' c`, want: []string{`a $V \b`, "c"}},
		{name: "double quotes join blanks and expand", in: `"-X main.v=$V" x`, want: []string{"-X main.v=v1 2", "x"}},
		{name: "quotes inside a word", in: `a"b c"d`, want: []string{"ab cd"}},
		{name: "empty quotes are a word", in: `a "" b`, want: []string{"a", "", "b"}},
		{name: "backslash escapes", in: `a\ b \$V`, want: []string{"a b", "$V"}},
		{name: "braced variable", in: "GOOS=${GOOS}x", want: []string{"GOOS=linuxx"}},
		{name: "bare variable ends at a non-name byte", in: "$GOOS/x", want: []string{"linux/x"}},
		{name: "unknown variable", in: "$NOPE"},
		{name: "unclosed brace", in: "${GOOS"},
		{name: "unclosed quote", in: `"a b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := shellWords(tt.in, vars)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("shellWords(%q) = %q, want an error", tt.in, got)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("shellWords(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}
