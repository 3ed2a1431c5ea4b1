package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

func TestKebab(t *testing.T) {
	for field, want := range map[string]string{
		"BatchSize": "batch-size", "LR": "lr", "MinLR": "min-lr", "LRDecayIters": "lr-decay-iters",
		"NLayer": "n-layer", "BucketMB": "bucket-mb", "Beta1": "beta1", "InitFrom": "init-from", "Out": "out",
	} {
		if got := kebab(field); got != want {
			t.Errorf("kebab(%q) = %q, want %q", field, got, want)
		}
	}
}

// TestEverySettingHasAFlag reads every string of the module's code for
// settings named in braces (package setting) and checks that flagName
// turns each into a flag that a command of fleet has.
func TestEverySettingHasAFlag(t *testing.T) {
	flags := map[string]bool{}
	dash := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	for _, cmd := range [][]string{{"prepare"}, {"run"}, {"train"}, {"sample"}, {"eval"}, {"ngram"}, {"export"},
		{"bench"}, {"smi"}, {"report"}, {"tokenizer", "train"}, {"tokenizer", "encode"}} {
		var out, errb bytes.Buffer
		run(append(cmd, "-h"), &out, &errb)
		for _, m := range dash.FindAllStringSubmatch(out.String()+errb.String(), -1) {
			flags[m[1]] = true
		}
	}
	if !flags["batch-size"] || !flags["nproc-per-node"] || !flags["steps"] {
		t.Fatalf("the commands' help lists too few flags to check against: %v", flags)
	}
	placeholder := regexp.MustCompile(`\{([A-Z][A-Za-z0-9]*)\}`)
	named := map[string][]string{} // field -> where
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, m := range placeholder.FindAllStringSubmatch(s, -1) {
				named[m[1]] = append(named[m[1]], fset.Position(lit.Pos()).String())
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(named) < 20 {
		t.Fatalf("found only %d settings named in the code: %v", len(named), named)
	}
	var missing []string
	for field, where := range named {
		if f := strings.TrimPrefix(flagName(field), "--"); !flags[f] {
			missing = append(missing, field+" (as --"+f+", at "+where[0]+")")
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("settings named in errors that no flag sets:\n%s", strings.Join(missing, "\n"))
	}
}
