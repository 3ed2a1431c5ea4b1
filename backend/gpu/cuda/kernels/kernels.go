package kernels

import (
	"embed"
	"regexp"
	"sort"
	"strings"
)

//go:embed *.cu common.cuh mma.cuh nvrtc_prelude.cuh
var files embed.FS

// File is one kernel source file.
type File struct {
	Name   string // e.g. "elementwise.cu"
	Source string
}

// Files returns every kernel source file, sorted by name.
func Files() []File {
	ents, err := files.ReadDir(".")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	var out []File
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".cu") {
			continue
		}
		b, _ := files.ReadFile(e.Name())
		out = append(out, File{Name: e.Name(), Source: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Common is common.cuh and mma.cuh: helpers every kernel may use, and the
// warp-level matrix primitives.
func Common() string { return read("common.cuh") + "\n" + read("mma.cuh") }

// NVRTCPrelude is what NVRTC builds put before Common.
func NVRTCPrelude() string { return read("nvrtc_prelude.cuh") }

// NVRTCSource is the whole translation unit NVRTC compiles for f.
func NVRTCSource(f File) string {
	return NVRTCPrelude() + "\n" + Common() + "\n#line 1 \"" + f.Name + "\"\n" + f.Source
}

var globalRE = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(`)

// Kernels lists the __global__ functions declared in src, in order.
func Kernels(src string) []string {
	var names []string
	for _, m := range globalRE.FindAllStringSubmatch(src, -1) {
		names = append(names, m[1])
	}
	return names
}

func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}
