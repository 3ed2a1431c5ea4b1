//go:build unix && !linux

package launch

import "syscall"

func setDeathSignal(*syscall.SysProcAttr) {}
