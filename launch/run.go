package launch

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/setting"
)

// flightWait is how long Run gives the processes to write their flight
// records (Options.FlightSignal) before it stops them.
const flightWait = 500 * time.Millisecond

// DefaultGrace is how long Run waits, after SIGTERM (or a forwarded signal),
// before it kills processes with SIGKILL: enough for a trainer to finish its
// step and save a checkpoint.
const DefaultGrace = 30 * time.Second

// Options configure Run: one node's share of a job, as `fleet run` takes
// them from its flags.
type Options struct {
	NProcPerNode int    // processes on this node (≥ 1)
	NNodes       int    // nodes in the job; 0 means 1
	NodeRank     int    // this node's index, 0 ≤ NodeRank < NNodes
	MasterAddr   string // rank 0's host; "" means 127.0.0.1 (one node only)
	// MasterPort is the rendezvous port; 0 means DefaultMasterPort for a
	// multi-node job and a free port picked anew for each start of a
	// single-node one.
	MasterPort  int
	MaxRestarts int // restarts of the whole group after a failure
	// FlightSignal says the processes are fleet trainers, which write the
	// flight record of their collectives on SIGUSR1: when one fails, Run
	// asks the others for theirs before it stops them, so that the desync
	// report sees what every reachable rank was doing.
	FlightSignal bool
	// MinNProc, where above 0 and below NProcPerNode, lets a single-node
	// group shrink: a process that fails again on the restart after its
	// failure is dropped, and the survivors restart, as long as at least
	// MinNProc remain (see Run).
	MinNProc int
	Command  []string // the program and its arguments
	// Secret is FLEET_JOB_SECRET for the processes. Empty means 32 random
	// bytes in hex, made once and kept across restarts; a multi-node job
	// must give it, the same on every node.
	Secret string
	// Env is the environment the processes inherit, before Run's own
	// variables replace any of the same names; nil means os.Environ().
	Env            []string
	Stdout, Stderr io.Writer     // nil means os.Stdout, os.Stderr
	Grace          time.Duration // 0 means DefaultGrace
	// Signals, when not nil, replaces the SIGINT and SIGTERM Run listens
	// for itself (for tests and embedding).
	Signals <-chan os.Signal
}

// ExitError is Run's error when the job failed: the process that failed
// first in the last attempt, and its status.
type ExitError struct {
	Rank     int    // global rank of the process that failed
	Status   int    // its exit code, or 128 + the signal that killed it
	How      string // "exited with status 3", "was killed by signal 9 (killed)"
	Restarts int    // restarts made before giving up
}

func (e *ExitError) Error() string {
	s := fmt.Sprintf("rank %d %s", e.Rank, e.How)
	if e.Restarts > 0 {
		s += fmt.Sprintf(" (after %d restart", e.Restarts)
		if e.Restarts > 1 {
			s += "s"
		}
		s += ")"
	}
	return s
}

// ExitCode is the status `fleet run` exits with: the failing process's.
func (e *ExitError) ExitCode() int {
	if e.Status <= 0 || e.Status > 255 {
		return 1
	}
	return e.Status
}

// ExitStopped is the status `fleet train` exits with when it was asked to
// stop (a signal, to it or to any rank of its group) and stopped at a step
// boundary with its checkpoint saved: sysexits' EX_TEMPFAIL, "try again
// later", which here means "continue with --resume". Run treats it as a
// stop, not a failure: it waits for the other processes, which agreed on
// the same step, signals none of them, and restarts nothing.
const ExitStopped = 75

// StoppedError is Run's error when a process exited with ExitStopped (the
// group stopped at a step boundary, asked to by a signal Run did not see).
type StoppedError struct{ Rank int }

func (e *StoppedError) Error() string {
	return fmt.Sprintf("rank %d stopped at a step boundary (status %d): continue with --resume", e.Rank, ExitStopped)
}

// ExitCode is ExitStopped, passed on to whoever started `fleet run`.
func (e *StoppedError) ExitCode() int { return ExitStopped }

// InterruptedError is Run's error when a signal stopped the job.
type InterruptedError struct{ Signal os.Signal }

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("stopped by %v", e.Signal)
}

// ExitCode is 128 + the signal's number, as a shell reports it.
func (e *InterruptedError) ExitCode() int { return 128 + signalNumber(e.Signal) }

