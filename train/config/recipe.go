package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/fleetml/fleet/internal/setting"
)

// A recipe is a named preset of settings (--recipe NAME) that a user can
// start from: it sets each of its settings that the command line did not
// (Config.Given), so explicit flags win.
type recipe struct {
	about string
	set   map[string]func(c *Config) // by Config field
}

// recipes are the presets. modern is the reference budget's best found
// (docs/training.md has the measurements): Llama-style blocks with
// QK-norm and an untied head, Muon for the blocks' matrices, AdamW at
// the default rate for the embeddings, head and gains.
var recipes = map[string]recipe{
	"modern": {
		about: "Llama-style blocks (RMSNorm, rotary embeddings, SwiGLU) with QK-norm and an untied head; Muon for the blocks' matrices",
		set: map[string]func(c *Config){
			"Arch":       func(c *Config) { c.Arch = "llama" },
			"QKNorm":     func(c *Config) { c.QKNorm = true },
			"UntiedHead": func(c *Config) { c.UntiedHead = true },
			"Optimizer":  func(c *Config) { c.Optimizer = OptimizerMuon },
			"MuonLR":     func(c *Config) { c.MuonLR = 0.02 },
		},
	},
}

// RecipeNames lists the recipes, sorted.
func RecipeNames() []string {
	var names []string
	for n := range recipes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ApplyRecipe sets the settings of c.Recipe that are not in c.Given;
// a Recipe of "" does nothing.
func (c *Config) ApplyRecipe() error {
	if c.Recipe == "" {
		return nil
	}
	r, ok := recipes[c.Recipe]
	if !ok {
		return setting.Errorf("{Recipe} %q is not a recipe; the recipes are %s", c.Recipe, strings.Join(RecipeNames(), ", "))
	}
	for field, set := range r.set {
		if !slices.Contains(c.Given, field) {
			set(c)
		}
	}
	return nil
}

func recipeUsage() string {
	var lines []string
	for _, n := range RecipeNames() {
		lines = append(lines, fmt.Sprintf("%s (%s)", n, recipes[n].about))
	}
	return "a named preset of settings to start from; flags given explicitly win: " + strings.Join(lines, "; ")
}
