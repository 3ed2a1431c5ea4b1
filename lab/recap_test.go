package lab

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/train"
)

// TestRecapQuick trains the recap's three models on a small text for a
// short budget each and checks that every model that ran reports its
// parameters, tokens/s, a val perplexity and a curve in time, and that
// the output prints the perplexities. The LSTM may be skipped only where
// this build has no --arch lstm.
func TestRecapQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("trains three models for seconds each")
	}
	text := strings.Repeat("to be, or not to be: that is the question. whether 'tis nobler in the mind to suffer\n", 400)
	path := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c := train.Default()
	c.NLayer, c.NEmbd, c.NHead, c.BlockSize, c.BatchSize = 1, 32, 2, 16, 4
	var log bytes.Buffer
	res, err := Run(Options{Device: "cpu", Model: c, Quick: true, Only: []string{"recap"}, Data: path, RecapSeconds: 2, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	r := res.Recap
	if r == nil || len(r.Models) != 3 || r.BudgetSec != 2 || r.ValTokens <= 0 {
		t.Fatalf("recap: %+v", r)
	}
	text = log.String()
	for i, m := range r.Models {
		if m.Name != RecapModels[i].Name {
			t.Errorf("model %d is %q", i, m.Name)
		}
		if m.Skipped != "" {
			if m.Name == "lstm" && strings.Contains(m.Skipped, "arch must be") {
				t.Logf("the LSTM leg is skipped: this build has no --arch lstm (%s)", m.Skipped)
				continue
			}
			t.Errorf("%s skipped: %s", m.Name, m.Skipped)
			continue
		}
		// The text has 23 characters: a perplexity far above that is a
		// broken model or evaluation.
		// (A neural model's curve starts with the untrained model's
		// evaluation; a loaded machine may stop it before the next.)
		if m.Params <= 0 || !(m.TokensPerSec > 0) || !(m.ValPerplexity > 1) || m.ValPerplexity > 40 || len(m.Curve) < 1 {
			t.Errorf("%s: %d parameters, %g tokens/s, perplexity %g, %d curve points: %+v\n%s", m.Name, m.Params, m.TokensPerSec, m.ValPerplexity, len(m.Curve), m, text)
		}
		for j, p := range m.Curve {
			if p.Sec < 0 || math.IsNaN(p.Perplexity) || (j > 0 && p.Sec < m.Curve[j-1].Sec) {
				t.Errorf("%s: curve %+v", m.Name, m.Curve)
				break
			}
		}
		if m.Name != "n-gram" && m.ElapsedSec > 2+30 {
			t.Errorf("%s ran %.1f s on a 2 s budget", m.Name, m.ElapsedSec)
		}
		if !strings.Contains(text, "   "+m.Name+" ") {
			t.Errorf("output has no row for %s:\n%s", m.Name, text)
		}
	}
	if !strings.Contains(text, "val perplexity") || !strings.Contains(text, "=> in 2 s each") {
		t.Errorf("output:\n%s", text)
	}
}

// TestRecapSimulated: on a simulated GPU, which computes nothing, the
// recap says it is not applicable instead of failing the lab.
func TestRecapSimulated(t *testing.T) {
	var log bytes.Buffer
	res, err := Run(Options{Device: "sim:h100", Model: train.Default(), Quick: true, Only: []string{"recap"}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Recap; r == nil || len(r.Models) != 0 || !strings.HasPrefix(r.Note, "not applicable") || !strings.Contains(log.String(), r.Note) {
		t.Errorf("recap on sim:h100: %+v\n%s", r, log.String())
	}
}
