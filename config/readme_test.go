package config_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/config"
)

var update = flag.Bool("update", false, "rewrite the settings table in ../README.md")

const (
	tableBegin = "<!-- settings:begin (generated from config/settings.go: go test ./config -run TestREADMESettings -update) -->\n"
	tableEnd   = "<!-- settings:end -->\n"
)

// settingsTable renders the README's table of settings from the code.
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

// The README's settings table is the code's: a setting added, renamed or
// given another default fails this test until the README says so.
func TestREADMESettings(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no settings table between %q and %q", tableBegin, tableEnd)
	}
	want := settingsTable()
	got := doc[i+len(tableBegin) : j]
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile("../README.md", []byte(doc[:i+len(tableBegin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's settings table differs from config/settings.go; run\n  go test ./config -run TestREADMESettings -update\nwant:\n%s", want)
}
