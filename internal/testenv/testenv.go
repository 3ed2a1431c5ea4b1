// Package testenv holds what tests share: checks about the environment
// they run in, a snapshot of a folder tree, and a small training text.
package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// canExecSelf reports whether this binary can start itself: not where it
// runs under user-mode emulation (qemu-aarch64 on an amd64 machine), where
// exec of the binary fails with "exec format error".
var canExecSelf = sync.OnceValues(func() (bool, error) {
	err := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1").Run()
	return err == nil, err
})

// NeedSelfExec skips the test unless the test binary can start copies of
// itself (subprocess tests), saying why.
func NeedSelfExec(t testing.TB) {
	t.Helper()
	if ok, err := canExecSelf(); !ok {
		t.Skipf("the test binary cannot start itself here (%v): it runs under emulation, or exec is not allowed", err)
	}
}

// SkipIfEmulated skips the test where the binary runs under user-mode
// emulation (see NeedSelfExec), whose /proc describes the emulator, not
// the program.
func SkipIfEmulated(t testing.TB) {
	t.Helper()
	if ok, err := canExecSelf(); !ok {
		t.Skipf("the binary seems to run under emulation (it cannot start itself: %v), where /proc describes the emulator", err)
	}
}

// NoOpenCL skips the test, saying why, where no OpenCL device is found
// (err is the search's error): unless $FLEET_REQUIRE_OPENCL is set, as CI
// sets it once it has installed PoCL, where the test fails instead, so
// that the OpenCL tests cannot skip there unnoticed.
func NoOpenCL(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("FLEET_REQUIRE_OPENCL") != "" {
		t.Fatalf("no OpenCL device, and $FLEET_REQUIRE_OPENCL is set: %v", err)
	}
	t.Skipf("no OpenCL device: %v", err)
}

// SyncBuffer is a bytes.Buffer that one goroutine or process may write
// while a test reads it: a log, or a child process's output.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
