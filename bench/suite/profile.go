package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The cost part's profiles: a CPU profile of the gateway (its admin
// listener's /admin/debug/pprof/) and of a consumer (its metrics
// listener's /debug/pprof/) taken in the middle of the first run's sale,
// read with `go tool pprof -top`, and each function's share of the
// process's samples turned into µs per order with the process's measured
// CPU per order. Redis is by command (INFO commandstats), the cost
// section's own table; RabbitMQ and MariaDB are not Go.

// profileTop is one process's profile: its hottest functions by their own
// samples.
type profileTop struct {
	proc string // procGateway, procConsumer
	file string // the profile, under the suite's folder
	rows []profileRow
	// svg is the profile drawn as a call graph beside it (drawProfile),
	// "" when it could not be, and why in svgErr.
	svg    string
	svgErr error
}

// profilePicture is the name of a process's call graph next to the report.
func profilePicture(proc string) string {
	return "bench-profile-" + strings.NewReplacer(" + ", "-", " ", "-").Replace(proc) + ".svg"
}

type profileRow struct {
	flat, cum float64 // % of the profile's samples
	name      string
}

// profileSeconds is how long each profile samples.
const profileSeconds = 4

// takeProfile fetches a CPU profile from url (a pprof /profile endpoint)
// into file. It blocks for profileSeconds and a little more.
func takeProfile(ctx context.Context, url, file string) error {
	ctx, cancel := context.WithTimeout(ctx, (profileSeconds+10)*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url+"?seconds="+strconv.Itoa(profileSeconds), nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", url, res.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readTop reads the n hottest functions of a profile of bin, by flat
// samples, with `go tool pprof -top`.
func readTop(ctx context.Context, bin, file string, n int) ([]profileRow, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w", err)
	}
	out, err := exec.CommandContext(ctx, goBin, "tool", "pprof", "-top", "-nodecount="+strconv.Itoa(n), bin, file).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof -top %s: %w", file, err)
	}
	return parseTop(out), nil
}

// drawProfile draws a profile of bin as a call graph of its hottest paths
// into file, with `go tool pprof -svg`, which needs Graphviz's dot
// (deploy/local/graphviz.sh, run by make bench, installs it).
func drawProfile(ctx context.Context, bin, profile, file string) error {
	if _, err := exec.LookPath("dot"); err != nil {
		return fmt.Errorf("no Graphviz dot on PATH (deploy/local/graphviz.sh installs it, make bench runs it)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("go tool pprof: %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, goBin, "tool", "pprof", "-svg", "-nodecount=40", "-nodefraction=0.02", "-edgefraction=0.005", bin, profile)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go tool pprof -svg %s: %w: %s", profile, err, strings.TrimSpace(stderr.String()))
	}
	if !bytes.Contains(out, []byte("<svg")) {
		return fmt.Errorf("go tool pprof -svg %s: no SVG in its output", profile)
	}
	return os.WriteFile(file, out, 0o644)
}

// parseTop reads the rows of `go tool pprof -top`:
//
//	flat  flat%   sum%        cum   cum%  name
//	0.52s 27.37% 27.37%      0.52s 27.37%  internal/runtime/syscall/linux.Syscall6
func parseTop(out []byte) []profileRow {
	var rows []profileRow
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		flat, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cum, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		rows = append(rows, profileRow{flat: flat, cum: cum, name: strings.Join(f[5:], " ")})
	}
	return rows
}

// profileSection is the report's section of the profiles, each row's
// share also as µs of the process's CPU per order (perOrder).
func profileSection(tops []profileTop, perOrder map[string]float64, notes []string) string {
	if len(tops) == 0 && len(notes) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Where each Go process spends its CPU\n\n"+
		"CPU profiles of %d s taken in the middle of the first run's sale (the gateway's `/admin/debug/pprof/profile`, the consumer's "+
		"`/debug/pprof/profile` on its metrics listener), read with `go tool pprof -top`: the hottest functions by their own samples. "+
		"µs per order is the function's share of the profile times the process's CPU per order in the table above. "+
		"The profiles are kept in `.run/bench/` for `go tool pprof -http`.\n", profileSeconds)
	for _, t := range tops {
		fmt.Fprintf(&b, "\n%s (%.1f µs per order; `%s`):\n\n| function | flat | µs per order | cum |\n| --- | ---: | ---: | ---: |\n",
			t.proc, perOrder[t.proc], filepath.Base(t.file))
		for _, r := range t.rows {
			fmt.Fprintf(&b, "| `%s` | %.1f%% | %.2f | %.1f%% |\n", r.name, r.flat, r.flat/100*perOrder[t.proc], r.cum)
		}
		if t.svg != "" {
			fmt.Fprintf(&b, "\nThe same profile as a call graph (`go tool pprof -svg`; each box's own and total share of the samples, the paths below 2%% left out):\n\n![%s's CPU profile](%s)\n",
				t.proc, profilePicture(t.proc))
		} else if t.svgErr != nil {
			fmt.Fprintf(&b, "\nNo call graph drawn: %v.\n", t.svgErr)
		}
	}
	for _, n := range notes {
		fmt.Fprintf(&b, "\n- %s\n", n)
	}
	return b.String()
}
