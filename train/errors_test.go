package train

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/fleetml/fleet/dist"
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
