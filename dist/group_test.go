package dist

import (
	"errors"
	"testing"
)

// TestTimeoutsMatchErrTimeout: a collective that waited for a stalled
// peer and a rendezvous that ran out of time match ErrTimeout; a peer
// that closed its connection does not.
func TestTimeoutsMatchErrTimeout(t *testing.T) {
	if !errors.Is(&OpError{Op: "all-reduce", why: whyStalled}, ErrTimeout) {
		t.Error("a stalled collective does not match ErrTimeout")
	}
	if errors.Is(&OpError{Op: "all-reduce", why: whyGone}, ErrTimeout) {
		t.Error("a peer that closed its connection matches ErrTimeout")
	}
	if !errors.Is(timeoutf("rendezvous timed out"), ErrTimeout) {
		t.Error("a rendezvous timeout does not match ErrTimeout")
	}
}