// Run starts o.NProcPerNode copies of o.Command on this node, each with
// torchrun's environment:
//
//	RANK                        NodeRank·NProcPerNode + local rank
//	LOCAL_RANK                  0 … NProcPerNode-1
//	WORLD_SIZE                  NNodes·NProcPerNode
//	LOCAL_WORLD_SIZE            NProcPerNode
//	GROUP_RANK                  NodeRank (and GROUP_WORLD_SIZE = NNodes)
//	MASTER_ADDR, MASTER_PORT    the rendezvous address
//	TORCHELASTIC_RESTART_COUNT  0, then 1, 2, … on each restart
//	TORCHELASTIC_MAX_RESTARTS   MaxRestarts
//	FLEET_JOB_SECRET            the job's secret (see Options.Secret)
//	FLEET_RUN                   1, so FromEnv reports the source as "fleet run"
//	FLEET_LOCAL_DEVICE          the process's device slot: its local rank until a shrink
//	FLEET_ELASTIC               1 where the group may shrink (MinNProc)
//
// and, with more than one process on the node and no GOMAXPROCS in the
// environment, GOMAXPROCS = the CPUs this launcher may use / NProcPerNode,
// so that processes do not fight over cores. Standard input is /dev/null.
//
// Every line a process writes to its standard output or error is written
// to Stdout or Stderr prefixed "[rank R] ", whole: lines of different
// processes never mix.
//
// When a process fails (a non-zero status or a signal), Run sends SIGTERM to
// the others (to their process groups), SIGKILL to those still running after
// Grace, then starts the whole group again with TORCHELASTIC_RESTART_COUNT
// one higher, up to MaxRestarts times. When restarts run out it returns an
// *ExitError naming the rank that failed and its status. It returns nil when
// every process exits 0.
//
// Each process finds in EnvFlightDir a folder, emptied before each
// attempt, where a fleet trainer writes the flight record of its
// collectives when one fails; after a failed attempt Run prints the
// desync report of what it finds there (dist.DesyncReport).
//
// With MinNProc (one node), a process that fails the attempt after the one
// it failed, from the same device slot, has died for good: the next attempt
// runs without it, the survivors keeping their slots and closing up their
// local ranks, as long as MinNProc remain.
//
// A process that exits with ExitStopped has not failed: its group agreed to
// stop after a step (a signal reached one of them, not Run). Run signals no
// one then, kills only those still running after Grace, restarts nothing
// and returns a *StoppedError.
//
// SIGINT and SIGTERM are forwarded to every process; those still running
// after Grace are killed, as they are at once on a second signal. Run then
// returns an *InterruptedError and restarts nothing. On Linux the processes
// are killed if the launcher itself dies.
//
// Restarts are per node: each node of a multi-node job runs its own
// `fleet run`, and a failure restarts that node's processes only. The other
// nodes' processes see their peers vanish, fail in turn and are restarted
// by their own launchers, so a job recovers only if each node still has
// restarts left; the restart counts of nodes may differ. For multi-node
// jobs prefer --max-restarts 0 and let the scheduler (Slurm's --requeue,
// Kubernetes' restartPolicy) restart the whole job from its last
// checkpoint.
func Run(o Options) error {
	if err := o.fill(); err != nil {
		return err
	}
	s := newSupervisor(o)
	sigs := o.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, stopSignals...)
		defer signal.Stop(ch)
		sigs = ch
	}
	if dir, err := os.MkdirTemp("", "fleet-flight-"); err == nil {
		s.flightDir = dir
		defer os.RemoveAll(dir)
	}
	for restart := 0; ; restart++ {
		if s.flightDir != "" { // the last attempt's records are not this one's
			if old, err := os.ReadDir(s.flightDir); err == nil {
				for _, e := range old {
					os.Remove(filepath.Join(s.flightDir, e.Name()))
				}
			}
		}
		failed, sig, stopped, err := s.runGroup(restart, sigs)
		switch {
		case err != nil:
			return err
		case sig != nil:
			return &InterruptedError{Signal: sig}
		case stopped != nil:
			return stopped
		case failed == nil:
			return nil
		}
		failed.Restarts = restart
		s.desync()
		local := failed.Rank - s.o.NodeRank*s.o.NProcPerNode
		slot := -1
		if local >= 0 && local < len(s.slots) {
			slot = s.slots[local]
		}
		if restart < o.MaxRestarts && s.shrink(local) {
			s.logf("rank %d (device slot %d) failed again after a restart: dropping it, %d processes go on (--min-nproc %d); they resume from the last checkpoint with the same global batch",
				failed.Rank, slot, s.o.NProcPerNode, o.MinNProc)
		}
		if restart >= o.MaxRestarts {
			if o.MaxRestarts > 0 {
				s.logf("rank %d %s; no restarts left (--max-restarts %d)", failed.Rank, failed.How, o.MaxRestarts)
			}
			return failed
		}
		select {
		case sig := <-sigs:
			s.logf("%v: not restarting", sig)
			return &InterruptedError{Signal: sig}
		default:
		}
		s.logf("restarting all %d processes (restart %d of %d)", s.o.NProcPerNode, restart+1, o.MaxRestarts)
	}
}

