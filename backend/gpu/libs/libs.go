package libs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Library describes one shared library to search for.
type Library struct {
	// Name is the short name used in reports and errors: "cuda", "nvrtc", ...
	Name string
	// Sonames are the file names to try, preferred (newest) first.
	Sonames []string
	// Companions, if set, returns the files in dir to load (RTLD_GLOBAL)
	// before soname is opened from dir: libraries that it opens by name
	// later, or needs and might not find by itself.
	Companions func(dir, soname string) []string
	// Locate, if set, lists the places to look in instead of Locations
	// (a library that is not NVIDIA's: OpenCL's loader).
	Locate func() []Location
	// ByCUDA says the first number after ".so." in each soname is the
	// CUDA major version the library belongs to (libcublas.so.13): once
	// the driver's version is known (SetDriverCUDA), a search skips the
	// sonames of a newer CUDA than the driver runs.
	ByCUDA bool
	// Install says where the library comes from, for a report that it is
	// missing (InstallHint).
	Install Install
}

// Install names what provides a library: the NVIDIA driver, or pip
// wheels and distribution packages, by CUDA major version where they
// differ.
type Install struct {
	Driver bool // part of NVIDIA's driver
	// Pip names the pip wheel by CUDA major version (12, 13); Pip[0]
	// where one wheel serves every version.
	Pip map[int]string
	// Packages names distribution packages, each with the distribution
	// that has it ("Debian 13: libnvrtc12").
	Packages []string
}

// The libraries fleet uses.
var (
	CUDA = Library{Name: "cuda", Sonames: []string{"libcuda.so.1"}, Install: Install{Driver: true,
		Packages: []string{"Debian: libcuda1 (non-free)", "Ubuntu: libnvidia-compute-<driver version>"}}}
	// NVRTC preloads the libnvrtc-builtins.so.<major>.<minor> beside it,
	// which NVRTC opens by name when it compiles.
	NVRTC = Library{
		Name:       "nvrtc",
		Sonames:    []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"},
		Companions: nvrtcBuiltins,
		ByCUDA:     true,
		Install: Install{Pip: map[int]string{12: "nvidia-cuda-nvrtc-cu12", 13: "nvidia-cuda-nvrtc"},
			Packages: []string{"Debian 12: libnvrtc11.2 (non-free)", "Debian 13: libnvrtc12 (non-free)", "NVIDIA's CUDA repository: cuda-nvrtc-<major>-<minor>"}},
	}
	// CUBLAS preloads the libcublasLt of the same major version beside it.
	CUBLAS = Library{
		Name:    "cublas",
		Sonames: []string{"libcublas.so.13", "libcublas.so.12"},
		Companions: func(dir, soname string) []string {
			return existing(dir, strings.Replace(soname, "libcublas.", "libcublasLt.", 1))
		},
		ByCUDA:  true,
		Install: cublasInstall,
	}
	CUBLASLt = Library{Name: "cublasLt", Sonames: []string{"libcublasLt.so.13", "libcublasLt.so.12"}, ByCUDA: true, Install: cublasInstall}
	NVML     = Library{Name: "nvml", Sonames: []string{"libnvidia-ml.so.1"}, Install: Install{Driver: true,
		Packages: []string{"Debian: libnvidia-ml1 (non-free)", "Ubuntu: libnvidia-compute-<driver version>"}}}
	NCCL = Library{Name: "nccl", Sonames: []string{"libnccl.so.2"}, Install: Install{Pip: map[int]string{12: "nvidia-nccl-cu12", 13: "nvidia-nccl-cu13"},
		Packages: []string{"NVIDIA's CUDA repository: libnccl2"}}}

	// cublasInstall: cuBLAS and cuBLASLt come together.
	cublasInstall = Install{Pip: map[int]string{12: "nvidia-cublas-cu12", 13: "nvidia-cublas"},
		Packages: []string{"Debian 13: libcublas12 and libcublaslt12 (non-free)", "NVIDIA's CUDA repository: libcublas-<major>-<minor>"}}
)

// driverCUDA is the CUDA version the driver runs (12080 for 12.8), 0
// while unknown.
var driverCUDA atomic.Int64

// SetDriverCUDA records the CUDA version the driver reports
// (cuDriverGetVersion: 12080 for 12.8). From then on a search skips the
// libraries of a newer CUDA major (libcublas.so.13 where the driver runs
// 12.8, which would fail to start) and takes the older ones. 0 forgets it.
func SetDriverCUDA(version int) { driverCUDA.Store(int64(version)) }

