package testenv

import (
	"math"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// FakeLibrary builds the C source src (a test's stand-in for an NVIDIA
// library) into soname in a temporary folder with the system's C compiler,
// extra flags after the source, and points $FLEET_CUDA_PATH at the folder,
// so that the library search finds it first. It skips the test, saying
// why, where it cannot: not Linux, no C compiler, a failed build.
func FakeLibrary(t testing.TB, src, soname string, flags ...string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skipf("no C compiler to build the fake %s", soname)
	}
	dir := t.TempDir()
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", filepath.Join(dir, soname), src}, flags...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Skipf("cannot build the fake %s: %v\n%s", soname, err, out)
	}
	t.Setenv("FLEET_CUDA_PATH", dir)
}

// SameBits reports whether a and b hold the same float32s bit for bit (a
// NaN equals a NaN of the same bits; -0 differs from +0).
func SameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
