package libs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// libm finds the C math library through the loader, as a stand-in for an
// NVIDIA library that every glibc system has.
func libm(t *testing.T) *Lib {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("dlopen is used on linux only")
	}
	t.Setenv("FLEET_CUDA_PATH", "")
	l, err := Search(Library{Name: "m", Sonames: []string{"libm.so.6"}})
	if err != nil {
		t.Skipf("no libm.so.6 to test with: %v", err)
	}
	return l
}

func TestLoaderSearchRecordsPath(t *testing.T) {
	l := libm(t)
	if l.Where != "loader search" {
		t.Errorf("found in %q, want the loader's search", l.Where)
	}
	if !filepath.IsAbs(l.Path) {
		t.Errorf("path %q: want the absolute path the loader chose", l.Path)
	}
	t.Logf("libm.so.6: %s (%s)", l.Path, l.Where)
}

func TestSearchFleetPathFirst(t *testing.T) {
	real := libm(t).Path
	if _, err := os.Stat(real); err != nil {
		t.Skipf("cannot see %s: %v", real, err)
	}
	dir := t.TempDir()
	so := filepath.Join(dir, "libfleettest.so.1")
	comp := filepath.Join(dir, "libfleettest-companion.so.1")
	// Copies, not links: under user-mode emulation a link's target is not
	// translated to the emulated system's root the way a path is.
	b, err := os.ReadFile(real)
	if err != nil {
		t.Skipf("cannot read %s: %v", real, err)
	}
	for _, p := range []string{so, comp} {
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FLEET_CUDA_PATH", filepath.Join(dir, "absent")+string(os.PathListSeparator)+dir)
	var compDir string
	l, err := Search(Library{
		Name:    "fleettest",
		Sonames: []string{"libfleettest.so.2", "libfleettest.so.1"},
		Companions: func(d, soname string) []string {
			compDir = d
			return existing(d, "libfleettest-companion.so.1", "libfleettest-nothere.so.1")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if l.Path != so || l.Soname != "libfleettest.so.1" || l.Where != "$FLEET_CUDA_PATH" {
		t.Errorf("found %s (%s, %s), want %s from $FLEET_CUDA_PATH", l.Path, l.Soname, l.Where, so)
	}
	if compDir != dir || len(l.Companions) != 1 || l.Companions[0] != comp || len(l.CompanionErrs) != 0 {
		t.Errorf("companions %v (errors %v) from %s, want [%s]", l.Companions, l.CompanionErrs, compDir, comp)
	}
	if v := l.Version(); v == "" {
		t.Errorf("no version from the file name %s", real)
	}
	l.SetVersion("9.9")
	if v := l.Version(); v != "9.9" {
		t.Errorf("Version() = %q after SetVersion(9.9)", v)
	}

	// A present function calls; a missing one is an error naming it.
	labs := l.Func("labs")
	if labs.Err() != nil {
		t.Skipf("libm lacks labs: %v", labs.Err())
	}
	neg := -1234
	if r, err := labs.Call(uintptr(neg)); err != nil || int(r) != 1234 {
		t.Errorf("labs(-1234) = %d, %v", int(r), err)
	}
	if r, err := labs.Fast(uintptr(neg)); err != nil || int(r) != 1234 {
		t.Errorf("Fast labs(-1234) = %d, %v", int(r), err)
	}
	if n := testing.AllocsPerRun(100, func() { labs.Fast(uintptr(neg), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10) }); n != 0 {
		t.Errorf("Fast allocates %v times a call", n)
	}
	missing := l.Func("fleetNoSuchFunction")
	if _, err := missing.Fast(1); err == nil {
		t.Error("Fast of a missing symbol: no error")
	}
	_, err = missing.Call(1, 2)
	var mse *MissingSymbolError
	if !errors.As(err, &mse) || mse.Symbol != "fleetNoSuchFunction" || !strings.Contains(err.Error(), "fleetNoSuchFunction") {
		t.Errorf("missing symbol call: %v", err)
	}
	if f := l.FuncAny("fleetNoSuchFunction", "labs"); f.Name != "labs" || f.Addr == 0 {
		t.Errorf("FuncAny took %q (addr %#x), want the fallback labs", f.Name, f.Addr)
	}
}

func TestNotFoundSaysWhereItLooked(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dlopen is used on linux only")
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "libfleetbad.so.1")
	if err := os.WriteFile(bad, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FLEET_CUDA_PATH", dir)
	t.Setenv("CUDA_HOME", filepath.Join(dir, "cuda-home"))
	_, err := Search(Library{Name: "fleetbad", Sonames: []string{"libfleetabsent.so.2", "libfleetbad.so.1"}})
	if err == nil {
		t.Fatal("a non-ELF file loaded")
	}
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is(err, ErrNotFound) is false for %v", err)
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{
		"cuda: libfleetabsent.so.2, libfleetbad.so.1 not found (looked in: ",
		"$FLEET_CUDA_PATH " + bad + ": ",
		"loader search libfleetabsent.so.2: ",
		"$CUDA_HOME " + filepath.Join(dir, "cuda-home", "lib64") + ": no such folder",
		"/usr/local/cuda/lib64",
		"python site-packages",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q", want)
		}
	}
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Tried[0].Path != bad || nf.Tried[0].Reason == "" {
		t.Errorf("first attempt %+v, want %s with dlopen's reason", nf.Tried[0], bad)
	}
}

func TestLocations(t *testing.T) {
	venv := t.TempDir()
	for _, p := range []string{"python3.9/site-packages/nvidia/cublas/lib", "python3.12/site-packages/nvidia/cublas/lib", "python3.12/site-packages/nvidia/cu13/lib"} {
		if err := os.MkdirAll(filepath.Join(venv, "lib", p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FLEET_CUDA_PATH", "/opt/a:/opt/b")
	t.Setenv("CUDA_HOME", "/opt/cuda")
	t.Setenv("VIRTUAL_ENV", venv)
	var got []string
	for _, l := range Locations() {
		got = append(got, l.Where+"="+l.Dir)
	}
	want := []string{
		"$FLEET_CUDA_PATH=/opt/a",
		"$FLEET_CUDA_PATH=/opt/b",
		"loader search=",
		"$CUDA_HOME=/opt/cuda/lib64",
		"cuda toolkit=/usr/local/cuda/lib64",
		"python site-packages=" + filepath.Join(venv, "lib/python3.12/site-packages/nvidia/cu13/lib"),
		"python site-packages=" + filepath.Join(venv, "lib/python3.12/site-packages/nvidia/cublas/lib"),
		"python site-packages=" + filepath.Join(venv, "lib/python3.9/site-packages/nvidia/cublas/lib"),
	}
	if len(got) < len(want) {
		t.Fatalf("locations %q", got)
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("location %d = %q, want %q", i, got[i], w)
		}
	}
	if last := got[len(got)-1]; multiarch() != "" && last != "system=/usr/lib/"+multiarch() {
		t.Errorf("last location %q, want the multiarch folder", last)
	}
}

func TestNVRTCBuiltinsChoice(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"libnvrtc-builtins.so.12.4", "libnvrtc-builtins.so.12.8", "libnvrtc-builtins.so.12.8.93", "libnvrtc-builtins.so.11.8", "libnvrtc-builtins.so.13.0"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	for so, want := range map[string]string{
		"libnvrtc.so.12":   "libnvrtc-builtins.so.12.8",
		"libnvrtc.so.11.2": "libnvrtc-builtins.so.11.8",
		"libnvrtc.so.13":   "libnvrtc-builtins.so.13.0",
	} {
		got := nvrtcBuiltins(dir, so)
		if len(got) != 1 || filepath.Base(got[0]) != want {
			t.Errorf("%s: builtins %v, want %s", so, got, want)
		}
	}
	if got := nvrtcBuiltins(t.TempDir(), "libnvrtc.so.12"); got != nil {
		t.Errorf("empty folder gives %v", got)
	}
	// A soname that links to its versioned file takes the builtins of its
	// own version, not the newest.
	os.WriteFile(filepath.Join(dir, "libnvrtc.so.12.4.127"), nil, 0o644)
	if err := os.Symlink("libnvrtc.so.12.4.127", filepath.Join(dir, "libnvrtc.so.12")); err != nil {
		t.Fatal(err)
	}
	if got := nvrtcBuiltins(dir, "libnvrtc.so.12"); len(got) != 1 || filepath.Base(got[0]) != "libnvrtc-builtins.so.12.4" {
		t.Errorf("libnvrtc.so.12 of 12.4: builtins %v, want libnvrtc-builtins.so.12.4", got)
	}
}

// TestLocationsFindPythonOnPath finds the pip wheels of the python3 that
// $PATH finds, in an environment nobody activated.
func TestLocationsFindPythonOnPath(t *testing.T) {
	env := t.TempDir()
	lib := filepath.Join(env, "lib", "python3.12", "site-packages", "nvidia", "cu13", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(env, "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(env, "bin", "python3"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", filepath.Join(env, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("VIRTUAL_ENV", "")
	t.Setenv("CONDA_PREFIX", "")
	for _, l := range Locations() {
		if l.Dir == lib && l.Where == "python site-packages" {
			return
		}
	}
	t.Errorf("the wheels of the python3 on $PATH (%s) are not searched: %v", lib, Locations())
}

// TestOpenNVIDIA reports what this machine has; absence is not a failure.
func TestOpenNVIDIA(t *testing.T) {
	for _, l := range All() {
		lib, err := Open(l)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v is not ErrNotFound", l.Name, err)
			}
			t.Logf("%s: %v", l.Name, err)
			continue
		}
		t.Logf("%s: %s (%s) version %q companions %v %v", l.Name, lib.Path, lib.Where, lib.Version(), lib.Companions, lib.CompanionErrs)
		if l.Name == "nvrtc" && filepath.IsAbs(lib.Path) {
			if b := nvrtcBuiltins(filepath.Dir(lib.Path), lib.Soname); len(b) > 0 && len(lib.Companions) == 0 {
				t.Errorf("nvrtc: %s is beside it but was not loaded (%v)", b[0], lib.CompanionErrs)
			}
		}
	}
	rep := Report()
	if len(rep) < len(All()) {
		t.Fatalf("report has %d entries, want %d", len(rep), len(All()))
	}
	for i, l := range All() {
		if rep[i].Name != l.Name || (rep[i].Lib == nil) == (rep[i].Err == nil) {
			t.Errorf("report entry %d: %+v", i, rep[i])
		}
	}
}

func TestCStrings(t *testing.T) {
	b := CString("héllo")
	if len(b) != len("héllo")+1 || b[len(b)-1] != 0 {
		t.Fatalf("CString: %q", b)
	}
	if s := GoString(uintptr(unsafe.Pointer(&b[0]))); s != "héllo" {
		t.Errorf("GoString = %q", s)
	}
	if s := GoString(0); s != "" {
		t.Errorf("GoString(0) = %q", s)
	}
}

// BenchmarkFast measures the cost of one call into C through Fast.
func BenchmarkFast(b *testing.B) {
	l, err := Search(Library{Name: "m", Sonames: []string{"libm.so.6"}})
	if err != nil {
		b.Skip(err)
	}
	labs := l.Func("labs")
	if labs.Addr == 0 {
		b.Skip("no labs")
	}
	b.ReportAllocs()
	for b.Loop() {
		labs.Fast(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
	}
}

// TestVirtual calls Go functions through a virtual library, as the
// bindings call a C library's: arguments in order, the result back, and a
// missing symbol reported as one.
func TestVirtual(t *testing.T) {
	var seen []uintptr
	lib := Virtual("demo", "libdemo.so.1", map[string]GoFunc{
		"add": func(a []uintptr) uintptr { seen = append(seen[:0], a...); return a[0] + a[1] },
	})
	add := lib.FuncAny("add_v2", "add")
	if add.Err() != nil || add.Name != "add" {
		t.Fatalf("FuncAny: %+v, %v", add, add.Err())
	}
	if r, err := add.Call(2, 3); err != nil || r != 5 {
		t.Errorf("Call: %d, %v", r, err)
	}
	if r, err := add.Fast(40, 2); err != nil || r != 42 || len(seen) != 2 || seen[0] != 40 {
		t.Errorf("Fast: %d, %v, saw %v", r, err, seen)
	}
	if a := testing.AllocsPerRun(100, func() { add.Fast(1, 2) }); a != 0 {
		t.Errorf("Fast allocates %v times a call", a)
	}
	var missing *MissingSymbolError
	if _, err := lib.Func("sub").Call(1); !errors.As(err, &missing) || missing.Symbol != "sub" {
		t.Errorf("a missing function: %v", err)
	}
	if lib.Where != "built in" {
		t.Errorf("Where = %q", lib.Where)
	}
}

// TestDriverCUDAChoosesTheMajor: with the driver's CUDA version known, a
// search skips a library of a newer CUDA major (saying why) and takes the
// older one beside it; with a driver that runs it, or the version
// unknown, the newest.
func TestDriverCUDAChoosesTheMajor(t *testing.T) {
	real := libm(t).Path
	b, err := os.ReadFile(real)
	if err != nil {
		t.Skipf("cannot read %s: %v", real, err)
	}
	dir := t.TempDir()
	for _, so := range []string{"libfleetcu.so.13", "libfleetcu.so.12"} {
		if err := os.WriteFile(filepath.Join(dir, so), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FLEET_CUDA_PATH", dir)
	t.Cleanup(func() { SetDriverCUDA(0) })
	l := Library{Name: "fleetcu", Sonames: []string{"libfleetcu.so.13", "libfleetcu.so.12"}, ByCUDA: true}
	for _, c := range []struct {
		driver int
		want   string
	}{{0, "libfleetcu.so.13"}, {13000, "libfleetcu.so.13"}, {12080, "libfleetcu.so.12"}} {
		SetDriverCUDA(c.driver)
		got, err := Search(l)
		if err != nil || got.Soname != c.want {
			t.Errorf("driver %d: %v, %v; want %s", c.driver, got, err, c.want)
		}
	}
	// Only the newer major there: not found, and the error says why.
	SetDriverCUDA(12080)
	_, err = Search(Library{Name: "fleetcu13", Sonames: []string{"libfleetcu.so.13"}, ByCUDA: true})
	if err == nil || !strings.Contains(err.Error(), "the driver runs CUDA 12.8, not 13") {
		t.Errorf("a CUDA 13 library under a 12.8 driver: %v", err)
	}
	// A library not numbered by CUDA's major is not skipped.
	if got, err := Search(Library{Name: "fleetcu-any", Sonames: []string{"libfleetcu.so.13"}}); err != nil || got.Soname != "libfleetcu.so.13" {
		t.Errorf("a library without ByCUDA: %v, %v", got, err)
	}
}

// TestCondaPrefixIsSearched: $CONDA_PREFIX/lib, where a conda
// environment's CUDA packages put their libraries, is among the places
// searched.
func TestCondaPrefixIsSearched(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CONDA_PREFIX", dir)
	for _, l := range Locations() {
		if l.Where == "$CONDA_PREFIX" && l.Dir == filepath.Join(dir, "lib") {
			return
		}
	}
	t.Errorf("$CONDA_PREFIX/lib is not searched: %v", Locations())
}

// TestInstallHint names the pip wheel for the driver's CUDA major, or
// each major's, and the distribution packages; the driver's libraries
// are the driver's.
func TestInstallHint(t *testing.T) {
	t.Cleanup(func() { SetDriverCUDA(0) })
	SetDriverCUDA(0)
	if h := InstallHint(CUBLAS); !strings.Contains(h, "nvidia-cublas-cu12 (CUDA 12) or nvidia-cublas (CUDA 13)") || !strings.Contains(h, "libcublas12") {
		t.Errorf("cuBLAS, driver unknown: %q", h)
	}
	SetDriverCUDA(12080)
	if h := InstallHint(NVRTC); !strings.HasPrefix(h, "pip install nvidia-cuda-nvrtc-cu12;") || !strings.Contains(h, "libnvrtc12") {
		t.Errorf("NVRTC under a 12.8 driver: %q", h)
	}
	SetDriverCUDA(13000)
	if h := InstallHint(NVRTC); !strings.HasPrefix(h, "pip install nvidia-cuda-nvrtc;") {
		t.Errorf("NVRTC under a 13.0 driver: %q", h)
	}
	for _, l := range []Library{CUDA, NVML} {
		if h := InstallHint(l); !strings.HasPrefix(h, "NVIDIA's driver") || strings.Contains(h, "pip") {
			t.Errorf("%s: %q", l.Name, h)
		}
	}
	for _, l := range All() {
		if InstallHint(l) == "" {
			t.Errorf("%s: no hint", l.Name)
		}
	}
}
