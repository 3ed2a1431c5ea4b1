package config

import (
	"strings"
	"testing"

	"github.com/fleetml/fleet/internal/setting"
)

// TestRecordedSettingsNameFields: every recorded setting but the
// tokenizer and rope_scaling (no flag sets them: the data and a Hugging
// Face folder do) is named by a flag of the table, which maps it to its
// field, and back to the same flag.
func TestRecordedSettingsNameFields(t *testing.T) {
	for _, s := range (RunConfig{Train: Default()}).Settings() {
		field := fieldOf(s.Flag)
		if s.Flag == "tokenizer" || s.Flag == "rope_scaling" {
			if field != "" {
				t.Errorf("the %s record maps to field %q", s.Flag, field)
			}
			continue
		}
		if field == "" {
			t.Errorf("recorded setting %s is no flag of the table", s.Flag)
			continue
		}
		if f, ok := Flags.FlagOf(field); !ok || "--"+f != s.Flag {
			t.Errorf("recorded setting %s: field %s is flag --%s", s.Flag, field, f)
		}
	}
}

// TestResumeCheck: a changed tunable setting is refused, naming its field,
// unless allowed, when it is returned as a change by its flag; a changed
// model is refused either way; per-rank settings are not compared.
func TestResumeCheck(t *testing.T) {
	was := RunConfig{Train: Default()}
	was.Train.GradAccum = 1 // a run's config.json records it resolved
	was.Model = was.Train.ModelConfig(65)
	now := was
	now.Train.BatchSize, now.Train.GradAccum = 6, 2 // the same global batch
	if ch, warn, err := ResumeCheck(was, now, false); err != nil || len(ch) != 0 || warn != "" {
		t.Errorf("another micro-batch at the same global batch: %v, %v, %q", ch, err, warn)
	}
	now.Train.LR = 2e-3
	_, _, err := ResumeCheck(was, now, false)
	if err == nil || !strings.Contains(err.Error(), "LR: the checkpoint's is 0.001, this run's is 0.002") ||
		!strings.Contains(err.Error(), "add AllowChanges") {
		t.Errorf("a changed learning rate: %v", err)
	}
	if e, ok := err.(*setting.Error); !ok || e.Name != "LR" {
		t.Errorf("a changed learning rate names %v, want LR", err)
	}
	ch, _, err := ResumeCheck(was, now, true)
	if err != nil || len(ch) != 1 || ch[0] != (Change{Flag: "--lr", From: "0.001", To: "0.002"}) {
		t.Errorf("an allowed change: %v, %v", ch, err)
	}
	now.Model.NLayer++
	if _, _, err := ResumeCheck(was, now, true); err == nil || !strings.Contains(err.Error(), "another run's") ||
		!strings.Contains(err.Error(), "NLayer: the checkpoint's is 4, this run's is 5") {
		t.Errorf("another model: %v", err)
	}
	// A flag bound to its field's negation is named by the flag, whose
	// values the message gives.
	now = was
	now.Model.UntiedHead = true
	if _, _, err := ResumeCheck(was, now, true); err == nil ||
		!strings.Contains(err.Error(), "--tie-embeddings: the checkpoint's is true, this run's is false") {
		t.Errorf("an untied head: %v", err)
	}
}

// TestSettingsDiff: the ranks' exchange carries flags; the differences
// name fields.
func TestSettingsDiff(t *testing.T) {
	a := RunConfig{Train: Default()}
	b := a
	b.Train.Seed, b.Train.Pipeline = 7, "cpu:0,cpu:1"
	diff := SettingsDiff(a.Settings(), b.Settings(), 2)
	want := []string{"{Seed}: rank 0 has 1337, rank 2 has 7", "{Pipeline}: rank 0 has 1 stages, rank 2 has 2 stages"}
	if strings.Join(diff, "\n") != strings.Join(want, "\n") {
		t.Errorf("SettingsDiff = %q, want %q", diff, want)
	}
	if d := SettingsDiff(a.Settings(), a.Settings()[:3], 1); len(d) != 1 || !strings.Contains(d[0], "another fleet") {
		t.Errorf("settings that do not line up: %q", d)
	}
}
