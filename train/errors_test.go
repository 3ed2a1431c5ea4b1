package train

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/tensor"
)

// TestRunErrorsUnwrap: failures reach Run's caller as errors that still
// match their causes with errors.Is, not as flattened messages.
func TestRunErrorsUnwrap(t *testing.T) {
	t.Run("dist timeout", func(t *testing.T) {
		// Rank 0 of a world of two whose rank 1 never comes.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Skip("cannot listen on the loopback:", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		c := tinyConfig(t)
		c.WorldSize, c.Rank, c.MasterAddr, c.MasterPort, c.Secret = 2, 0, "127.0.0.1", port, "s"
		c.CommTimeout = time.Second
		_, err = Run(c, &bytes.Buffer{})
		if !errors.Is(err, dist.ErrTimeout) {
			t.Fatalf("Run = %v; want an error matching dist.ErrTimeout", err)
		}
	})
}

// TestRunOutOfMemory: a device that runs out of memory fails the run
// with an error that matches backend.ErrOutOfMemory.
func TestRunOutOfMemory(t *testing.T) {
	dev := tensor.Device{Kind: "cpu", Index: 9}
	be, err := backend.Get(dev)
	if err != nil {
		t.Fatal(err)
	}
	lim, ok := be.(backend.MemoryLimiter)
	if !ok {
		t.Skip("the CPU backend takes no memory limit")
	}
	defer lim.SetMemoryLimit(0)
	// The tiny model fits in 256 KiB but its optimizer state does not;
	// with 1.5 MiB the state fits and a training step does not.
	for _, tc := range []struct {
		limit int64
		where string
	}{{256 << 10, "optimizer state"}, {1536 << 10, "step 1"}} {
		lim.SetMemoryLimit(tc.limit)
		c := tinyConfig(t)
		c.Device, c.BatchSize = dev.String(), 64
		_, err = Run(c, &bytes.Buffer{})
		if !errors.Is(err, backend.ErrOutOfMemory) || !strings.Contains(err.Error(), tc.where) {
			t.Fatalf("limit %d: Run = %v; want an error in %s matching backend.ErrOutOfMemory", tc.limit, err, tc.where)
		}
		t.Log(err)
	}
}
