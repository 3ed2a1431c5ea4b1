package opencl

import (
	"embed"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The OpenCL kernels: kernels/common.cl, put before each file, and one file
// per group of ops, in OpenCL C 1.2. They are the CUDA kernels' twins (see
// common.cl for how their signatures map), kept as separate sources: the
// CUDA kernels are C++ (templates, warp shuffles, tensor-core mma.sync,
// float4 vectors), which OpenCL C has no portable form of, and a
// portability header over both would hide more than it shares.
//
//go:embed kernels/*.cl
var sources embed.FS

// File is one kernel source file, templated (see common.cl).
type File struct {
	Name   string // e.g. "elementwise.cl"
	Source string // after templating, without common.cl
}

// Files returns every kernel file but common.cl, templated, sorted by name.
// A file that does not template is a bug in the embedded sources: Files
// panics.
func Files() []File {
	ents, err := sources.ReadDir("kernels")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	var out []File
	for _, e := range ents {
		if e.Name() == "common.cl" {
			continue
		}
		src, err := expand(read(e.Name()))
		if err != nil {
			panic(fmt.Sprintf("opencl: %s: %v", e.Name(), err))
		}
		out = append(out, File{Name: e.Name(), Source: src})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Common is common.cl.
func Common() string { return read("common.cl") }

// Source is the whole source the device's compiler builds for f.
func Source(f File) string {
	return Common() + "\n#line 1\n" + f.Source
}

var kernelRE = regexp.MustCompile(`__kernel\s+void\s+(\w+)\s*\(`)

// Kernels lists the kernels defined in src, in order.
func Kernels(src string) []string {
	var names []string
	for _, m := range kernelRE.FindAllStringSubmatch(src, -1) {
		names = append(names, m[1])
	}
	return names
}

func read(name string) string {
	b, err := sources.ReadFile("kernels/" + name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// expand templates src: the lines between "//@for X in w1 w2 ..." and its
// "//@end" are repeated for each word with $X replaced by it; blocks nest.
// Lines keep their count (each repetition is marked with #line), so a
// compiler's message names the line of the file.
func expand(src string) (string, error) {
	lines := strings.Split(src, "\n")
	out, next, err := expandLines(lines, 0, nil)
	if err != nil {
		return "", err
	}
	if next != len(lines) {
		return "", fmt.Errorf("line %d: //@end without //@for", next+1)
	}
	return strings.Join(out, "\n"), nil
}

// expandLines expands lines from i until an unmatched //@end (returning
// its index) or the end, with the substitutions in vars applied.
func expandLines(lines []string, i int, vars []string) (out []string, next int, err error) {
	for i < len(lines) {
		t := strings.TrimSpace(lines[i])
		switch {
		case t == "//@end":
			return out, i, nil
		case strings.HasPrefix(t, "//@for "):
			f := strings.Fields(strings.TrimPrefix(t, "//@for "))
			if len(f) < 3 || f[1] != "in" || len(f[0]) != 1 {
				return nil, 0, fmt.Errorf("line %d: want //@for X in word...", i+1)
			}
			end := -1
			for _, w := range f[2:] {
				body, e, err := expandLines(lines, i+1, append(vars, "$"+f[0], w))
				if err != nil {
					return nil, 0, err
				}
				if e >= len(lines) {
					return nil, 0, fmt.Errorf("line %d: //@for without //@end", i+1)
				}
				out = append(out, fmt.Sprintf("#line %d", i+2))
				out = append(out, body...)
				end = e
			}
			out = append(out, fmt.Sprintf("#line %d", end+2))
			i = end + 1
		default:
			l := lines[i]
			for k := 0; k < len(vars); k += 2 {
				l = strings.ReplaceAll(l, vars[k], vars[k+1])
			}
			out = append(out, l)
			i++
		}
	}
	return out, i, nil
}