// fill checks o and sets its defaults.
func (o *Options) fill() error {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return errors.New("no command to run")
	}
	if o.NNodes == 0 {
		o.NNodes = 1
	}
	switch {
	case o.NProcPerNode < 1:
		return setting.Errorf("{NProcPerNode} %d: must be at least 1", o.NProcPerNode)
	case o.MinNProc < 0 || o.MinNProc > o.NProcPerNode:
		return setting.Errorf("{MinNProc} %d: must be in [1, {NProcPerNode}] (%d), or 0 for a group that never shrinks", o.MinNProc, o.NProcPerNode)
	case o.MinNProc > 0 && o.MinNProc < o.NProcPerNode && o.NNodes > 1:
		return setting.Errorf("{MinNProc}: a group shrinks on one node only in this version (the other nodes' launchers could not follow); with {NNodes} %d, let the scheduler restart the job", o.NNodes)
	case o.NNodes < 1:
		return setting.Errorf("{NNodes} %d: must be at least 1", o.NNodes)
	case o.NodeRank < 0 || o.NodeRank >= o.NNodes:
		return setting.Errorf("{NodeRank} %d: must be in [0, %d) for {NNodes} %d", o.NodeRank, o.NNodes, o.NNodes)
	case o.MasterPort < 0 || o.MasterPort > 65535:
		return setting.Errorf("{MasterPort} %d is not a TCP port", o.MasterPort)
	case o.MaxRestarts < 0:
		return setting.Errorf("{MaxRestarts} %d: must be at least 0", o.MaxRestarts)
	}
	if o.NNodes > 1 {
		if o.MasterAddr == "" {
			return setting.Errorf("{MasterAddr} is required with {NNodes} %d (the host of node 0)", o.NNodes)
		}
		if o.Secret == "" {
			return fmt.Errorf("%s must be set, the same on every node, for a job of %d nodes (for example from `openssl rand -hex 32`)", EnvSecret, o.NNodes)
		}
		if o.MasterPort == 0 {
			o.MasterPort = DefaultMasterPort
		}
	}
	if o.MasterAddr == "" {
		o.MasterAddr = "127.0.0.1"
	}
	if o.Secret == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("making the job secret: %v", err)
		}
		o.Secret = hex.EncodeToString(b)
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	path, err := exec.LookPath(o.Command[0])
	if err != nil {
		return fmt.Errorf("command %q: %v", o.Command[0], err)
	}
	o.Command = append([]string{path}, o.Command[1:]...)
	return nil
}

type supervisor struct {
	o           Options
	out, errOut *output
	// flightDir is where the processes write their flight records
	// (EnvFlightDir), emptied before each attempt; "" when it could not
	// be made.
	flightDir string
	// slots are the device slots of this node's processes (EnvLocalDevice),
	// in local-rank order: 0 … NProcPerNode-1 until a shrink drops one;
	// lastFailed is the slot whose process failed the last attempt first
	// (-1: none).
	slots      []int
	lastFailed int
	elastic    bool // the group may shrink (MinNProc)
}

// newSupervisor makes the supervisor of o (filled in): every device slot
// in use, nothing failed yet.
func newSupervisor(o Options) *supervisor {
	mu := new(sync.Mutex)
	s := &supervisor{o: o, out: &output{mu: mu, w: o.Stdout}, errOut: &output{mu: mu, w: o.Stderr}, lastFailed: -1,
		elastic: o.MinNProc > 0 && o.MinNProc < o.NProcPerNode}
	for k := range o.NProcPerNode {
		s.slots = append(s.slots, k)
	}
	return s
}

