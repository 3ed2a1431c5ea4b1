package emu

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetml/fleet/backend/gpu/cuda/kernels"
)

//go:embed prelude.h
var prelude string

// ErrUnavailable is wrapped by the errors of Build when the harness cannot
// run on this machine (no g++, or g++ too old, or not Linux). Tests skip on
// it; MustBuild does that.
var ErrUnavailable = errors.New("emu: the CPU emulation harness is unavailable")

// compileFlags build one translation unit into a shared object; -z defs
// makes a call to an undefined function a build error rather than a failure
// to load.
var compileFlags = []string{"-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-Wl,-z,defs"}

// targetPrefix is how g++ -dumpmachine begins for a compiler whose objects
// this process can load.
var targetPrefix = map[string]string{
	"amd64": "x86_64-", "arm64": "aarch64-", "386": "i", "riscv64": "riscv64-",
	"ppc64le": "powerpc64le-", "s390x": "s390x-", "loong64": "loongarch64-",
}

// minGCC is the oldest g++ with the C++20 library pieces the prelude uses
// (std::binary_semaphore, std::atomic_ref, std::bit_cast).
const minGCC = 11

// cacheVersion changes when the layout of what Build compiles changes in a
// way the source hash would not see.
const cacheVersion = "fleet-emu-1"

// Build compiles the kernel file f for the CPU and loads it. Built modules
// are cached: on disk, keyed by a hash of the whole translation unit and the
// compiler, and in memory for the life of the process.
func Build(f kernels.File) (*Module, error) { return BuildSource(f.Name, f.Source) }

// BuildSource is Build for kernel source that is not in package kernels
// (test kernels): name is its file name, for messages. The source follows
// the conventions of package kernels; common.cuh is prepended to it.
func BuildSource(name, src string) (*Module, error) {
	cc, err := compiler()
	if err != nil {
		return nil, err
	}
	sigs, err := parseKernels(src)
	if err != nil {
		return nil, fmt.Errorf("emu: %s: %v", name, err)
	}
	unit := translationUnit(name, src, sigs)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", cacheVersion, cc.id, strings.Join(compileFlags, " "))
	h.Write([]byte(unit))
	key := hex.EncodeToString(h.Sum(nil))[:32]

	buildsMu.Lock()
	e := builds[key]
	if e == nil {
		e = &buildEntry{}
		builds[key] = e
	}
	buildsMu.Unlock()
	e.once.Do(func() { e.lib, e.err = load(cc, name, key, unit, sigs) })
	if e.err != nil {
		return nil, e.err
	}
	return &Module{lib: e.lib, sched: Parallel, timeout: DefaultTimeout}, nil
}

type buildEntry struct {
	once sync.Once
	lib  *library
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*buildEntry{}
)

// translationUnit is what g++ compiles for a kernel file. The #line
// directives make compiler messages name the file a line comes from.
func translationUnit(name, src string, sigs []kernelSig) string {
	var b strings.Builder
	b.WriteString("#line 1 \"emu/prelude.h\"\n")
	b.WriteString(prelude)
	b.WriteString("\n#line 1 \"common.cuh\"\n")
	b.WriteString(kernels.Common())
	fmt.Fprintf(&b, "\n#line 1 %q\n", name)
	b.WriteString(src)
	b.WriteString("\n#line 1 \"emu/launch.cpp\"\n")
	b.WriteString(wrappers(sigs))
	return b.String()
}

type gcc struct {
	path string
	id   string // version and target, part of the cache key
}

var (
	compilerOnce sync.Once
	compilerInfo gcc
	compilerErr  error
)

func compiler() (gcc, error) {
	compilerOnce.Do(func() {
		if !platformOK {
			compilerErr = fmt.Errorf("%w: it needs Linux", ErrUnavailable)
			return
		}
		path, err := exec.LookPath("g++")
		if err != nil {
			compilerErr = fmt.Errorf("%w: no g++ on PATH", ErrUnavailable)
			return
		}
		var fields []string
		for _, flag := range []string{"-dumpfullversion", "-dumpmachine"} {
			out, err := exec.Command(path, flag).Output()
			if err != nil {
				compilerErr = fmt.Errorf("%w: %s %s: %v", ErrUnavailable, path, flag, err)
				return
			}
			fields = append(fields, strings.TrimSpace(string(out)))
		}
		id := strings.Join(fields, " ")
		if want := targetPrefix[runtime.GOARCH]; want != "" && !strings.HasPrefix(fields[1], want) {
			// Say, an arm64 test binary under qemu on an amd64 machine.
			compilerErr = fmt.Errorf("%w: g++ builds for %s, and this process is %s", ErrUnavailable, fields[1], runtime.GOARCH)
			return
		}
		major, _ := strconv.Atoi(strings.SplitN(fields[0], ".", 2)[0])
		if major < minGCC {
			compilerErr = fmt.Errorf("%w: g++ %s is too old (need %d or later, for C++20)", ErrUnavailable, id, minGCC)
			return
		}
		compilerInfo = gcc{path: path, id: "g++ " + id}
	})
	return compilerInfo, compilerErr
}

