//go:build !linux

package emu

import (
	"errors"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// The harness loads its kernels through dlopen and maps its buffers with
// mmap, on Linux. Elsewhere Build reports ErrUnavailable.
const platformOK = false

func mapMemory(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapMemory([]byte) {}

func dlopen(string) (*libs.Lib, error) { return nil, errors.New("emu: needs linux") }

func dlsym(*libs.Lib, string) (uintptr, error) { return 0, errors.New("emu: needs linux") }

func callLaunch(fn, desc, args uintptr) int32 { return 1 }
