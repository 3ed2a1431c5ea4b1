package report

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRecapPage: a lab.json with only the recap is read, and the page
// lists each model (a skipped one with its reason) and plots each curve
// of perplexity against time.
func TestRecapPage(t *testing.T) {
	dir := t.TempDir()
	rc := Recap{Data: "text", BudgetSec: 60, Summary: "transformer best",
		Models: []RecapModel{
			{Name: "n-gram", Arch: "kneser-ney", Params: 1000, ValPerplexity: 4.9, Curve: []RecapPoint{{1, 10, 1}, {2, 6, 2}, {4, 4.9, 3}}},
			{Name: "lstm", Arch: "lstm", Skipped: "no <lstm> here"},
			{Name: "transformer", Arch: "gpt2", Params: 800000, ValPerplexity: 4.2, Curve: []RecapPoint{{0, 65, 0}, {30, 6, 100}, {60, 4.2, 200}}},
		}}
	writeJSON(t, filepath.Join(dir, LabFile), map[string]any{"device": "cpu", "recap": rc})
	r, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 0 || r.Lab == nil || r.Lab.Recap == nil || len(r.Lab.Recap.Models) != 3 {
		t.Fatalf("problems %v, lab %+v", r.Problems, r.Lab)
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{"Recap: n-gram, LSTM and Transformer", "skipped: no &lt;lstm&gt; here", "transformer best", "4.200",
		`data-title="Val perplexity against wall time"`, `class="key empty">lstm: no data`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	lines := regexp.MustCompile(`<polyline class="series" data-name="([^"]*)"[^>]*points="([^"]*)"`).FindAllStringSubmatch(html, -1)
	if len(lines) != 2 || lines[0][1] != "n-gram" || lines[1][1] != "transformer" || len(strings.Fields(lines[1][2])) != 3 {
		t.Errorf("curves: %q", lines)
	}
}