// shrink drops the slot of local process local when it failed the last
// attempt too (it "died for good"), as long as MinNProc processes remain,
// and reports whether it did.
func (s *supervisor) shrink(local int) bool {
	if local < 0 || local >= len(s.slots) {
		s.lastFailed = -1
		return false
	}
	slot := s.slots[local]
	again := slot == s.lastFailed
	s.lastFailed = slot
	if !again || s.o.MinNProc <= 0 || len(s.slots)-1 < s.o.MinNProc {
		return false
	}
	s.slots = append(s.slots[:local:local], s.slots[local+1:]...)
	s.o.NProcPerNode = len(s.slots)
	s.lastFailed = -1
	return true
}

// desync prints the desync report of a failed attempt's flight records
// (dist.DesyncReport), where the processes left some that show one.
func (s *supervisor) desync() {
	if s.flightDir == "" {
		return
	}
	dumps, err := dist.ReadFlightDumps(s.flightDir)
	if err != nil {
		return // no collective failed: nothing was dumped
	}
	rep, err := dist.DesyncReport(dumps, s.o.NNodes*s.o.NProcPerNode)
	if err != nil {
		return
	}
	if s.o.NNodes > 1 {
		rep += " (from this node's ranks; `fleet diagnose` on the job's shared output folder reads every node's)"
	}
	s.logf("desync: %s", rep)
}

// logf writes one launcher line to Stderr.
func (s *supervisor) logf(format string, args ...any) {
	s.errOut.write([]byte("fleet run: " + fmt.Sprintf(format, args...) + "\n"))
}

// childEnv is the environment of local rank `local`.
func (s *supervisor) childEnv(local, restart, port int) []string {
	o := s.o
	set := map[string]string{
		"RANK":                       strconv.Itoa(o.NodeRank*o.NProcPerNode + local),
		"LOCAL_RANK":                 strconv.Itoa(local),
		"WORLD_SIZE":                 strconv.Itoa(o.NNodes * o.NProcPerNode),
		"LOCAL_WORLD_SIZE":           strconv.Itoa(o.NProcPerNode),
		"GROUP_RANK":                 strconv.Itoa(o.NodeRank),
		"GROUP_WORLD_SIZE":           strconv.Itoa(o.NNodes),
		"MASTER_ADDR":                o.MasterAddr,
		"MASTER_PORT":                strconv.Itoa(port),
		"TORCHELASTIC_RESTART_COUNT": strconv.Itoa(restart),
		"TORCHELASTIC_MAX_RESTARTS":  strconv.Itoa(o.MaxRestarts),
		EnvSecret:                    o.Secret,
		EnvFleetRun:                  "1",
		EnvLocalDevice:               strconv.Itoa(s.slots[local]),
	}
	if s.elastic {
		set[EnvElastic] = "1"
	}
	if s.flightDir != "" {
		set[EnvFlightDir] = s.flightDir
	}
	env := make([]string, 0, len(o.Env)+len(set)+1)
	hasProcs := false
	for _, kv := range o.Env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; ours {
			continue
		}
		hasProcs = hasProcs || k == "GOMAXPROCS"
		env = append(env, kv)
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	if !hasProcs && o.NProcPerNode > 1 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(max(1, runtime.NumCPU()/o.NProcPerNode)))
	}
	return env
}

// freePort asks the kernel for a TCP port free on the loopback interface.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port for MASTER_PORT: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type exitEvent struct {
	local int
	state *os.ProcessState
	err   error
}

