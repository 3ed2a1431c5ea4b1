//go:build !unix

package launch

import (
	"os"
	"os/exec"
)

// Without Unix process groups, signals go to the process alone, and a
// stop request is a kill.

func setProcAttr(*exec.Cmd) {}

func signalGroup(p *os.Process, sig os.Signal) {
	if sig == os.Interrupt {
		if p.Signal(sig) == nil {
			return
		}
	}
	p.Kill()
}

func exitStatus(st *os.ProcessState) (code int, desc string) { return st.ExitCode(), "" }

var stopSignals = []os.Signal{os.Interrupt}

var sigTerm, sigKill os.Signal = os.Kill, os.Kill

// sigFlight: no signal asks for a flight record here.
var sigFlight os.Signal

func signalNumber(os.Signal) int { return 2 }
