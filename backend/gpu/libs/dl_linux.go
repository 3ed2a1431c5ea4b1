//go:build linux

package libs

import (
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// dlopen opens path with RTLD_NOW|RTLD_GLOBAL. The OS thread is held so that
// dlerror reads the error of this thread's dlopen.
func dlopen(path string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// dlopenLocal opens path with RTLD_NOW|RTLD_LOCAL.
func dlopenLocal(path string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

func dlsym(h uintptr, name string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlsym(h, name)
}

// linkMap is the start of glibc's public struct link_map (<link.h>).
type linkMap struct {
	addr uintptr
	name *byte
}

const rtldDILinkmap = 2 // RTLD_DI_LINKMAP

// loadedPath returns the path the loader opened for handle h, or "".
func loadedPath(h uintptr) string {
	fn, err := dlsym(purego.RTLD_DEFAULT, "dlinfo")
	if err != nil || fn == 0 {
		return ""
	}
	var lm uintptr
	if r, _, _ := purego.SyscallN(fn, h, rtldDILinkmap, uintptr(unsafe.Pointer(&lm))); r != 0 || lm == 0 {
		return ""
	}
	m := (*linkMap)(ptr(lm))
	return GoString(uintptr(unsafe.Pointer(m.name)))
}
