package main

import (
	"os"
	"path/filepath"

	"github.com/fleetml/fleet/train"
)

// standalone reports whether --weights names a file of its own rather than
// one in the run folder --out.
func standalone(out, weights string) bool {
	if _, err := os.Stat(filepath.Join(out, weights)); err == nil && !filepath.IsAbs(weights) {
		return false
	}
	_, err := os.Stat(weights)
	return err == nil
}

// loadModel loads a run's model, or a weights file of its own.
func loadModel(out, weights, device string, nHead int, tokSpec, dataPath string) (*train.Trained, error) {
	if standalone(out, weights) {
		return train.LoadFile(weights, nHead, device, tokSpec, dataPath)
	}
	return train.Load(out, weights, device)
}
