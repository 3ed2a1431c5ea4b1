package launch

import "syscall"

// On Linux a process is killed when the launcher dies, even by SIGKILL.
// The death signal fires when the thread that started the process exits,
// so Run starts each process from a goroutine locked to its thread until
// the process has been waited for.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
