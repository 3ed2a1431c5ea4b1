//go:build !linux

package cpu

import "errors"

// amxPermission: fleet asks for the tiles only on Linux, the one OS it
// was written for that makes a process ask.
func amxPermission() error {
	return errors.New("the AMX product asks for the tiles only on Linux")
}
