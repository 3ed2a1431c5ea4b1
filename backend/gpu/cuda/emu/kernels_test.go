package emu_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	"github.com/fleetml/fleet/backend/gpu/cuda/kernels"
)

// kernelFile returns the kernel file name of package kernels.
func kernelFile(t *testing.T, name string) kernels.File {
	t.Helper()
	for _, f := range kernels.Files() {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("package kernels has no file %s", name)
	return kernels.File{}
}

// testModule builds testdata/name.
func testModule(t *testing.T, name string) *emu.Module { return testModuleB(t, name) }

// testModuleB builds testdata/name.
func testModuleB(t testing.TB, name string) *emu.Module {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return emu.MustBuildSource(t, name, string(src))
}

// runCases runs each case on m under every schedule, in name order.
func runCases(t *testing.T, m *emu.Module, cases emu.Cases) {
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { emu.RunSchedules(t, m, cases[name]) })
	}
}

// TestCasesCoverage checks the registry's coverage check: Cases.Run fails
// for each kernel without a case, which is how the kernel tests make sure
// every kernel runs under the harness.
func TestCasesCoverage(t *testing.T) {
	files := []kernels.File{
		{Name: "a.cu", Source: `// extern "C" __global__ void fleet_commented_out(int *x) {}
extern "C" __global__ void fleet_a(float *__restrict__ x, long long n) {}
extern "C" __global__ void __launch_bounds__(256) fleet_b(const unsigned short *x, int n) {}`},
		{Name: "b.cu", Source: `extern "C" __global__ void fleet_c(void) {}`},
	}
	cases := emu.Cases{}
	cases.Add(map[string]emu.Case{
		"fleet_a":    func(*testing.T, *emu.Module) {},
		"fleet_gone": func(*testing.T, *emu.Module) {},
	})
	uncovered, unknown, err := cases.Missing(files)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(uncovered, []string{"fleet_b", "fleet_c"}) || !slices.Equal(unknown, []string{"fleet_gone"}) {
		t.Errorf("uncovered %v, unknown %v; want [fleet_b fleet_c] and [fleet_gone]", uncovered, unknown)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "two cases for kernel fleet_a") {
			t.Errorf("a kernel registered twice: got %v", r)
		}
	}()
	cases.Add(map[string]emu.Case{"fleet_a": func(*testing.T, *emu.Module) {}})
}
