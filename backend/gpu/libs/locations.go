package libs

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
)

// Location is one place to look for libraries.
type Location struct {
	Where string // the search step, for reports: "$FLEET_CUDA_PATH", "loader search", ...
	// Dir is the folder to look in; "" means the dynamic loader's own search.
	Dir string
	// Reason, if set, says why this step has nothing to look in (an unset
	// variable); Search records it and moves on.
	Reason string
}

// Locations lists the places Search looks, in order, from the environment
// as it is now.
func Locations() []Location {
	locs := EnvLocations("FLEET_CUDA_PATH")
	locs = append(locs, Location{Where: "loader search"})
	if h := os.Getenv("CUDA_HOME"); h != "" {
		locs = append(locs, Location{Where: "$CUDA_HOME", Dir: filepath.Join(h, "lib64")})
	}
	// A conda environment's CUDA packages (cuda-nvrtc, libcublas, nccl)
	// put their libraries in its lib folder.
	if c := os.Getenv("CONDA_PREFIX"); c != "" {
		locs = append(locs, Location{Where: "$CONDA_PREFIX", Dir: filepath.Join(c, "lib")})
	}
	locs = append(locs, Location{Where: "cuda toolkit", Dir: "/usr/local/cuda/lib64"})
	var py []Location
	for _, sp := range sitePackages() {
		for _, d := range pipLibDirs(sp) {
			py = append(py, Location{Where: "python site-packages", Dir: d})
		}
	}
	if len(py) == 0 {
		py = append(py, Location{Where: "python site-packages", Reason: "no nvidia/*/lib folders"})
	}
	locs = append(locs, py...)
	locs = append(locs, Location{Where: "system", Dir: "/usr/local/nvidia/lib64"})
	if t := multiarch(); t != "" {
		locs = append(locs, Location{Where: "system", Dir: filepath.Join("/usr/lib", t)})
	}
	return dedupe(locs)
}

// EnvLocations are the folders listed in the environment variable name
// (separated like $PATH), or one step saying it is not set.
func EnvLocations(name string) []Location {
	p := os.Getenv(name)
	if p == "" {
		return []Location{{Where: "$" + name, Reason: "not set"}}
	}
	var locs []Location
	for _, d := range filepath.SplitList(p) {
		if d != "" {
			locs = append(locs, Location{Where: "$" + name, Dir: d})
		}
	}
	return locs
}

// SystemLocations is the system's multiarch library folder
// (/usr/lib/x86_64-linux-gnu), where there is one for this architecture.
func SystemLocations() []Location {
	if t := multiarch(); t != "" {
		return []Location{{Where: "system", Dir: filepath.Join("/usr/lib", t)}}
	}
	return nil
}

// multiarch is Debian's multiarch triplet for this architecture.
func multiarch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64-linux-gnu"
	case "arm64":
		return "aarch64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	}
	return ""
}

// sitePackages lists Python package folders, the active environments'
// first: $VIRTUAL_ENV, $CONDA_PREFIX, the environment of the python3 (or
// python) first on $PATH even where it is not activated, ~/.local,
// /usr/local, /usr.
func sitePackages() []string {
	var roots []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := os.Getenv(v); p != "" {
			roots = append(roots, p)
		}
	}
	roots = append(roots, pathPythonRoots()...)
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		roots = append(roots, filepath.Join(h, ".local"))
	}
	roots = append(roots, "/usr/local", "/usr")
	var out []string
	for _, r := range roots {
		for _, kind := range []string{"site-packages", "dist-packages"} {
			m, _ := filepath.Glob(filepath.Join(r, "lib", "python3*", kind))
			// Newest Python first: python3.12 before python3.9.
			sort.Slice(m, func(i, j int) bool { return pyVersionLess(m[j], m[i]) })
			out = append(out, m...)
		}
	}
	return out
}

// pathPythonRoots returns the prefix of the python3 (or python) that $PATH
// finds, the folder above its bin: a virtual environment's root even
// where it is not activated, and, where the executable is a link, the
// prefix of the Python it links to.
func pathPythonRoots() []string {
	var roots []string
	for _, name := range []string{"python3", "python"} {
		exe, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if abs, err := filepath.Abs(exe); err == nil {
			exe = abs
		}
		roots = append(roots, filepath.Dir(filepath.Dir(exe)))
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			roots = append(roots, filepath.Dir(filepath.Dir(real)))
		}
		break
	}
	return roots
}

// pyVersionLess orders .../python3.N/... folders by N.
func pyVersionLess(a, b string) bool {
	na, nb := pyMinor(a), pyMinor(b)
	if na != nb {
		return na < nb
	}
	return a < b
}

func pyMinor(p string) int {
	base := filepath.Base(filepath.Dir(p)) // python3.12
	n := 0
	seenDot := false
	for _, c := range base {
		switch {
		case c == '.':
			seenDot = true
		case seenDot && c >= '0' && c <= '9':
			n = n*10 + int(c-'0')
		case seenDot:
			return n
		}
	}
	return n
}

// pipLibDirs lists the nvidia/*/lib folders of one site-packages folder
// (nvidia/cublas/lib, nvidia/cuda_nvrtc/lib, nvidia/nccl/lib, and for the
// CUDA 13 wheels nvidia/cu13/lib), cu13 first.
func pipLibDirs(sitePackages string) []string {
	m, _ := filepath.Glob(filepath.Join(sitePackages, "nvidia", "*", "lib"))
	sort.SliceStable(m, func(i, j int) bool {
		ci := filepath.Base(filepath.Dir(m[i])) == "cu13"
		cj := filepath.Base(filepath.Dir(m[j])) == "cu13"
		return ci && !cj
	})
	return m
}

func dedupe(locs []Location) []Location {
	seen := map[string]bool{}
	out := locs[:0]
	for _, l := range locs {
		if l.Dir != "" {
			key := l.Dir
			if r, err := filepath.EvalSymlinks(l.Dir); err == nil {
				key = r
			}
			if seen[key] {
				continue
			}
			seen[key] = true
		}
		out = append(out, l)
	}
	return out
}
