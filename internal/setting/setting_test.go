package setting

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

func flags(field string) string {
	return map[string]string{"BatchSize": "--batch-size", "GradAccum": "--grad-accum"}[field]
}

func TestRender(t *testing.T) {
	err := Errorf("{BatchSize} %d is not a multiple of {GradAccum} %d (100%%)", 6, 4)
	var e *Error
	if !errors.As(fmt.Errorf("plan: %w", err), &e) || e.Name != "BatchSize" {
		t.Fatalf("errors.As: %v, Name %q; want the *Error naming BatchSize", e, e.Name)
	}
	var named interface{ Setting() string } // as a program outside the module finds it
	if !errors.As(fmt.Errorf("plan: %w", err), &named) || named.Setting() != "BatchSize" {
		t.Fatalf("errors.As into an interface: %v", named)
	}
	if got, want := err.Error(), "BatchSize 6 is not a multiple of GradAccum 4 (100%)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := e.Render(flags), "--batch-size 6 is not a multiple of --grad-accum 4 (100%)"; got != want {
		t.Errorf("Render = %q, want %q", got, want)
	}
	// A field with no flag keeps its name; braces in arguments are not settings.
	err = Errorf("{Seed} and {BatchSize}: %s", "{GradAccum}")
	if got, want := Message(err, flags), "Seed and --batch-size: {GradAccum}"; got != want {
		t.Errorf("Message = %q, want %q", got, want)
	}
	// Literal text in the format keeps its verbs and braces.
	err = Errorf("{GradAccum}: " + Literal("100% of {BatchSize} {{x}"))
	if got, want := Message(err, flags), "--grad-accum: 100% of {BatchSize} {{x}"; got != want {
		t.Errorf("Message = %q, want %q", got, want)
	}
	if e := Errorf("{{BatchSize} and {GradAccum}").(*Error); e.Name != "GradAccum" || e.Error() != "{BatchSize} and GradAccum" {
		t.Errorf("a doubled brace: Name %q, message %q", e.Name, e.Error())
	}
}

func TestMessageWalksTheChain(t *testing.T) {
	inner := Errorf("{GradAccum} must be positive, got %d", 0)
	outer := Errorf("{BatchSize} auto: a trial step: %w", inner)
	joined := errors.Join(fmt.Errorf("run: %w", outer), Errorf("{BatchSize} %d", 3))
	got := Message(fmt.Errorf("train: %w", joined), flags)
	want := "train: run: --batch-size auto: a trial step: --grad-accum must be positive, got 0\n--batch-size 3"
	if got != want {
		t.Errorf("Message = %q, want %q", got, want)
	}
	// What it wraps stays findable.
	wrapped := Errorf("{BatchSize}: %w", fs.ErrNotExist)
	if !errors.Is(fmt.Errorf("x: %w", wrapped), fs.ErrNotExist) {
		t.Error("errors.Is does not see through an *Error")
	}
	if !strings.Contains(Message(errors.New("plain"), flags), "plain") {
		t.Error("a message with no setting changed")
	}
}

// TestPortable sends a message through text: its settings survive as
// fields, its other text, braces and percent signs included, as it was.
func TestPortable(t *testing.T) {
	err := fmt.Errorf("run: %w", Errorf("{Out} %s holds a run: add {Resume}", "/tmp/100%{x}"))
	text := Portable(err)
	back := Errorf("rank 0 refused the run: " + text)
	if got, want := Message(back, flags), "rank 0 refused the run: run: Out /tmp/100%{x} holds a run: add Resume"; got != want {
		t.Errorf("Message = %q, want %q", got, want)
	}
	if got, want := Message(back, func(f string) string { return "--" + strings.ToLower(f) }), "rank 0 refused the run: run: --out /tmp/100%{x} holds a run: add --resume"; got != want {
		t.Errorf("with flags: %q, want %q", got, want)
	}
	// A %w after an escaped percent sign is text.
	if got := Errorf("100%%w of {GradAccum}: %w", fs.ErrNotExist).Error(); got != "100%w of GradAccum: file does not exist" {
		t.Errorf("an escaped %%w: %q", got)
	}
}
