// Package nvmltest helps test code that uses monitor/nvml on machines with
// no GPU: it compiles a stand-in libnvidia-ml.so.1 (testdata/fakenvml.c)
// with the system's C compiler and runs a test in a child process that
// loads it, through FLEET_CUDA_PATH, in place of the real library.
//
// The stand-in reports two GPUs, "Fake GPU 0" and "Fake GPU 1", with fixed
// figures (see the C file), and reads these environment variables:
// FAKE_NVML_INIT (the code nvmlInit_v2 returns), FAKE_NVML_COUNT (GPUs),
// FAKE_NVML_PROCS (compute processes per GPU) and FAKE_NVML_GROW (processes
// that appear between the size query and the fill).
package nvmltest

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fleetml/fleet/internal/testenv"
)

//go:embed testdata/fakenvml.c
var source []byte

// childEnv marks the child process.
const childEnv = "FLEET_NVMLTEST_CHILD"

// InChild reports whether this test process is the child Run started, with
// the stand-in library in place of the real one.
func InChild() bool { return os.Getenv(childEnv) == "1" }

// Build compiles the stand-in into a temporary folder and returns the
// folder. It skips t where there is no C compiler, or off linux.
func Build(t testing.TB) string {
	t.Helper()
	testenv.NeedSelfExec(t) // the library is built for this machine, and Run starts the binary
	if runtime.GOOS != "linux" {
		t.Skip("the stand-in NVML is built on linux")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the stand-in NVML with", cc)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "fakenvml.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", filepath.Join(dir, "libnvidia-ml.so.1"), src).CombinedOutput()
	if err != nil {
		t.Skipf("cannot build the stand-in NVML: %v\n%s", err, out)
	}
	return dir
}

// Run runs the test named test (a top-level test of this test binary) in
// a child process that finds the stand-in in dir, with extra environment
// variables ("NAME=value"), and returns its output. In the child, InChild
// is true. It fails t if the child fails.
func Run(t testing.TB, dir, test string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", "FLEET_CUDA_PATH="+dir)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s with the stand-in NVML (%v): %v\n%s", test, env, err, out)
	} else if !strings.Contains(string(out), "--- PASS: "+test) {
		t.Errorf("%s did not pass in the child (%v):\n%s", test, env, out)
	}
	return string(out)
}
