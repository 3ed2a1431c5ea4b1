//go:build !linux

package libs

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("shared libraries are opened on linux only, not " + runtime.GOOS)

func dlopen(string) (uintptr, error)         { return 0, errUnsupported }
func dlopenLocal(string) (uintptr, error)    { return 0, errUnsupported }
func dlsym(uintptr, string) (uintptr, error) { return 0, errUnsupported }
func loadedPath(uintptr) string              { return "" }
