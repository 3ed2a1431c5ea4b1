package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// stopOnSignal returns a channel closed at the first SIGTERM or SIGINT
// (the trainer then finishes its step, saves a checkpoint and returns); a
// second signal exits at once with status 130. release stops listening.
func stopOnSignal(stderr io.Writer) (stop <-chan struct{}, release func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	ch := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "fleet train: %v: finishing the step and saving a checkpoint (signal again to exit now)\n", s)
			close(ch)
		case <-quit:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "fleet train: %v again: exiting without a checkpoint\n", s)
			os.Exit(130)
		case <-quit:
		}
	}()
	return ch, func() {
		signal.Stop(sigs)
		close(quit)
	}
}
