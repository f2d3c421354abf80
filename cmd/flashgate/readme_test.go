package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's walk-through, pasted into bash as a user would (ports moved to
// the test gateway's), gives the answers the README shows.
func TestREADMEWalkthrough(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "```sh\nSALE=demo-")
	if i < 0 {
		t.Fatal("README has no walk-through starting with SALE=demo-")
	}
	block := doc[i+len("```sh\n"):]
	block = block[:strings.Index(block, "```")]

	// Each curl prints its body, then " CODE" on the same line.
	type expect struct{ code, status string }
	var script strings.Builder
	var want []*expect
	expLine := regexp.MustCompile(`^# (\d{3}) \{"status":"([a-z_]+)"`)
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "curl "):
			script.WriteString(strings.Replace(line, "curl -s ", `curl -s -w ' %{http_code}\n' `, 1) + "\n")
			want = append(want, nil)
		case expLine.MatchString(line) && len(want) > 0 && want[len(want)-1] == nil:
			m := expLine.FindStringSubmatch(line)
			want[len(want)-1] = &expect{m[1], m[2]}
		case !strings.HasPrefix(line, "#"):
			script.WriteString(line + "\n")
		}
	}
	if len(want) < 10 {
		t.Fatalf("only %d curl lines found in the walk-through", len(want))
	}
	p := soloGateway(t)
	text := strings.NewReplacer("localhost:8080", p.public, "localhost:8081", p.admin).Replace(script.String())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-eu", "-c", text).CombinedOutput()
	if err != nil {
		t.Fatalf("walk-through failed: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d answers for %d curls:\n%s", len(lines), len(want), out)
	}
	checked := 0
	for n, w := range want {
		if w == nil {
			continue
		}
		checked++
		if !strings.HasSuffix(lines[n], " "+w.code) || !strings.Contains(lines[n], `"status":"`+w.status+`"`) {
			t.Errorf("curl %d: got %s, README shows %s %s", n+1, lines[n], w.code, w.status)
		}
	}
	if checked < 8 {
		t.Errorf("only %d answers checked", checked)
	}
}
