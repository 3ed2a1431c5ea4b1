package report

import (
	"html/template"
)

// Recap is the lab's recap experiment (lab.json's "recap"): an n-gram, an
// LSTM and a Transformer trained on the same data for the same
// wall-clock budget.
type Recap struct {
	Data        string       `json:"data"`
	TrainTokens int          `json:"train_tokens"`
	ValTokens   int          `json:"val_tokens"`
	BudgetSec   float64      `json:"budget_s"` // each model's
	Method      string       `json:"method"`
	Models      []RecapModel `json:"models"`
	Summary     string       `json:"summary"`
	// Note, when set, says why the recap did not run (a simulated GPU).
	Note string `json:"note,omitempty"`
}

// RecapModel is one model of the recap.
type RecapModel struct {
	Name string `json:"name"` // n-gram, lstm, transformer
	Arch string `json:"arch"`
	// Skipped, when set, is why the model did not run (an architecture
	// this build lacks); the figures are then zero.
	Skipped string `json:"skipped,omitempty"`
	// Params is the model's parameters (an n-gram's: the distinct
	// n-grams it counted); TokensPerSec the training tokens it took in
	// per second; ValPerplexity its final perplexity per token on the val
	// split; ElapsedSec the wall time it used; Steps its optimizer steps.
	Params        int          `json:"params"`
	TokensPerSec  float64      `json:"tokens_per_s"`
	ValPerplexity float64      `json:"val_perplexity"`
	ElapsedSec    float64      `json:"elapsed_s"`
	Steps         int          `json:"steps,omitempty"`
	Curve         []RecapPoint `json:"curve"`
	Note          string       `json:"note,omitempty"`
}

// RecapPoint is a model's val perplexity Sec seconds into its run: after
// Step optimizer steps, or (the n-gram's) counting order Step.
type RecapPoint struct {
	Sec        float64 `json:"s"`
	Perplexity float64 `json:"perplexity"`
	Step       int     `json:"step"`
}

// recapPlots draws each model's val perplexity against wall time.
func recapPlots(r *Recap) []template.HTML {
	if r == nil || len(r.Models) == 0 {
		return nil
	}
	var ss []Series
	for _, m := range r.Models {
		s := Series{Name: m.Name}
		for _, p := range m.Curve {
			s.X = append(s.X, p.Sec)
			s.Y = append(s.Y, orNaN(p.Perplexity))
		}
		ss = append(ss, s)
	}
	return []template.HTML{LinePlot("Val perplexity against wall time", "seconds", "perplexity per token", ss...)}
}
