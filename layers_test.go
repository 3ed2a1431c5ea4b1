package fleet

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// layers ranks the project's packages: a package may import packages of
// its own rank or below, never above (docs/design.md, "Layers"). A
// package is ranked by the longest prefix listed.
var layers = []struct {
	rank     int
	prefixes []string
}{
	{0, []string{"internal"}},
	{1, []string{"backend"}},
	{2, []string{"tensor"}},
	{3, []string{"nn", "model", "optim", "data", "tokenizer", "checkpoint"}},
	{4, []string{"pipeline", "dist", "launch", "monitor"}},
	{5, []string{"train"}},
	{6, []string{"bench", "lab", "runs"}},
	{7, []string{"cmd"}},
	{8, []string{""}}, // the root package, which may gather anything
}

const module = "github.com/fleetml/fleet"

// rankOf returns the rank of a package path inside the module.
func rankOf(pkg string) (int, bool) {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	best, bestLen := -1, -1
	for _, l := range layers {
		for _, p := range l.prefixes {
			if (rel == p || strings.HasPrefix(rel, p+"/") || p == "") && len(p) > bestLen {
				best, bestLen = l.rank, len(p)
			}
		}
	}
	return best, best >= 0
}

// driverOf is the GPU driver a package belongs to (backend/gpu/KIND and
// what is under it), or "".
func driverOf(pkg string) string {
	rel, ok := strings.CutPrefix(pkg, module+"/backend/gpu/")
	if !ok {
		return ""
	}
	kind, _, _ := strings.Cut(rel, "/")
	switch kind {
	case "cuda", "opencl":
		return kind
	}
	return ""
}

// TestLayers checks with go list that no package imports one above it,
// directly or through another, and that no GPU driver's package depends on
// another driver's. Tests may reach above their package (the
// CUDA backend's tests run the whole GPT, for instance): only what a
// package's own code depends on is checked.
func TestLayers(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the packages")
	}
	out, err := exec.Command(gobin, "list", "-json=ImportPath,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		ImportPath string
		Deps       []string
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		r, ok := rankOf(p.ImportPath)
		if !ok {
			t.Errorf("%s has no layer: add it to the layers table and to docs/design.md", p.ImportPath)
			continue
		}
		drv := driverOf(p.ImportPath)
		for _, d := range p.Deps {
			if !strings.HasPrefix(d, module+"/") {
				continue
			}
			if dr, _ := rankOf(d); dr > r {
				t.Errorf("%s (layer %d) depends on %s (layer %d), a layer above it", p.ImportPath, r, d, dr)
			}
			if dd := driverOf(d); drv != "" && dd != "" && dd != drv {
				t.Errorf("%s, of the %s driver, depends on %s, of the %s driver: drivers stand side by side", p.ImportPath, drv, d, dd)
			}
		}
	}
	if n < 20 {
		t.Fatalf("go list listed %d packages; expected the whole module", n)
	}
}
