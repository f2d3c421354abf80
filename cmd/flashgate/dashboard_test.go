package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/flashgate/flashgate/bench/crowdtest"
	"github.com/flashgate/flashgate/retry"
)

// The dashboard (deploy/grafana/flashgate.json) and the alert rules
// (deploy/prometheus/flashgate.rules.yml) against live series: a real
// Prometheus, the test's own process on 127.0.0.1, scrapes a gateway and a
// consumer through a short sale. deploy/prometheus_test.go checks the rules
// with promtool.
const (
	dashboardFile = "../../deploy/grafana/flashgate.json"
	rulesFile     = "../../deploy/prometheus/flashgate.rules.yml"
)

// TestDashboardAndAlertsOnLiveSeries: every query of every panel of the
// dashboard returns data, every alert rule loads, runs without error and
// its expression returns nothing on a healthy pipeline, and Prometheus
// holds no alert pending or firing.
func TestDashboardAndAlertsOnLiveSeries(t *testing.T) {
	s := newStack(t)
	g := s.startGateway(nil)
	consumerMetrics := freeAddr(t)
	s.start("consumer", []string{"FLASHGATE_CONSUMER_METRICS_ADDR=" + consumerMetrics}, "consumer")
	prom := startPrometheus(t, g.admin, consumerMetrics)

	// Both targets scraped before the sale, so that its counters rise
	// under Prometheus's eyes.
	prom.waitFor(t, "both targets up", 60*time.Second, func() error {
		v, err := prom.query(`sum(up{job=~"flashgate-gateway|flashgate-consumer"})`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value[1] != "2" {
			return fmt.Errorf("up: %v", v)
		}
		return nil
	})

	s.createSale(g, "dash", 200, 1)
	pollRoom(t, g, "dashroom")
	b := crowdtest.Start(t, crowdtest.Options{Bases: []string{"http://" + g.public}, Sales: []string{"dash"}, Workers: 16, Users: 300})
	b.Wait()
	if accepted := b.Check()["dash"]; len(accepted) != 200 {
		t.Fatalf("%d accepted, want 200", len(accepted))
	}
	s.waitDrained("dash", 2*time.Minute)

	// Prometheus has seen the whole sale once it has scraped the
	// consumer's last insert.
	prom.waitFor(t, "the sale's rows in Prometheus", 60*time.Second, func() error {
		v, err := prom.query(`sum(flashgate_consumer_inserted_total)`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value[1] != "200" {
			return fmt.Errorf("inserted: %v", v)
		}
		return nil
	})

	// Every panel's queries, with Grafana's $__rate_interval as 5 minutes:
	// the whole sale stays within it however slow the machine (a quantile
	// over a window with no buy in it is NaN: no data).
	// A minute for them all (each gets a look at least).
	panelsBy := time.Now().Add(time.Minute)
	for _, q := range dashboardQueries(t) {
		expr := strings.ReplaceAll(q.expr, "$__rate_interval", "5m")
		prom.check(t, fmt.Sprintf("panel %q: %s", q.panel, expr), max(time.Until(panelsBy), time.Second), func() error {
			v, err := prom.query(expr)
			if err != nil {
				return retry.Stop(err)
			}
			for _, r := range v {
				if r.Value[1] != "NaN" {
					return nil
				}
			}
			return fmt.Errorf("no data: %v", v)
		})
	}

	// Every alert rule loaded, evaluated at least once without error, and
	// quiet: its expression returns nothing now.
	alerts := ruleAlerts(t)
	prom.waitFor(t, "every rule evaluated", 30*time.Second, func() error {
		rules, err := prom.rules()
		if err != nil {
			return err
		}
		for name := range alerts {
			r, ok := rules[name]
			if !ok {
				return retry.Stop(fmt.Errorf("alert %s not loaded by Prometheus", name))
			}
			if r.Health == "err" {
				return retry.Stop(fmt.Errorf("alert %s: %s", name, r.LastError))
			}
			if r.Health != "ok" {
				return fmt.Errorf("alert %s: health %q", name, r.Health)
			}
			if r.State != "inactive" {
				return retry.Stop(fmt.Errorf("alert %s %s on a healthy pipeline: %s", name, r.State, r.Alerts))
			}
		}
		return nil
	})
	for name, expr := range alerts {
		v, err := prom.query(expr)
		if err != nil {
			t.Errorf("alert %s: %v", name, err)
			continue
		}
		if len(v) != 0 {
			t.Errorf("alert %s: its expression returns %v on a healthy pipeline", name, v)
		}
	}
}

// prometheusProc is a `prometheus` server started by a test.
type prometheusProc struct {
	addr   string
	client *http.Client
}

// startPrometheus starts prometheus on a free loopback port, with its
// storage in a temporary folder, the alert rules loaded, scraping the
// gateway's admin listener (job flashgate-gateway) and the consumer's
// metrics listener (job flashgate-consumer) every second, and waits until
// it is ready. It stops when the test ends (SIGTERM; SIGKILL 15s later).
// prometheus is installed by `make tools` (make test runs it): missing, the
// test fails rather than skip.
func startPrometheus(t *testing.T, gatewayAdmin, consumerMetrics string) *prometheusProc {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not found (%v): run deploy/local/prometheus.sh (make tools; make test runs it)", err)
	}
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: flashgate-gateway
    static_configs:
      - targets: [%q]
  - job_name: flashgate-consumer
    static_configs:
      - targets: [%q]
`, rules, gatewayAdmin, consumerMetrics)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &prometheusProc{addr: freeAddr(t), client: &http.Client{Timeout: 5 * time.Second}}
	out := &lockedBuffer{}
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.addr,
		"--log.level=warn")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if t.Failed() {
			t.Logf("---- prometheus (%v) ----\n%s", waitErr, out)
		}
	})
	p.waitFor(t, "prometheus ready", 60*time.Second, func() error {
		select {
		case <-exited:
			return retry.Stop(fmt.Errorf("prometheus exited at start: %v", waitErr))
		default:
		}
		res, err := p.client.Get("http://" + p.addr + "/-/ready")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("/-/ready: %s", res.Status)
		}
		return nil
	})
	return p
}

// waitFor retries f every 100ms until it returns nil, returns
// retry.Stop(err), or d has passed; the last two end the test.
func (p *prometheusProc) waitFor(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	if err := until(d, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// check is waitFor that fails the test and goes on.
func (p *prometheusProc) check(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	if err := until(d, f); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

func until(d time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return retry.Until(ctx, retry.Backoff{Min: 100 * time.Millisecond, Max: 100 * time.Millisecond}, func(context.Context) error { return f() }, nil)
}

// sample is one series of an instant vector: its labels and [time, "value"].
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates expr now through /api/v1/query; a result that is not an
// instant vector (a scalar) is an error, as is a query Prometheus rejects.
func (p *prometheusProc) query(expr string) ([]sample, error) {
	var data struct {
		ResultType string   `json:"resultType"`
		Result     []sample `json:"result"`
	}
	if err := p.get("/api/v1/query?"+url.Values{"query": {expr}}.Encode(), &data); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if data.ResultType != "vector" {
		return nil, retry.Stop(fmt.Errorf("query %s: a %s, not a vector", expr, data.ResultType))
	}
	return data.Result, nil
}

// alertRule is an alerting rule as /api/v1/rules shows it.
type alertRule struct {
	Name      string          `json:"name"`
	Type      string          `json:"type"`
	Health    string          `json:"health"`
	LastError string          `json:"lastError"`
	State     string          `json:"state"`
	Alerts    json.RawMessage `json:"alerts"`
}

// rules returns the alerting rules Prometheus has loaded, by name.
func (p *prometheusProc) rules() (map[string]alertRule, error) {
	var data struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("/api/v1/rules?type=alert", &data); err != nil {
		return nil, err
	}
	out := map[string]alertRule{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			out[r.Name] = r
		}
	}
	return out, nil
}

// get reads an API answer's data into v. An answer Prometheus gives with
// status "error" (a query it cannot parse or run) is final: retry.Stop.
func (p *prometheusProc) get(path string, v any) error {
	res, err := p.client.Get("http://" + p.addr + path)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s: %s: %.300s", path, res.Status, raw)
	}
	if env.Status != "success" {
		return retry.Stop(fmt.Errorf("%s: %s: %s", env.ErrorType, env.Error, path))
	}
	return json.Unmarshal(env.Data, v)
}

// panelQuery is one query of one panel of the dashboard.
type panelQuery struct{ panel, expr string }

// dashboardQueries returns every query of every panel (rows' panels too).
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []panelQuery
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, panelQuery{p.Title, tg.Expr})
			}
			var sub []panel
			for _, r := range p.Panels {
				var q panel
				if err := json.Unmarshal(r, &q); err != nil {
					t.Fatal(err)
				}
				sub = append(sub, q)
			}
			walk(sub)
		}
	}
	walk(dash.Panels)
	if len(out) == 0 {
		t.Fatalf("%s: no queries", dashboardFile)
	}
	return out
}

// ruleAlerts returns the alerts of the rules file, name → expression.
func ruleAlerts(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	out := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = r.Expr
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no alerts", rulesFile)
	}
	return out
}

// pollRoom makes a waiting room's series for the dashboard: a sale whose
// room lets nobody in for an hour, three buyers in it, and a poll of each
// every 250 ms until the test ends, so that every scrape sees them move.
func pollRoom(t *testing.T, g *gatewayProc, sale string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	starts := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if code, body, err := httpDo(c, "PUT", "http://"+g.admin+"/admin/v1/sales/"+sale,
		`{"stock":10,"waiting_room":"fifo","admit_per_second":1,"starts_at":"`+starts+`"}`); err != nil || code != 201 {
		t.Fatalf("create sale %s: %d %s %v", sale, code, body, err)
	}
	var tickets []string
	for _, u := range []string{"ann", "ben", "cat"} {
		code, body, err := httpDo(c, "POST", "http://"+g.public+"/v1/sales/"+sale+"/queue", `{"user_id":"`+u+`"}`)
		var v struct{ Ticket string }
		if err != nil || code != 200 || json.Unmarshal([]byte(body), &v) != nil || v.Ticket == "" {
			t.Fatalf("join %s: %d %s %v", u, code, body, err)
		}
		tickets = append(tickets, v.Ticket)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, tk := range tickets {
				req, _ := http.NewRequest("GET", "http://"+g.public+"/v1/sales/"+sale+"/queue", nil)
				req.Header.Set("Flashgate-Ticket", tk)
				if res, err := c.Do(req); err == nil {
					res.Body.Close()
				}
			}
			// A buy without a ticket: refused, and counted.
			httpDo(c, "POST", "http://"+g.public+"/v1/sales/"+sale+"/orders", `{"user_id":"ann"}`)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	t.Cleanup(func() {
		close(done)
		wg.Wait()
	})
}