// DriverCUDA is the version SetDriverCUDA recorded, or 0.
func DriverCUDA() int { return int(driverCUDA.Load()) }

// cudaMajor is the CUDA major version in a ByCUDA library's soname
// (libcublas.so.13: 13), or 0.
func cudaMajor(soname string) int {
	_, v, ok := strings.Cut(soname, ".so.")
	if !ok {
		return 0
	}
	major, _, _ := strings.Cut(v, ".")
	n, _ := strconv.Atoi(major)
	return n
}

// tooNew reports why l's soname so is skipped under the driver's CUDA
// version, or "".
func (l Library) tooNew(so string) string {
	v := DriverCUDA()
	if !l.ByCUDA || v <= 0 {
		return ""
	}
	if m := cudaMajor(so); m > v/1000 {
		return fmt.Sprintf("skipped: the driver runs CUDA %d.%d, not %d", v/1000, v%1000/10, m)
	}
	return ""
}

// InstallHint says what provides l, for a report that it is missing: the
// driver, or the pip wheel for the driver's CUDA major version (each
// version's where it is unknown) and the distribution packages.
func InstallHint(l Library) string {
	in := l.Install
	var parts []string
	if in.Driver {
		parts = append(parts, "NVIDIA's driver")
	}
	if len(in.Pip) > 0 {
		if w, ok := in.Pip[DriverCUDA()/1000]; ok {
			parts = append(parts, "pip install "+w)
		} else {
			var majors []int
			for m := range in.Pip {
				majors = append(majors, m)
			}
			sort.Ints(majors)
			var ws []string
			for _, m := range majors {
				ws = append(ws, fmt.Sprintf("%s (CUDA %d)", in.Pip[m], m))
			}
			parts = append(parts, "pip install "+strings.Join(ws, " or "))
		}
	}
	parts = append(parts, in.Packages...)
	return strings.Join(parts, "; ")
}

// All lists the libraries fleet may open, in the order a report shows them.
func All() []Library { return []Library{CUDA, NVRTC, CUBLAS, CUBLASLt, NVML, NCCL} }

// nvrtcBuiltins finds libnvrtc-builtins.so.<major>.<minor> in dir for the
// NVRTC soname libnvrtc.so.<major>[.x]: the builtins carry NVRTC's full
// version (libnvrtc.so.11.2 of 11.8 opens libnvrtc-builtins.so.11.8), so
// where the soname links to a file that names its version
// (libnvrtc.so.13.0.88), the builtins of that major.minor; else, or where
// they are missing, the newest minor of the major.
func nvrtcBuiltins(dir, soname string) []string {
	major, _, _ := strings.Cut(strings.TrimPrefix(soname, "libnvrtc.so."), ".")
	if real, err := filepath.EvalSymlinks(filepath.Join(dir, soname)); err == nil {
		v := strings.TrimPrefix(filepath.Base(real), "libnvrtc.so.")
		if parts := strings.Split(v, "."); len(parts) >= 2 && parts[0] == major {
			if b := existing(dir, "libnvrtc-builtins.so."+parts[0]+"."+parts[1]); len(b) > 0 {
				return b
			}
		}
	}
	return newestMinor(dir, "libnvrtc-builtins.so."+major+".")
}

// newestMinor returns the file prefix+<minor> in dir with the highest
// numeric minor (and nothing after it), if there is one.
func newestMinor(dir, prefix string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	best, bestMinor := "", -1
	for _, m := range matches {
		minor, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(m), prefix))
		if err == nil && minor > bestMinor {
			best, bestMinor = m, minor
		}
	}
	if best == "" {
		return nil
	}
	return []string{best}
}

func existing(dir string, names ...string) []string {
	var out []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Lib is an opened library.
type Lib struct {
	Name   string  // Library.Name
	Soname string  // the file name that loaded
	Path   string  // where it was found (the soname alone if the loader's path is unknown)
	Where  string  // which search step found it: "$FLEET_CUDA_PATH", "loader search", ...
	Handle uintptr // dlopen's handle
	// Companions are the companion files loaded with it; CompanionErrs
	// those that failed (loading goes on without them).
	Companions    []string
	CompanionErrs []string

	mu      sync.Mutex
	version string
	// virtual holds the functions of a library written in Go (Virtual);
	// nil for one opened from a file.
	virtual map[string]GoFunc
}

// GoFunc is a library function written in Go: it takes the C call's
// arguments as integers (addresses among them) and returns its integer
// result. It must not keep args, which may be reused after it returns.
type GoFunc func(args []uintptr) uintptr

// Virtual returns a library whose functions are Go functions, by symbol
// name: a stand-in for a C library that bindings load like the real one
// (the simulated GPU's driver, NVRTC and cuBLAS). Its Path and Where say
// it is built in.
func Virtual(name, soname string, funcs map[string]GoFunc) *Lib {
	return &Lib{Name: name, Soname: soname, Path: soname, Where: "built in", virtual: funcs}
}

// Version is the library's version as its binding reported it with
// SetVersion, or else the version in the real file's name (libnvrtc.so.11.8.89
// gives "11.8.89"), or "".
func (l *Lib) Version() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.version != "" {
		return l.version
	}
	return fileVersion(l.Path)
}

