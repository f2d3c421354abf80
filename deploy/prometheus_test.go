package deploy

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The alert rules (prometheus/flashgate.rules.yml) and the dashboard
// (grafana/flashgate.json) are checked here without a server: promtool
// checks the rules and runs their unit tests, and every flashgate_* family
// they name must be one the code writes. cmd/flashgate/dashboard_test.go
// holds both against a live Prometheus scraping a gateway and a consumer.

const (
	rulesFile     = "prometheus/flashgate.rules.yml"
	rulesTestFile = "prometheus/flashgate.rules.test.yml"
	dashboardFile = "grafana/flashgate.json"
)

// promtool returns the path of promtool, failing the test when it is not
// installed: `make test` installs it (make tools, deploy/local/prometheus.sh).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): run deploy/local/prometheus.sh (make tools; make test runs it)", err)
	}
	return p
}

// runPromtool runs promtool with args in this folder's prometheus/, bounded
// in time, and fails the test on a non-zero exit, showing its output.
func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolCheckRules(t *testing.T) {
	out := runPromtool(t, "check", "rules", filepath.Base(rulesFile))
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules: no SUCCESS in\n%s", out)
	}
}

// TestPromtoolTestRules runs the rules' unit tests, and checks that they
// make every alert fire and clear: each alert of the rules file is named
// by an evaluation that expects it and by one that expects nothing.
func TestPromtoolTestRules(t *testing.T) {
	out := runPromtool(t, "test", "rules", filepath.Base(rulesTestFile))
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: no SUCCESS in\n%s", out)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, rulesTestFile)), &tests); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	fires, clears := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, e := range tc.AlertRuleTest {
			if len(e.ExpAlerts) > 0 {
				fires[e.Alertname] = true
			} else {
				clears[e.Alertname] = true
			}
		}
	}
	alerts := alertNames(t)
	if len(alerts) == 0 {
		t.Fatalf("%s: no alerts", rulesFile)
	}
	for _, a := range alerts {
		if !fires[a] {
			t.Errorf("%s: no test makes %s fire", rulesTestFile, a)
		}
		if !clears[a] {
			t.Errorf("%s: no test sees %s quiet", rulesTestFile, a)
		}
	}
}

// alertNames returns the alerts of the rules file, in order; every rule
// of it must be an alert with a severity label, a summary and a
// description.
func alertNames(t *testing.T) []string {
	t.Helper()
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, rulesFile)), &file); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var names []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("%s: group %s: a rule that is no alert", rulesFile, g.Name)
				continue
			}
			switch r.Labels["severity"] {
			case "warning", "critical":
			default:
				t.Errorf("%s: %s: severity %q, want warning or critical", rulesFile, r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: %s: wants a summary and a description", rulesFile, r.Alert)
			}
			names = append(names, r.Alert)
		}
	}
	return names
}

var familyRef = regexp.MustCompile(`flashgate_[a-z0-9_]+`)

// TestRulesAndDashboardNameRealFamilies: every flashgate_* name in the rules
// and the dashboard is a family the code writes (a string literal of a
// non-test file of the module), so a renamed metric fails here and not in
// an operator's empty panel.
func TestRulesAndDashboardNameRealFamilies(t *testing.T) {
	written := writtenFamilies(t)
	for _, file := range []string{rulesFile, dashboardFile} {
		seen := map[string]bool{}
		for _, ref := range familyRef.FindAllString(readFile(t, file), -1) {
			if seen[ref] {
				continue
			}
			seen[ref] = true
			if !written[familyOf(ref, written)] {
				t.Errorf("%s: %s is no family the code writes", file, ref)
			}
		}
		if len(seen) == 0 {
			t.Errorf("%s: names no flashgate_* family", file)
		}
	}
}

// familyOf strips a histogram's series suffix when the family is known.
func familyOf(ref string, written map[string]bool) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if f, ok := strings.CutSuffix(ref, suffix); ok && written[f] {
			return f
		}
	}
	return ref
}

// writtenFamilies returns every flashgate_* name that starts a string
// literal in the module's non-test Go files, up to its first '{'.
func writtenFamilies(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if base := d.Name(); path != ".." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			s, _, _ = strings.Cut(s, "{")
			if familyRef.MatchString(s) && familyRef.FindString(s) == s {
				names[s] = true
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no flashgate_* family found in the module's code")
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("%d families in the code", len(list))
	return names
}
