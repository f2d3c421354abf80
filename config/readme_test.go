package config_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/config"
)

// settingsDoc is the operator's page that holds the settings table.
const settingsDoc = "../docs/settings.md"

var update = flag.Bool("update", false, "rewrite the settings table in "+settingsDoc)

const (
	tableBegin = "<!-- settings:begin (generated from config/settings.go: go test ./config -run TestSettingsDoc -update) -->\n"
	tableEnd   = "<!-- settings:end -->\n"
)

// settingsTable renders the documentation's table of settings from the code.
func settingsTable() string {
	var b strings.Builder
	b.WriteString("| variable | YAML key | default | meaning |\n| --- | --- | --- | --- |\n")
	for _, s := range config.Settings() {
		def := "`" + s.Default + "`"
		if s.Default == "" {
			def = "empty"
		}
		b.WriteString("| `" + s.Env + "` | `" + s.Key + "` | " + def + " | " + strings.ReplaceAll(s.Doc, "|", "\\|") + " |\n")
	}
	return b.String()
}

// The settings table of docs/settings.md is the code's: a setting added,
// renamed or given another default fails this test until the page says so.
func TestSettingsDoc(t *testing.T) {
	raw, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no settings table between %q and %q", settingsDoc, tableBegin, tableEnd)
	}
	if strings.Count(doc, tableBegin) != 1 || strings.Count(doc, tableEnd) != 1 {
		t.Fatalf("%s must hold exactly one settings table", settingsDoc)
	}
	want := settingsTable()
	got := doc[i+len(tableBegin) : j]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(settingsDoc, []byte(doc[:i+len(tableBegin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's settings table differs from config/settings.go; run\n  go test ./config -run TestSettingsDoc -update\nwant:\n%s", settingsDoc, want)
}

// The README sends operators to docs/settings.md and holds no second table
// that could drift from it.
func TestREADMEHasNoSettingsTable(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	if strings.Contains(readme, "settings:begin") {
		t.Error("README.md holds a settings table; it belongs in " + settingsDoc)
	}
	if !strings.Contains(readme, "docs/settings.md") {
		t.Error("README.md does not link docs/settings.md")
	}
}