// runGroup runs one attempt: it returns the first failure, or the signal
// that stopped the group, or the first process that exited with
// ExitStopped, or an error when the processes could not start.
func (s *supervisor) runGroup(restart int, sigs <-chan os.Signal) (*ExitError, os.Signal, *StoppedError, error) {
	o := s.o
	port := o.MasterPort
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, nil, nil, err
		}
	}
	first := o.NodeRank * o.NProcPerNode
	s.logf("starting %d processes: ranks %d-%d of %d (node %d of %d), master %s, restart %d of at most %d",
		o.NProcPerNode, first, first+o.NProcPerNode-1, o.NNodes*o.NProcPerNode, o.NodeRank, o.NNodes,
		net.JoinHostPort(o.MasterAddr, strconv.Itoa(port)), restart, o.MaxRestarts)

	n := o.NProcPerNode
	procs := make([]*os.Process, n)
	alive := make([]bool, n)
	exits := make(chan exitEvent, n)
	var startErr error
	for i := range n {
		cmd := exec.Command(o.Command[0], o.Command[1:]...)
		cmd.Env = s.childEnv(i, restart, port)
		prefix := fmt.Sprintf("[rank %d] ", first+i)
		stdout, stderr := newLineWriter(s.out, prefix), newLineWriter(s.errOut, prefix)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.WaitDelay = 5 * time.Second // output a stray grandchild keeps open
		setProcAttr(cmd)
		started := make(chan error, 1)
		go func() {
			// Linux's death signal is tied to the starting thread: keep
			// it until the process has been reaped.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := cmd.Start(); err != nil {
				started <- err
				return
			}
			started <- nil
			err := cmd.Wait()
			stdout.flush()
			stderr.flush()
			exits <- exitEvent{i, cmd.ProcessState, err}
		}()
		if err := <-started; err != nil {
			startErr = fmt.Errorf("starting rank %d: %v", first+i, err)
			break
		}
		procs[i], alive[i] = cmd.Process, true
	}

	running := 0
	for i := range n {
		if alive[i] {
			running++
		}
	}
	signalAll := func(sig os.Signal) {
		for i, p := range procs {
			if alive[i] {
				signalGroup(p, sig)
			}
		}
	}
	var (
		failed      *ExitError
		interrupted os.Signal
		stopped     *StoppedError
		killAt      <-chan time.Time
	)
	stop := func(sig os.Signal) {
		signalAll(sig)
		if killAt == nil {
			killAt = time.After(o.Grace)
		}
	}
	if startErr != nil {
		stop(sigTerm)
	}
	for running > 0 {
		select {
		case ev := <-exits:
			running--
			alive[ev.local] = false
			if ev.state == nil {
				// Wait failed without a status; treat it as a failure.
				if failed == nil && interrupted == nil && stopped == nil && startErr == nil {
					failed = &ExitError{Rank: first + ev.local, Status: 1, How: "could not be waited for: " + ev.err.Error()}
					s.logf("rank %d %s", failed.Rank, failed.How)
					stop(sigTerm)
				}
				continue
			}
			code, how := exitStatus(ev.state)
			if code == 0 || failed != nil || interrupted != nil || stopped != nil || startErr != nil {
				continue
			}
			if code == ExitStopped && how == "" {
				// The group agreed to stop after a step (one rank was
				// signalled); the others are finishing that step and
				// exit on their own. A signal now would cut them short.
				stopped = &StoppedError{Rank: first + ev.local}
				s.logf("rank %d (pid %d) stopped at a step boundary; waiting up to %v for the others", stopped.Rank, ev.state.Pid(), o.Grace)
				if killAt == nil {
					killAt = time.After(o.Grace)
				}
				continue
			}
			if how == "" {
				how = fmt.Sprintf("exited with status %d", code)
			}
			failed = &ExitError{Rank: first + ev.local, Status: code, How: how}
			s.logf("rank %d (pid %d) %s; stopping the other processes", failed.Rank, ev.state.Pid(), how)
			if o.FlightSignal && sigFlight != nil && running > 0 {
				signalAll(sigFlight) // their flight records, before they stop
				time.Sleep(flightWait)
			}
			stop(sigTerm)
		case sig := <-sigs:
			if interrupted == nil {
				interrupted = sig
				s.logf("%v: passing it on to the processes (again to kill them at once)", sig)
				stop(sig)
			} else {
				s.logf("%v again: killing the processes", sig)
				signalAll(sigKill)
			}
		case <-killAt:
			var left []string
			for i := range n {
				if alive[i] {
					left = append(left, strconv.Itoa(first+i))
				}
			}
			s.logf("rank %s still running %v after being asked to stop: killing", strings.Join(left, ", "), o.Grace)
			signalAll(sigKill)
		}
	}
	if startErr != nil {
		return nil, nil, nil, startErr
	}
	return failed, interrupted, stopped, nil
}
