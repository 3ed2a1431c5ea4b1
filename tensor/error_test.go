package tensor

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// TestErrorWrapsCause: a panic carrying an error reads as that error, with
// no prefix of its own, and errors.Is sees through it after Catch.
func TestErrorWrapsCause(t *testing.T) {
	cause := fmt.Errorf("step 7: reading the batch: %w", fs.ErrNotExist)
	err := Catch(func() { panic(&Error{Err: cause}) })
	if err == nil || err.Error() != cause.Error() {
		t.Fatalf("Catch = %v, want %v", err, cause)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("errors.Is does not find the cause")
	}
	if got := (&Error{Op: "batch auto", Err: cause}).Error(); got != "batch auto: "+cause.Error() {
		t.Errorf("with an op: %q", got)
	}
}
