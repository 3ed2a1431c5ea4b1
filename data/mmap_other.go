//go:build !unix

package data

import (
	"fmt"
	"os"
)

// mapFile reads path into memory (systems without mmap) and returns its
// bytes and a no-op release function.
func mapFile(path string) ([]byte, func() error, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("not a regular file")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return b, func() error { return nil }, nil
}
