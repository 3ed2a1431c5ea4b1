//go:build linux

package emu

import (
	"fmt"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

const platformOK = true

func mapMemory(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

func unmapMemory(b []byte) { _ = unix.Munmap(b) }

// dlopen opens a built harness through the one library loader (package
// libs), its symbols local.
func dlopen(path string) (*libs.Lib, error) { return libs.OpenLocal(path) }

func dlsym(lib *libs.Lib, name string) (uintptr, error) {
	f := lib.Func(name)
	if err := f.Err(); err != nil {
		return 0, fmt.Errorf("emu: look up %s: %v", name, err)
	}
	return f.Addr, nil
}

// callLaunch calls a generated launcher: int launcher(const Launch*, void**).
func callLaunch(fn, desc, args uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, desc, args)
	return int32(r)
}