// SetVersion records the version a binding read from the library itself.
func (l *Lib) SetVersion(v string) {
	l.mu.Lock()
	l.version = v
	l.mu.Unlock()
}

// fileVersion resolves links and returns what follows ".so." in the name.
func fileVersion(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	_, v, ok := strings.Cut(filepath.Base(path), ".so.")
	if !ok {
		return ""
	}
	return v
}

// Func is one function of a library. Addr is 0 when the library lacks it,
// or when it is a virtual library's Go function (Go).
type Func struct {
	Name string
	Addr uintptr
	Lib  string // the library's soname, for errors
	Go   GoFunc
}

// Func looks name up. A missing symbol is not an error here: the Func's
// calls return one.
func (l *Lib) Func(name string) Func { return l.FuncAny(name) }

// FuncAny returns the first of names that the library has (names[0] if none).
func (l *Lib) FuncAny(names ...string) Func {
	if l.virtual != nil {
		for _, n := range names {
			if f := l.virtual[n]; f != nil {
				return Func{Name: n, Lib: l.Soname, Go: f}
			}
		}
		return Func{Name: names[0], Lib: l.Soname}
	}
	for _, n := range names {
		if a, err := dlsym(l.Handle, n); err == nil && a != 0 {
			return Func{Name: n, Addr: a, Lib: l.Soname}
		}
	}
	return Func{Name: names[0], Lib: l.Soname}
}

// Err is nil if the function exists, else a *MissingSymbolError.
func (f Func) Err() error {
	if f.Addr != 0 || f.Go != nil {
		return nil
	}
	return &MissingSymbolError{Lib: f.Lib, Symbol: f.Name}
}

// MissingSymbolError says a loaded library lacks a function.
type MissingSymbolError struct {
	Lib, Symbol string
}

func (e *MissingSymbolError) Error() string {
	return fmt.Sprintf("cuda: %s has no symbol %s (library too old?)", e.Lib, e.Symbol)
}

// ErrNotFound is matched (errors.Is) by every *NotFoundError.
var ErrNotFound = errors.New("library not found")

// Attempt is one place a library was looked for, and why it did not load.
type Attempt struct {
	Where  string // the search step: "$FLEET_CUDA_PATH", "loader search", "python site-packages", ...
	Path   string // the folder or file tried ("" when the step had nothing to try)
	Reason string
}

