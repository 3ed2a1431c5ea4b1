//go:build !linux

package term

import "os"

func isTTY(*os.File) bool { return true }
