package diagnose

import (
	"fmt"
	"io"
)

// Format prints d for people: a heading naming the main bottleneck, its
// evidence and fix, the secondary findings, then the run and the notes.
func Format(w io.Writer, d Diagnosis) error {
	ew := &errWriter{w: w}
	ew.printf("Diagnosis — main bottleneck: %s\n", d.Main.Title)
	finding(ew, d.Main, "  ")
	if len(d.Secondary) > 0 {
		ew.printf("\nAlso found:\n")
		for _, f := range d.Secondary {
			ew.printf("  - %s\n", f.Title)
			finding(ew, f, "    ")
		}
	}
	if d.Run != "" {
		ew.printf("\nRun: %s\n", d.Run)
	}
	for _, n := range d.Notes {
		ew.printf("  %s\n", n)
	}
	return ew.err
}

func finding(ew *errWriter, f Finding, indent string) {
	for _, e := range f.Evidence {
		ew.printf("%sevidence: %s\n", indent, e)
	}
	if f.Fix != "" {
		ew.printf("%sfix:      %s\n", indent, f.Fix)
	}
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
