package term

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTTY asks the terminal driver: /dev/null is a character device too.
func isTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
