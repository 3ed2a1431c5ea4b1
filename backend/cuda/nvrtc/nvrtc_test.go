package nvrtc

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend/cuda/kcache"
	"github.com/fleetml/fleet/backend/cuda/kernels"
)

// open returns the machine's NVRTC or skips, saying why.
func open(t *testing.T) *NVRTC {
	t.Helper()
	n, err := Open()
	if err != nil {
		t.Skipf("no NVRTC, so no kernel is compiled here: %v", err)
	}
	return n
}

// TestCompileKernels compiles every kernel file for the architectures fleet
// ships cubins for, and fails if any does not compile or its cubin lacks a
// kernel. This is what CI runs on machines with no GPU (Debian's
// libnvrtc11.2 is enough).
func TestCompileKernels(t *testing.T) {
	n := open(t)
	t.Logf("NVRTC %s from %s (builtins %v)", n.Version(), n.Lib.Path, n.Lib.Companions)
	if archs, err := n.SupportedArchs(); err == nil {
		t.Logf("supported architectures: %v", archs)
	}
	files := kernels.Files()
	if len(files) == 0 {
		t.Fatal("no kernel files")
	}
	for _, arch := range []string{"sm_80", "sm_90"} {
		for _, f := range files {
			src := kernels.NVRTCSource(f)
			names := kernels.Kernels(f.Source)
			cubin, log, err := n.Compile(src, f.Name, arch, KernelOptions...)
			if err != nil {
				t.Errorf("%s %s: %v", f.Name, arch, err)
				continue
			}
			if !bytes.HasPrefix(cubin, []byte("\x7fELF")) {
				t.Errorf("%s %s: the output is not an ELF cubin", f.Name, arch)
				continue
			}
			for _, k := range names {
				if !bytes.Contains(cubin, []byte(k+"\x00")) {
					t.Errorf("%s %s: cubin lacks kernel %s", f.Name, arch, k)
				}
			}
			t.Logf("%s %s cubin %d bytes: %s", f.Name, arch, len(cubin), strings.Join(names, " "))
			if log != "" {
				t.Logf("%s %s log:\n%s", f.Name, arch, log)
			}
		}
	}
}

func TestCompileErrorCarriesLog(t *testing.T) {
	n := open(t)
	src := `extern "C" __global__ void fleet_bad(float *p) { p[0] = undeclared_thing; }`
	_, log, err := n.Compile(src, "bad.cu", "sm_80", KernelOptions...)
	if err == nil {
		t.Fatal("a kernel using an undeclared name compiled")
	}
	if !errors.Is(err, ErrCompilation) {
		t.Errorf("errors.Is(err, ErrCompilation) is false: %v", err)
	}
	if !strings.Contains(log, "undeclared_thing") || !strings.Contains(err.Error(), "bad.cu") || !strings.Contains(err.Error(), "undeclared_thing") {
		t.Errorf("error %q / log %q do not name the file and the problem", err, log)
	}
	t.Log(err)

	if _, _, err := n.Compile(src, "x.cu", ""); err == nil || !strings.Contains(err.Error(), "architecture") {
		t.Errorf("no architecture: %v", err)
	}
	_, _, err = n.Compile("extern \"C\" __global__ void k() {}", "opt.cu", "sm_80", "--no-such-option")
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrorInvalidOption {
		t.Errorf("unknown option: %v", err)
	}
}

func TestCompilePTX(t *testing.T) {
	n := open(t)
	ptx, _, err := n.Compile(`extern "C" __global__ void fleet_k(float *p) { p[threadIdx.x] = 1.0f; }`, "k.cu", "compute_80", KernelOptions...)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ptx, []byte(".entry fleet_k")) || bytes.IndexByte(ptx, 0) >= 0 {
		t.Errorf("PTX: %.200q", ptx)
	}
}

func TestOptions(t *testing.T) {
	if got := strings.Join(Options("sm_90", "-std=c++17"), " "); got != "--gpu-architecture=sm_90 -std=c++17" {
		t.Error(got)
	}
	if got := strings.Join(Options("sm_90", "-arch=sm_80"), " "); got != "-arch=sm_80" {
		t.Error(got)
	}
	if a := archOf([]string{"-x", "--gpu-architecture", "compute_90"}); a != "compute_90" {
		t.Error(a)
	}
}

// TestCompileThroughCache compiles a kernel file through the kernel cache:
// the second load is a hit with the same cubin.
func TestCompileThroughCache(t *testing.T) {
	n := open(t)
	c, err := kcache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := kernels.Files()[0]
	src := kernels.NVRTCSource(f)
	key := kcache.Key(src, "sm_80", n.Version(), KernelOptions)
	compile := func() ([]byte, error) {
		cubin, _, err := n.Compile(src, f.Name, "sm_80", KernelOptions...)
		return cubin, err
	}
	first, hit, err := c.Load(key, compile)
	if err != nil || hit {
		t.Fatalf("first load: hit %v, %v", hit, err)
	}
	second, hit, err := c.Load(key, compile)
	if err != nil || !hit || !bytes.Equal(first, second) {
		t.Fatalf("second load: hit %v, same %v, %v", hit, bytes.Equal(first, second), err)
	}
}
