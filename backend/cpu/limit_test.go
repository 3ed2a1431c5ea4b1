package cpu

import (
	"errors"
	"testing"

	"github.com/fleetml/fleet/backend"
)

// TestMemoryLimit: past SetMemoryLimit an allocation fails as a GPU's
// does, with a device error matching backend.ErrOutOfMemory; freed
// memory counts again, and 0 lifts the limit.
func TestMemoryLimit(t *testing.T) {
	c := New(backend.Device{Kind: "cpu", Index: 11})
	c.SetMemoryLimit(1000)
	if got := c.MemStats().Total; got != 1000 {
		t.Fatalf("Total %d with a 1000-byte limit", got)
	}
	a := c.Alloc(backend.F32, 200) // 800 bytes
	oom := func() (err error) {
		defer func() {
			r := recover()
			de, ok := r.(*backend.DeviceError)
			if !ok {
				t.Fatalf("allocation past the limit: panic %v, want a *backend.DeviceError", r)
			}
			err = de
		}()
		c.Alloc(backend.F32, 100)
		return nil
	}
	if err := oom(); !errors.Is(err, backend.ErrOutOfMemory) {
		t.Fatalf("error %v does not match ErrOutOfMemory", err)
	}
	c.Free(a)
	c.Free(c.Alloc(backend.F32, 250)) // exactly the limit
	c.SetMemoryLimit(0)
	c.Free(c.Alloc(backend.F32, 1000))
	if got := c.MemStats().Total; got == 1000 {
		t.Error("Total still reports the lifted limit")
	}
}
