// Package term tells whether output goes to a terminal, where fleet
// draws live status lines instead of plain log lines.
package term

import (
	"io"
	"os"
)

// IsTerminal reports whether w is a terminal: an *os.File that is a
// character device the terminal driver answers for (on Linux; elsewhere
// any character device).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	return isTTY(f)
}
