//go:build linux

package emu

import (
	"fmt"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/unix"
)

const platformOK = true

func mapMemory(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

func unmapMemory(b []byte) { _ = unix.Munmap(b) }

func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

func dlsym(lib uintptr, name string) (uintptr, error) {
	p, err := purego.Dlsym(lib, name)
	if err != nil {
		return 0, fmt.Errorf("emu: look up %s: %v", name, err)
	}
	return p, nil
}

// callLaunch calls a generated launcher: int launcher(const Launch*, void**).
func callLaunch(fn, desc, args uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, desc, args)
	return int32(r)
}
