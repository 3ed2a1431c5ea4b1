package config

import (
	"strings"
	"testing"
)

// TestApplyRecipe: a recipe sets its settings, except those given on the
// command line; an unknown recipe is refused, naming the recipes.
func TestApplyRecipe(t *testing.T) {
	c := Default()
	c.Recipe, c.Given, c.MuonLR, c.QKNorm = "modern", []string{"MuonLR", "QKNorm"}, 0.07, false
	if err := c.ApplyRecipe(); err != nil {
		t.Fatal(err)
	}
	if c.Arch != "llama" || c.Optimizer != OptimizerMuon || !c.UntiedHead {
		t.Errorf("modern left arch %q, optimizer %q, untied head %v", c.Arch, c.Optimizer, c.UntiedHead)
	}
	if c.MuonLR != 0.07 || c.QKNorm {
		t.Errorf("modern overrode the flags given: muon-lr %v, qk-norm %v", c.MuonLR, c.QKNorm)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("the modern recipe is not valid: %v", err)
	}
	d := Default()
	if err := d.ApplyRecipe(); err != nil || d.Arch != "" {
		t.Errorf("no recipe: %v, arch %q", err, d.Arch)
	}
	d.Recipe = "nope"
	if err := d.ApplyRecipe(); err == nil || !strings.Contains(err.Error(), "modern") {
		t.Errorf("an unknown recipe: %v, want a refusal listing modern", err)
	}
}

// TestOptimizerSettings: bad optimizer settings are refused naming the
// setting, and what Muon cannot run with is refused with the reason.
func TestOptimizerSettings(t *testing.T) {
	for _, tc := range []struct {
		set  func(c *Config)
		want string
	}{
		{func(c *Config) { c.Optimizer = "sgd" }, "Optimizer"},
		{func(c *Config) { c.Optimizer, c.MuonMomentum = OptimizerMuon, 1 }, "MuonMomentum"},
		{func(c *Config) { c.Optimizer, c.MuonLR = OptimizerMuon, -1 }, "MuonLR"},
		{func(c *Config) { c.Optimizer, c.Precision = OptimizerMuon, "fp16" }, "skips steps"},
	} {
		c := Default()
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.want, err, tc.want)
		}
	}
	c := Default()
	c.Optimizer, c.WorldSize, c.Zero = OptimizerMuon, 2, 1 // ZeRO-1 keeps Muon's matrices whole on their ranks
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if lr, mom, wd := c.MuonSettings(); lr != DefaultMuonLR || mom != DefaultMuonMomentum || wd != 0 {
		t.Errorf("Muon's defaults: %v %v %v", lr, mom, wd)
	}
}
