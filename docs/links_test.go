// Package docs holds no code: its tests check the Markdown beside them and
// the README above them, so that a page moved, renamed or retitled fails a
// test instead of a reader's link. Every relative link must name a file or
// folder of the repository, and every #anchor a heading of the page it
// points into, spelled as GitHub spells heading anchors.
package docs

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// Every relative link and #anchor of README.md and docs/*.md resolves.
func TestLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "README.md"))
	s := newSite("..")
	checked := 0
	for _, f := range files {
		problems, n, err := s.check(f)
		if err != nil {
			t.Fatal(err)
		}
		checked += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	// The README alone links more than this; fewer means the parser lost them.
	if checked < 10 {
		t.Errorf("only %d links found in %d pages", checked, len(files))
	}
}

// The check fails on what it is there to catch.
func TestLinkProblemsReported(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\n[ok](docs/a.md#part-one) [ok](#top) [ok](docs/)\n"+
		"[gone](docs/missing.md)\n[bad anchor](docs/a.md#part-two)\n[bad self](#nowhere)\n"+
		"[outside](../elsewhere.md)\n[absolute](/docs/a.md)\n[anchor in code](main.go#L1)\n"+
		"[external](https://example.com/x#y)\n")
	write("docs/a.md", "# A\n\n## Part one\n\n[up](../README.md#top)\n")
	write("main.go", "package main\n")

	problems, n, err := newSite(root).check(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n != 10 {
		t.Errorf("%d links found, want 10", n)
	}
	for _, want := range []string{"docs/missing.md", "#part-two", "#nowhere", "../elsewhere.md", "/docs/a.md", "main.go#L1"} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem reported for %s; got %q", want, problems)
		}
	}
	if len(problems) != 6 {
		t.Errorf("%d problems, want 6: %q", len(problems), problems)
	}
}

func TestAnchor(t *testing.T) {
	for _, tc := range []struct{ name, heading, want string }{
		{name: "words", heading: "Scaling out", want: "scaling-out"},
		{name: "punctuation dropped", heading: "Durability: what Redis persistence bounds", want: "durability-what-redis-persistence-bounds"},
		{name: "code span keeps its text", heading: "Load testing: `flashgate bench`", want: "load-testing-flashgate-bench"},
		{name: "link keeps its text", heading: "See [the table](x.md)", want: "see-the-table"},
		{name: "hyphens and underscores kept", heading: "per_user-limit", want: "per_user-limit"},
		{name: "every space counts", heading: "a, b and  c", want: "a-b-and--c"},
		{name: "digits and accents", heading: "Étape 2 → 3", want: "étape-2--3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := anchor(tc.heading); got != tc.want {
				t.Errorf("anchor(%q) = %q, want %q", tc.heading, got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	text := "# Title\n\nSee [a](a.md) and ![img](i.png \"title\") and `[not](code.md)`.\n\n" +
		"```sh\n# not a heading\ncurl [x](fenced.md)\n```\n\n" +
		"## Title\n\n[ref]: ref.md\n[two](b.md#x) [three](<c d.md>)\n"
	p := parse(text)
	var got []string
	for _, l := range p.links {
		got = append(got, strconv.Itoa(l.line)+":"+l.target)
	}
	want := []string{"3:a.md", "3:i.png", "12:ref.md", "13:b.md#x", "13:c d.md"}
	if !slices.Equal(got, want) {
		t.Errorf("links %q, want %q", got, want)
	}
	for _, a := range []string{"title", "title-1"} {
		if !p.anchors[a] {
			t.Errorf("no anchor %q in %v", a, p.anchors)
		}
	}
	if p.anchors["not-a-heading"] {
		t.Error("a comment in a code block counted as a heading")
	}
}

// site checks the pages of one repository, parsing each page once.
type site struct {
	root  string // the repository root; no link may leave it
	pages map[string]*page
}

func newSite(root string) *site {
	return &site{root: root, pages: make(map[string]*page)}
}

// page is what a Markdown file offers and asks: its anchors and its links.
type page struct {
	anchors map[string]bool
	links   []link
}

type link struct {
	line   int
	target string
}

func (s *site) load(path string) (*page, error) {
	path = filepath.Clean(path)
	if p, ok := s.pages[path]; ok {
		return p, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := parse(string(raw))
	s.pages[path] = p
	return p, nil
}

// check returns one line per link of the page at path that does not
// resolve, and how many links it checked. The error is for a page it cannot
// read.
func (s *site) check(path string) (problems []string, checked int, err error) {
	p, err := s.load(path)
	if err != nil {
		return nil, 0, err
	}
	for _, l := range p.links {
		if problem := s.resolve(path, l.target); problem != "" {
			problems = append(problems, path+":"+strconv.Itoa(l.line)+": "+l.target+": "+problem)
		}
	}
	return problems, len(p.links), nil
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// resolve says what is wrong with one link of the page at from, or "".
func (s *site) resolve(from, target string) string {
	if scheme.MatchString(target) {
		return "" // another site's: not ours to check
	}
	if strings.HasPrefix(target, "/") {
		return "absolute path: write it relative to the page"
	}
	file, frag, _ := strings.Cut(target, "#")
	file, err := url.PathUnescape(file)
	if err != nil {
		return "bad escape: " + err.Error()
	}
	dest := from
	if file != "" {
		dest = filepath.Join(filepath.Dir(from), filepath.FromSlash(file))
	}
	rel, err := relative(s.root, dest)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "outside the repository"
	}
	if _, err := os.Stat(dest); err != nil {
		return "no such file"
	}
	if frag == "" {
		return ""
	}
	if filepath.Ext(dest) != ".md" {
		return "an anchor into a file that is not Markdown"
	}
	frag, err = url.PathUnescape(frag)
	if err != nil {
		return "bad escape: " + err.Error()
	}
	p, err := s.load(dest)
	if err != nil {
		return err.Error()
	}
	if !p.anchors[frag] {
		return "no heading has the anchor #" + frag
	}
	return ""
}

// relative is filepath.Rel for paths that may be relative to the working
// directory, which filepath.Rel cannot climb out of on its own.
func relative(base, target string) (string, error) {
	base, err := filepath.Abs(base)
	if err != nil {
		return "", err
	}
	target, err = filepath.Abs(target)
	if err != nil {
		return "", err
	}
	return filepath.Rel(base, target)
}

var (
	fence      = regexp.MustCompile("^ {0,3}(```|~~~)")
	heading    = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*$`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]+>|[^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]+>|\S+)`)
	textLink   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// parse reads the headings and links of a Markdown text, skipping fenced
// code blocks and code spans, where brackets and hashes are only text.
func parse(text string) *page {
	p := &page{anchors: make(map[string]bool)}
	seen := make(map[string]int)
	inFence := false
	for n, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			// GitHub numbers a repeated anchor: x, x-1, x-2, ...
			a := anchor(m[1])
			if k := seen[a]; k > 0 {
				seen[a] = k + 1
				a += "-" + strconv.Itoa(k)
			} else {
				seen[a] = 1
			}
			p.anchors[a] = true
		}
		plain := codeSpan.ReplaceAllString(line, "")
		targets := inlineLink.FindAllStringSubmatch(plain, -1)
		if m := refDef.FindStringSubmatch(plain); m != nil {
			targets = append(targets, m)
		}
		for _, m := range targets {
			p.links = append(p.links, link{line: n + 1, target: strings.Trim(m[1], "<>")})
		}
	}
	return p
}

// anchor is the id GitHub gives a heading: its text lowercased, letters,
// digits, '-' and '_' kept, each space a '-', everything else dropped.
func anchor(h string) string {
	h = textLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
