package deploy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDashboardImportable: grafana/flashgate.json is a dashboard Grafana
// imports as it is: a uid and a title, a datasource template variable of
// type prometheus, and every panel reads through that variable with at
// least one PromQL query. cmd/flashgate/dashboard_test.go runs the queries
// against a live Prometheus.
func TestDashboardImportable(t *testing.T) {
	var dash struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Title      string `json:"title"`
			Datasource struct {
				Type string `json:"type"`
				UID  string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("%s: uid %q, title %q: want both", dashboardFile, dash.UID, dash.Title)
	}
	hasDS := false
	for _, v := range dash.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Errorf("%s: no template variable \"datasource\" of type datasource (prometheus)", dashboardFile)
	}
	if len(dash.Panels) == 0 {
		t.Fatalf("%s: no panels", dashboardFile)
	}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d twice", dashboardFile, p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, q := range p.Targets {
			if q.RefID == "" || strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q: query %+v: want a refId and an expr", p.Title, q)
			}
		}
	}
	// What the issue asks the dashboard to show.
	all := readFile(t, dashboardFile)
	for _, want := range []string{
		"flashgate_buys_total", "histogram_quantile", "flashgate_buy_duration_seconds_bucket",
		"flashgate_sale_remaining", "flashgate_sale_sold", "flashgate_outbox_pending_total",
		"flashgate_relay_messages_total", "flashgate_consumer_deliveries_total",
		"flashgate_consumer_redeliveries_total",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("%s: no query reads %s", dashboardFile, want)
		}
	}
}
