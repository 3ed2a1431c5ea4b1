package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/runs"
	"github.com/fleetml/fleet/tensor"
)

// resolveDevice opens the device --device names ("auto" picks cuda:0
// when it works, else the CPU).
func resolveDevice(name string) (tensor.Device, error) {
	d, err := backend.Resolve(name)
	if err != nil {
		return d, fmt.Errorf("--device %s: %w", name, err)
	}
	return d, nil
}

// standalone reports whether --weights names a file of its own rather than
// one in the run folder --out.
func standalone(out, weights string) bool {
	if out == "" {
		_, err := os.Stat(weights)
		return err == nil
	}
	if _, err := os.Stat(filepath.Join(out, weights)); err == nil && !filepath.IsAbs(weights) {
		return false
	}
	_, err := os.Stat(weights)
	return err == nil
}

// loadModel loads a run's model, or weights of their own (a file, or a
// Hugging Face folder, whose context blockSize bounds where positive).
func loadModel(out, weights, device string, nHead, blockSize int, tokSpec, dataPath string) (*runs.Trained, error) {
	dev, err := resolveDevice(device)
	if err != nil {
		return nil, err
	}
	if standalone(out, weights) {
		return runs.LoadFile(weights, nHead, blockSize, dev, tokSpec, dataPath)
	}
	return runs.Load(out, weights, dev)
}

// runDir resolves --out of sample, eval and export: as given, or else the
// newest run under config.DefaultRunsDir, named on stderr. A weights file
// of its own needs no run folder: then it may be "".
func runDir(out, weights string, stderr io.Writer) (string, error) {
	if out != "" {
		return out, nil
	}
	d, note, err := runs.RunFolder("")
	if err != nil {
		if standalone("", weights) {
			return "", nil
		}
		return "", err
	}
	if !standalone(d, weights) {
		fmt.Fprintln(stderr, note)
	}
	return d, nil
}
