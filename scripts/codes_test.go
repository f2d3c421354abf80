package scripts

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// codeConst is a declaration of an outcome code at the top of a script:
// "local SOLD_OUT = 6", unindented, with an optional trailing comment.
var codeConst = regexp.MustCompile(`^local ([A-Z][A-Z0-9_]*)\s*=\s*(-?[0-9]+)\s*$`)

// bareCode finds a number standing where a code goes: returned (alone or as
// a table's first element), passed to view (admin's reply builder), or
// assigned to or compared with the variable code (reserve's).
var bareCode = []*regexp.Regexp{
	regexp.MustCompile(`\breturn\s*\{?\s*-?[0-9]`),
	regexp.MustCompile(`\bview\s*\(\s*-?[0-9]`),
	regexp.MustCompile(`\bcode\s*(,\s*[A-Za-z_][A-Za-z0-9_]*\s*)*=\s*-?[0-9]`),
	regexp.MustCompile(`\bcode\s*[~=]=\s*-?[0-9]`),
}

// luaCodes reads the outcome codes a script declares and reports every line
// that returns a code as a bare number, or declares one twice.
func luaCodes(src string) (codes map[string]int64, problems []string) {
	codes = map[string]int64{}
	values := map[int64]string{}
	for i, line := range strings.Split(src, "\n") {
		code := luaCode(line)
		if m := codeConst.FindStringSubmatch(code); m != nil {
			n, _ := strconv.ParseInt(m[2], 10, 64)
			if _, dup := codes[m[1]]; dup {
				problems = append(problems, fmt.Sprintf("line %d: %s declared twice", i+1, m[1]))
			}
			if other, dup := values[n]; dup {
				problems = append(problems, fmt.Sprintf("line %d: %s and %s are both %d", i+1, other, m[1], n))
			}
			codes[m[1]], values[n] = n, m[1]
			continue
		}
		for _, re := range bareCode {
			if re.MatchString(code) {
				problems = append(problems, fmt.Sprintf("line %d: a bare number as a code: %s", i+1, strings.TrimSpace(line)))
				break
			}
		}
	}
	return codes, problems
}

// luaCode is a line of Lua without its comment and with its strings
// emptied, so that neither is read as code.
func luaCode(line string) string {
	var b strings.Builder
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				b.WriteByte(c)
				quote = 0
			}
		case c == '\'' || c == '"':
			b.WriteByte(c)
			quote = c
		case c == '-' && i+1 < len(line) && line[i+1] == '-':
			return strings.TrimRight(b.String(), " \t")
		default:
			b.WriteByte(c)
		}
	}
	return strings.TrimRight(b.String(), " \t")
}

// The checker itself: each kind of bare code is caught, named codes pass.
func TestLuaCodesChecker(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		codes    map[string]int64
		problems int
	}{
		{"named", "local OK = 0\nlocal SOLD_OUT = 6 -- none left\nlocal code = OK\nif code ~= OK then return view(SOLD_OUT) end\nreturn {code, 'x'}",
			map[string]int64{"OK": 0, "SOLD_OUT": 6}, 0},
		{"return number", "return 3", map[string]int64{}, 1},
		{"return table of a number", "return {0, created}", map[string]int64{}, 1},
		{"view of a number", "if x then return view(12) end", map[string]int64{}, 1},
		{"assigned", "code = 5", map[string]int64{}, 1},
		{"assigned with another", "code, rid = 8, ''", map[string]int64{}, 1},
		{"declared local", "local code, rid = -1, oid", map[string]int64{}, 1},
		{"compared", "if code == 0 then x() end", map[string]int64{}, 1},
		{"compared unequal", "if code ~= 0 then x() end", map[string]int64{}, 1},
		{"in a comment", "-- return 3\nlocal n = 0 -- code = 2", map[string]int64{}, 0},
		{"in a string", "redis.call('SET', k, 'return 1')", map[string]int64{}, 0},
		{"a count is no code", "local n = 0\nn = n + 1\nreturn n", map[string]int64{}, 0},
		{"declared twice", "local OK = 0\nlocal OK = 0", map[string]int64{"OK": 0}, 2},
		{"two names, one value", "local OK = 0\nlocal FINE = 0", map[string]int64{"OK": 0, "FINE": 0}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			codes, problems := luaCodes(tc.src)
			if len(problems) != tc.problems {
				t.Errorf("problems %q, want %d", problems, tc.problems)
			}
			if fmt.Sprint(codes) != fmt.Sprint(tc.codes) {
				t.Errorf("codes %v, want %v", codes, tc.codes)
			}
		})
	}
}

// Invariant 7 (and every outcome the gateway answers): a code the gateway
// reads differently from the script that wrote it turns a refusal into a
// 202, or the reverse. The shipped scripts (the embedded copies) name every
// code they return; each name has the value the Go side gives it; each Go
// code is returned by some script.
func TestShippedLuaCodes(t *testing.T) {
	files, err := fs.Glob(builtin, "lua/*.lua")
	var want []string
	for _, name := range append(Names(), Remove, Remarked) {
		want = append(want, "lua/"+name+".lua")
	}
	slices.Sort(want)
	if err != nil || !slices.Equal(files, want) {
		t.Fatalf("embedded scripts %v (%v), want %v: the set, remove and remarked", files, err, want)
	}
	used := map[Code]bool{}
	for _, f := range files {
		src, err := builtin.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		codes, problems := luaCodes(string(src))
		for _, p := range problems {
			t.Errorf("%s %s", f, p)
		}
		for name, n := range codes {
			c := Code(n)
			if !c.Known() || c.String() != name {
				t.Errorf("%s: %s = %d, but Go has %d as %s", f, name, n, n, c)
			}
			used[c] = true
		}
	}
	for c := Code(0); c.Known(); c++ {
		if !used[c] {
			t.Errorf("Go code %s (%d) is declared by no script", c, c)
		}
	}
	// Each script that answers codes declares OK: one that did not would
	// answer success with a bare number.
	for _, name := range []string{Reserve, Admin, Order} {
		src, err := builtin.ReadFile("lua/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		codes, _ := luaCodes(string(src))
		if _, ok := codes[CodeOK.String()]; !ok || len(codes) < 2 {
			t.Errorf("%s.lua declares no %s, or no other code: %v", name, CodeOK, codes)
		}
	}
}

func TestCodeString(t *testing.T) {
	if s := CodeSoldOut.String(); s != "SOLD_OUT" {
		t.Errorf("CodeSoldOut = %q", s)
	}
	if s := Code(99).String(); s != "code 99" || Code(99).Known() || Code(-1).Known() {
		t.Errorf("Code(99) = %q", s)
	}
}
