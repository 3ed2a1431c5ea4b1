//go:build unix

package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Each process gets its own process group, so a Ctrl-C at the terminal
// reaches the launcher only (which forwards it once) rather than every
// process twice, and a signal reaches whatever the process started too.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends sig to the process group led by p.
func signalGroup(p *os.Process, sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		p.Signal(sig)
		return
	}
	if err := syscall.Kill(-p.Pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.Signal(sig)
	}
}

// exitStatus is a finished process's status as a shell reports it:
// its exit code, or 128 + the signal that killed it.
func exitStatus(st *os.ProcessState) (code int, desc string) {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return st.ExitCode(), ""
}

var stopSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

const sigTerm, sigKill = syscall.SIGTERM, syscall.SIGKILL

// sigFlight asks a fleet trainer to write its flight record (Options.FlightSignal).
var sigFlight os.Signal = syscall.SIGUSR1

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return 2
}