// load finds the shared object for key in the cache, or compiles it, then
// opens it and looks up its launchers.
func load(cc gcc, name, key, unit string, sigs []kernelSig) (*library, error) {
	so, err := cachedObject(cc, name, key, unit)
	if err != nil {
		return nil, err
	}
	handle, err := dlopen(so)
	if err != nil {
		// A damaged cache file: build it again, once.
		_ = os.Remove(so)
		if so, err = cachedObject(cc, name, key, unit); err != nil {
			return nil, err
		}
		if handle, err = dlopen(so); err != nil {
			return nil, fmt.Errorf("emu: load %s: %v", name, err)
		}
	}
	arena, err := mapMemory(arenaSize)
	if err != nil {
		return nil, fmt.Errorf("emu: map launch arena: %v", err)
	}
	lib := &library{name: name, kernels: map[string]*kernel{}, arena: arena}
	for _, s := range sigs {
		if len(s.Params) > maxParams {
			return nil, fmt.Errorf("emu: %s: kernel %s has %d parameters, over %d", name, s.Name, len(s.Params), maxParams)
		}
		fn, err := dlsym(handle, launchSymbol(s.Name))
		if err != nil {
			return nil, err
		}
		lib.kernels[s.Name] = &kernel{sig: s, fn: fn}
		lib.order = append(lib.order, s.Name)
	}
	return lib, nil
}

// cachedObject returns the path of the shared object for key, compiling it
// if no cache holds it.
func cachedObject(cc gcc, name, key, unit string) (string, error) {
	var dirErr error
	if dir := userCacheDir(); dir != "" {
		so := filepath.Join(dir, key+".so")
		if _, err := os.Stat(so); err == nil {
			now := time.Now()
			_ = os.Chtimes(so, now, now) // recently used: keep it
			return so, nil
		}
		so, err := compileTo(cc, name, unit, dir, key)
		if err == nil {
			return so, nil
		}
		var ce *compileError
		if errors.As(err, &ce) {
			return "", err // the source is at fault, not the folder
		}
		dirErr = err
	}
	dir, err := processTempDir()
	if err != nil {
		return "", fmt.Errorf("emu: no folder to build in: %v (and %v)", err, dirErr)
	}
	so := filepath.Join(dir, key+".so")
	if _, err := os.Stat(so); err == nil {
		return so, nil
	}
	return compileTo(cc, name, unit, dir, key)
}

type compileError struct {
	name string
	err  error
	log  string
}

func (e *compileError) Error() string {
	return fmt.Sprintf("emu: compile %s: %v\n%s", e.name, e.err, e.log)
}

func compileTo(cc gcc, name, unit, dir, key string) (string, error) {
	tmp, err := os.CreateTemp(dir, key+".*.tmp")
	if err != nil {
		return "", err
	}
	tmpName := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpName)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(append([]string(nil), compileFlags...), "-x", "c++", "-o", tmpName, "-")
	cmd := exec.CommandContext(ctx, cc.path, args...)
	cmd.Stdin = strings.NewReader(unit)
	var log bytes.Buffer
	cmd.Stdout = &log
	cmd.Stderr = &log
	if err := cmd.Run(); err != nil {
		return "", &compileError{name: name, err: err, log: trimLog(log.String(), 80)}
	}
	so := filepath.Join(dir, key+".so")
	if err := os.Rename(tmpName, so); err != nil {
		return "", err
	}
	return so, nil
}

func trimLog(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = append(ls[:lines], fmt.Sprintf("... (%d more lines)", len(ls)-lines))
	}
	return strings.Join(ls, "\n")
}

var (
	userCacheOnce sync.Once
	userCache     string
	tempOnce      sync.Once
	tempDir       string
	tempErr       error
)

// userCacheDir is the folder under the user's cache folder that keeps built
// modules between test runs, or "" when there is none to write.
func userCacheDir() string {
	userCacheOnce.Do(func() {
		d, err := os.UserCacheDir()
		if err != nil {
			return
		}
		dir := filepath.Join(d, "fleet", "emu")
		if os.MkdirAll(dir, 0o755) != nil {
			return
		}
		trimCache(dir)
		userCache = dir
	})
	return userCache
}

// processTempDir is a temporary folder of this process, for when the user's
// cache folder cannot be written.
func processTempDir() (string, error) {
	tempOnce.Do(func() { tempDir, tempErr = os.MkdirTemp("", "fleet-emu-") })
	return tempDir, tempErr
}

// trimCache removes shared objects unused for a month and temporary files
// left by interrupted builds.
func trimCache(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	now := time.Now()
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		age := now.Sub(info.ModTime())
		if (strings.HasSuffix(e.Name(), ".so") && age > 30*24*time.Hour) ||
			(strings.HasSuffix(e.Name(), ".tmp") && age > time.Hour) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
