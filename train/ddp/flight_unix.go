//go:build unix

package ddp

import (
	"os"
	"os/signal"
	"syscall"
)

// dumpOnSignal writes the flight record at every SIGUSR1 (the run goes
// on), until stop is called: how a hung rank is asked what it is doing.
func (d *Group) dumpOnSignal() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				d.dumpFlight("SIGUSR1")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