// NotFoundError says a library could not be opened, and lists where it was
// looked for.
type NotFoundError struct {
	Library string
	Sonames []string
	Tried   []Attempt
}

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: %s not found (looked in: ", strings.Join(e.Sonames, ", "))
	for i, a := range e.Tried {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(a.Where)
		if a.Path != "" && a.Path != a.Where {
			b.WriteString(" " + a.Path)
		}
		b.WriteString(": " + a.Reason)
	}
	b.WriteString(")")
	return b.String()
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// Search looks for l in the places Locations lists, every time it is called,
// and opens the first that loads.
func Search(l Library) (*Lib, error) {
	var tried []Attempt
	locs := Locations
	if l.Locate != nil {
		locs = l.Locate
	}
	for _, loc := range locs() {
		if loc.Reason != "" { // a step with nothing to look in
			tried = append(tried, Attempt{Where: loc.Where, Reason: loc.Reason})
			continue
		}
		if loc.Dir == "" {
			for _, so := range l.Sonames {
				if why := l.tooNew(so); why != "" {
					tried = append(tried, Attempt{Where: loc.Where, Path: so, Reason: why})
					continue
				}
				h, err := dlopen(so)
				if err != nil {
					tried = append(tried, Attempt{Where: loc.Where, Path: so, Reason: trimDlerror(err.Error(), so)})
					continue
				}
				lib := &Lib{Name: l.Name, Soname: so, Path: so, Where: loc.Where, Handle: h}
				if p := loadedPath(h); p != "" {
					lib.Path = p
				}
				if l.Companions != nil && filepath.IsAbs(lib.Path) {
					// Already loaded; companions still go in before first use.
					loadCompanions(lib, l.Companions(filepath.Dir(lib.Path), so))
				}
				return lib, nil
			}
			continue
		}
		if fi, err := os.Stat(loc.Dir); err != nil || !fi.IsDir() {
			tried = append(tried, Attempt{Where: loc.Where, Path: loc.Dir, Reason: "no such folder"})
			continue
		}
		found := false
		for _, so := range l.Sonames {
			p := filepath.Join(loc.Dir, so)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			found = true
			if why := l.tooNew(so); why != "" {
				tried = append(tried, Attempt{Where: loc.Where, Path: p, Reason: why})
				continue
			}
			var comps []string
			if l.Companions != nil {
				comps = l.Companions(loc.Dir, so)
			}
			lib := &Lib{Name: l.Name, Soname: so, Path: p, Where: loc.Where}
			loadCompanions(lib, comps)
			h, err := dlopen(p)
			if err != nil {
				tried = append(tried, Attempt{Where: loc.Where, Path: p, Reason: trimDlerror(err.Error(), p)})
				continue
			}
			lib.Handle = h
			return lib, nil
		}
		if !found {
			tried = append(tried, Attempt{Where: loc.Where, Path: loc.Dir, Reason: "not there"})
		}
	}
	return nil, &NotFoundError{Library: l.Name, Sonames: l.Sonames, Tried: tried}
}

func loadCompanions(lib *Lib, paths []string) {
	for _, c := range paths {
		if _, err := dlopen(c); err != nil {
			lib.CompanionErrs = append(lib.CompanionErrs, trimDlerror(err.Error(), c))
			continue
		}
		lib.Companions = append(lib.Companions, c)
	}
}

// trimDlerror drops the "path: " that dlerror puts before its reason.
func trimDlerror(msg, path string) string {
	msg = strings.TrimPrefix(msg, path+": ")
	if msg == "" {
		msg = "dlopen failed"
	}
	return msg
}

// OpenLocal opens the shared object at path by itself: no search, no
// companions and no report, its symbols kept to itself (RTLD_LOCAL). It is
// for objects fleet builds (the emulator's kernels, package emu), whose
// symbols must not stand in for another's.
func OpenLocal(path string) (*Lib, error) {
	h, err := dlopenLocal(path)
	if err != nil {
		return nil, err
	}
	return &Lib{Name: filepath.Base(path), Soname: filepath.Base(path), Path: path, Where: "built", Handle: h}, nil
}

// Result is what a report says about one library.
type Result struct {
	Name    string
	Lib     *Lib  // nil if it was not found
	Err     error // why not
	Version string
}

var (
	mu     sync.Mutex
	opened = map[string]*result{}
)

type result struct {
	done chan struct{} // closed when lib and err are set
	lib  *Lib
	err  error
}

// Open searches for l once per process (by l.Name) and remembers the result
// for later calls and for Report.
func Open(l Library) (*Lib, error) {
	mu.Lock()
	r, seen := opened[l.Name]
	if !seen {
		r = &result{done: make(chan struct{})}
		opened[l.Name] = r
	}
	mu.Unlock()
	if !seen {
		r.lib, r.err = Search(l)
		close(r.done)
	}
	<-r.done
	return r.lib, r.err
}

// Report lists every library Open was asked for, in All's order (others
// after, by name).
func Report() []Result {
	order := map[string]int{}
	for i, l := range All() {
		order[l.Name] = i
	}
	rank := func(n string) int {
		if i, ok := order[n]; ok {
			return i
		}
		return len(order)
	}
	mu.Lock()
	names := make([]string, 0, len(opened))
	rs := make(map[string]*result, len(opened))
	for n, r := range opened {
		names = append(names, n)
		rs[n] = r
	}
	mu.Unlock()
	sort.Slice(names, func(i, j int) bool {
		if ri, rj := rank(names[i]), rank(names[j]); ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	out := make([]Result, 0, len(names))
	for _, n := range names {
		r := rs[n]
		<-r.done
		res := Result{Name: n, Lib: r.lib, Err: r.err}
		if r.lib != nil {
			res.Version = r.lib.Version()
		}
		out = append(out, res)
	}
	return out
}
