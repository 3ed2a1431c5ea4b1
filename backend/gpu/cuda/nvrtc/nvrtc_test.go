package nvrtc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/kcache"
	"github.com/fleetml/fleet/backend/gpu/kernels"
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
// libnvrtc11.2 is enough). Where $FLEET_PREBUILD_KERNELS names a folder,
// it also writes each cubin there under kcache.PrebuiltKey: the prebuilt
// kernels a GPU machine loads ($FLEET_KERNEL_PREBUILT) where its driver
// takes them, instead of compiling (scripts/gpu-check.sh build).
func TestCompileKernels(t *testing.T) {
	n := open(t)
	var prebuilt *kcache.Cache
	if dir := os.Getenv("FLEET_PREBUILD_KERNELS"); dir != "" {
		var err error
		if prebuilt, err = kcache.Open(dir); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("NVRTC %s from %s (builtins %v)", n.Version(), n.Lib.Path, n.Lib.Companions)
	if archs, err := n.SupportedArchs(); err == nil {
		t.Logf("supported architectures: %v", archs)
	}
	files := cudakernels.Files()
	if len(files) == 0 {
		t.Fatal("no kernel files")
	}
	for _, arch := range []string{"sm_80", "sm_90"} {
		for _, f := range files {
			src := cudakernels.NVRTCSource(f)
			names := cudakernels.Kernels(f.Source)
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
			if prebuilt != nil {
				if err := prebuilt.Put(kcache.PrebuiltKey(src, arch, KernelOptions), cubin); err != nil {
					t.Error(err)
				}
			}
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
	f := cudakernels.Files()[0]
	src := cudakernels.NVRTCSource(f)
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

// ptxOps are the instructions TestKernelPTX counts in each kernel file's
// PTX: tensor-core products, their fragment loads, asynchronous copies, and
// 16-byte loads from global and shared memory.
var ptxOps = []struct{ name, re string }{
	{"mma", `\bmma\.sync\b`},
	{"ldmatrix", `\bldmatrix\b`},
	{"cp.async", `\bcp\.async\b`},
	{"ld.global.v4", `\bld\.global(\.[a-z]+)*\.v4\b`},
	{"ld.shared.v4", `\bld\.shared(\.[a-z]+)*\.v4\b`},
}

// ptxasRE reads ptxas's verbose report: each kernel's spills, then its
// registers.
var (
	ptxasEntryRE = regexp.MustCompile(`Function properties for (\w+)`)
	ptxasSpillRE = regexp.MustCompile(`(\d+) bytes spill stores, (\d+) bytes spill loads`)
	ptxasRegsRE  = regexp.MustCompile(`Used (\d+) registers`)
)

// memoryBound are the kernel files whose kernels move memory more than they
// compute: their PTX must have 128-bit global loads (ld.global.v4).
var memoryBound = map[string]bool{"layernorm.cu": true, "crossentropy.cu": true, "embedding.cu": true, "adamw.cu": true,
	"elementwise.cu": true, "gelu.cu": true, "llama.cu": true}

// TestKernelPTX compiles every kernel file to PTX and to a cubin with
// ptxas's report, for sm_80 and sm_90, and logs what the code is made of:
// one line per file and architecture,
//
//	PTX attention.cu sm_90: mma=N ldmatrix=N cp.async=N ld.global.v4=N ld.shared.v4=N
//
// (the counts of those instructions in the PTX NVRTC emits), then each
// kernel's registers and spills. It fails where a file does not compile,
// where ptxas does not report a kernel, where a tensor-core file has no
// mma.sync and where a memory-bound file (memoryBound) has no 128-bit
// global load; the other figures are for reading.
func TestKernelPTX(t *testing.T) {
	n := open(t)
	res := make([]*regexp.Regexp, len(ptxOps))
	for i, op := range ptxOps {
		res[i] = regexp.MustCompile(op.re)
	}
	for _, arch := range []string{"sm_80", "sm_90"} {
		virtual := "compute_" + strings.TrimPrefix(arch, "sm_")
		for _, f := range cudakernels.Files() {
			src := cudakernels.NVRTCSource(f)
			ptx, _, err := n.Compile(src, f.Name, virtual, KernelOptions...)
			if err != nil {
				t.Errorf("%s %s: %v", f.Name, virtual, err)
				continue
			}
			var counts []string
			for i, op := range ptxOps {
				counts = append(counts, fmt.Sprintf("%s=%d", op.name, len(res[i].FindAllIndex(ptx, -1))))
			}
			t.Logf("PTX %s %s: %s", f.Name, arch, strings.Join(counts, " "))
			if memoryBound[f.Name] && len(res[3].FindAllIndex(ptx, -1)) == 0 {
				t.Errorf("%s %s: a memory-bound kernel file with no %s in its PTX", f.Name, arch, ptxOps[3].name)
			}
			// A file of tensor-core kernels must compile to tensor-core
			// instructions (the simulated GPU prices those kernels at
			// the tensor cores' rate on the strength of it).
			for _, k := range cudakernels.Kernels(f.Source) {
				if kernels.TensorCoreKernel(k) && len(res[0].FindAllIndex(ptx, -1)) == 0 {
					t.Errorf("%s %s: %s is a tensor-core kernel, and the PTX has no %s", f.Name, arch, k, ptxOps[0].name)
				}
			}
			_, log, err := n.Compile(src, f.Name, arch, append(append([]string{}, KernelOptions...), "--ptxas-options=-v")...)
			if err != nil {
				t.Errorf("%s %s: %v", f.Name, arch, err)
				continue
			}
			reported := map[string]bool{}
			var kernel, spills string
			for _, line := range strings.Split(log, "\n") {
				if m := ptxasEntryRE.FindStringSubmatch(line); m != nil {
					kernel, spills = m[1], ""
				}
				if m := ptxasSpillRE.FindStringSubmatch(line); m != nil {
					spills = fmt.Sprintf("%s/%s bytes of spill stores/loads", m[1], m[2])
				}
				if m := ptxasRegsRE.FindStringSubmatch(line); m != nil && kernel != "" {
					t.Logf("  %s %s: %s registers, %s", arch, kernel, m[1], spills)
					reported[kernel] = true
					kernel = ""
				}
			}
			for _, k := range cudakernels.Kernels(f.Source) {
				if !reported[k] {
					t.Errorf("%s %s: ptxas reported no registers for %s", f.Name, arch, k)
				}
			}
		}
	}
}

// TestPTXOpPatterns: the counted patterns find the instructions in the
// forms NVRTC writes them, and nothing else.
func TestPTXOpPatterns(t *testing.T) {
	ptx := `	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f5, %f6, %f7, %f8};
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1, %r2, %r3, %r4}, [%r9];
	ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r1, %r2}, [%r9];
	cp.async.cg.shared.global [%r1], [%rd2], 16;
	cp.async.commit_group;
	cp.async.wait_group 0;
	ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];
	ld.global.v2.f32 {%f1, %f2}, [%rd1];
	ld.shared.v4.u32 {%r1, %r2, %r3, %r4}, [%r5];
	ld.shared.f32 %f1, [%r5];
	st.global.v4.f32 [%rd1], {%f1, %f2, %f3, %f4};`
	want := map[string]int{"mma": 1, "ldmatrix": 2, "cp.async": 3, "ld.global.v4": 1, "ld.shared.v4": 1}
	for _, op := range ptxOps {
		if got := len(regexp.MustCompile(op.re).FindAllStringIndex(ptx, -1)); got != want[op.name] {
			t.Errorf("%s: %d found, want %d", op.name, got, want[op.name])
		}
	}
}

// TestWarpMatrixPrimitivesCompile compiles the primitives' probe
// (kernels/testdata/mma_probe.cu, which the emulator tests run) with NVRTC
// for sm_80 and sm_90: the inline PTX assembles, and the PTX holds the
// tensor-core product, ldmatrix and cp.async.
func TestWarpMatrixPrimitivesCompile(t *testing.T) {
	n := open(t)
	src, err := os.ReadFile("../kernels/testdata/mma_probe.cu")
	if err != nil {
		t.Fatal(err)
	}
	unit := cudakernels.NVRTCSource(cudakernels.File{Name: "mma_probe.cu", Source: string(src)})
	for _, arch := range []string{"sm_80", "sm_90"} {
		if _, _, err := n.Compile(unit, "mma_probe.cu", arch, KernelOptions...); err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		ptx, _, err := n.Compile(unit, "mma_probe.cu", "compute_"+strings.TrimPrefix(arch, "sm_"), KernelOptions...)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		var counts []string
		for _, op := range ptxOps {
			k := len(regexp.MustCompile(op.re).FindAllIndex(ptx, -1))
			counts = append(counts, fmt.Sprintf("%s=%d", op.name, k))
			if k == 0 && op.name != "ld.global.v4" && op.name != "ld.shared.v4" {
				t.Errorf("%s: the probe's PTX has no %s", arch, op.name)
			}
		}
		t.Logf("PTX mma_probe.cu %s: %s", arch, strings.Join(counts, " "))
	}
}
