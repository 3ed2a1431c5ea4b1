//go:build !linux

package train

import "os"

// isTerminal is false off Linux: plain log lines only.
func isTerminal(*os.File) bool { return false }
