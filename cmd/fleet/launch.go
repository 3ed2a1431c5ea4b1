package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/launch"
)

const runUsage = `Usage: fleet run [flags] [--] COMMAND [ARGS...]

Starts --nproc-per-node copies of COMMAND on this node, each with torchrun's
environment (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT) and the job's secret
(FLEET_JOB_SECRET), prefixes their output lines with "[rank R] ", passes
SIGINT and SIGTERM on to them, and when one fails stops the others and
restarts them all, up to --max-restarts times. It exits with the failing
process's status when restarts run out.

COMMAND may be a fleet command (train, eval, sample, bench, ...) or the word
fleet: both run this fleet binary itself. Give a path (./train) to run
another program of the same name.

A multi-node job runs one fleet run per node, each with its --node-rank, the
same --nnodes, --master-addr and --master-port, and the same FLEET_JOB_SECRET
in its environment (required with --nnodes > 1). Restarts are per node.
In a Kubeflow pod the PET_* variables the operator sets are the defaults.

Flags:
`

// fleetCommands are the words that, first in COMMAND, run this fleet binary.
var fleetCommands = map[string]bool{
	"fleet": true, "train": true, "eval": true, "sample": true, "bench": true, "doctor": true,
	"prepare": true, "ngram": true, "export": true, "tokenizer": true,
}

// runSettings are fleet run's flags, named as the launch.Options fields
// they set (--nproc-per-node is read into NProcPerNode's number).
type runSettings struct {
	NProcPerNode                      string
	NNodes, NodeRank                  int
	MasterAddr                        string
	MasterPort, MaxRestarts, MinNProc int
	Grace                             time.Duration
}

// launchFlags declares fleet run's flags, once: runCmd registers them, and
// errors of package launch, which name launch.Options' fields, name them.
var launchFlags = setting.Table[runSettings]{
	{Name: "nproc-per-node", Field: "NProcPerNode", Usage: "processes on this node: a number, or auto for one per GPU (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN; 1 without GPUs)",
		Bind: func(o *runSettings) any { return &o.NProcPerNode }},
	{Name: "nnodes", Field: "NNodes", Usage: "nodes in the job",
		Bind: func(o *runSettings) any { return &o.NNodes }},
	{Name: "node-rank", Field: "NodeRank", Usage: "this node's rank, 0 … nnodes-1",
		Bind: func(o *runSettings) any { return &o.NodeRank }},
	{Name: "master-addr", Field: "MasterAddr", Usage: "host of node 0, where rank 0 serves the rendezvous (default 127.0.0.1 on one node; required with --nnodes > 1)",
		Bind: func(o *runSettings) any { return &o.MasterAddr }},
	{Name: "master-port", Field: "MasterPort", Usage: "rendezvous port (default: a free port on one node, 29500 across nodes)",
		Bind: func(o *runSettings) any { return &o.MasterPort }},
	{Name: "max-restarts", Field: "MaxRestarts", Usage: "restarts of all processes after one fails",
		Bind: func(o *runSettings) any { return &o.MaxRestarts }},
	{Name: "grace", Field: "Grace", Usage: "how long stopped processes get to exit before SIGKILL",
		Bind: func(o *runSettings) any { return &o.Grace }},
	{Name: "min-nproc", Field: "MinNProc", Usage: "elastic shrink (one node): a process that fails again after a restart is dropped and the others go on, from the last checkpoint with the same global batch, while at least this many remain (0: never shrink)",
		Bind: func(o *runSettings) any { return &o.MinNProc }},
}

// runCmd is `fleet run`: launch.Run behind torchrun-like flags. A failed job
// returns the *launch.ExitError (or *launch.InterruptedError) whose
// ExitCode is the status to exit with.
func runCmd(args []string, stdout, stderr io.Writer) error {
	defaults, err := runDefaults(os.Getenv)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	o := runSettings{NProcPerNode: defaults.nproc, NNodes: defaults.nnodes, NodeRank: defaults.nodeRank,
		MasterAddr: defaults.masterAddr, MasterPort: defaults.masterPort, MaxRestarts: defaults.maxRestarts,
		Grace: launch.DefaultGrace}
	launchFlags.Register(fs, &o)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	command := fs.Args()
	if len(command) == 0 {
		fmt.Fprintln(stderr, "fleet run: no command to run")
		fs.Usage()
		return errUsage
	}
	n, err := nprocPerNode(o.NProcPerNode, os.Getenv, filepath.Glob)
	if err != nil {
		fmt.Fprintf(stderr, "fleet run: %v\n", err)
		return errUsage
	}
	command, err = resolveCommand(command, os.Executable)
	if err != nil {
		return err
	}
	// fleet trainers write their flight records on SIGUSR1; another
	// program might die of it.
	self, _ := os.Executable()
	trainer := len(command) >= 2 && command[1] == "train" && (filepath.Base(command[0]) == "fleet" || command[0] == self)
	return launch.Run(launch.Options{
		NProcPerNode: n,
		NNodes:       o.NNodes,
		NodeRank:     o.NodeRank,
		MasterAddr:   o.MasterAddr,
		MasterPort:   o.MasterPort,
		MaxRestarts:  o.MaxRestarts,
		MinNProc:     o.MinNProc,
		FlightSignal: trainer,
		Command:      command,
		Secret:       os.Getenv(launch.EnvSecret),
		Stdout:       stdout,
		Stderr:       stderr,
		Grace:        o.Grace,
	})
}

// runFlagDefaults are fleet run's defaults, from Kubeflow's PET_* variables
// when they are set (as torchrun takes its defaults from them).
type runFlagDefaults struct {
	nproc                        string
	nnodes, nodeRank, masterPort int
	maxRestarts                  int
	masterAddr                   string
}

func runDefaults(getenv func(string) string) (runFlagDefaults, error) {
	d := runFlagDefaults{nproc: "1", nnodes: 1}
	if s := getenv("PET_NPROC_PER_NODE"); s != "" {
		d.nproc = s
	}
	intVar := func(k string, dst *int, min int) error {
		s := strings.TrimSpace(getenv(k))
		if s == "" {
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < min {
			if strings.Contains(s, ":") && k == "PET_NNODES" {
				return fmt.Errorf("%s=%q: elastic node ranges are not supported; give a fixed number of nodes", k, s)
			}
			return fmt.Errorf("%s=%q is not an integer of at least %d", k, s, min)
		}
		*dst = n
		return nil
	}
	for _, v := range []struct {
		k   string
		dst *int
		min int
	}{
		{"PET_NNODES", &d.nnodes, 1},
		{"PET_NODE_RANK", &d.nodeRank, 0},
		{"PET_MASTER_PORT", &d.masterPort, 1},
		{"PET_MAX_RESTARTS", &d.maxRestarts, 0},
	} {
		if err := intVar(v.k, v.dst, v.min); err != nil {
			return d, err
		}
	}
	d.masterAddr = getenv("PET_MASTER_ADDR")
	// A PyTorchJob of training-operator v1 sets PET_NNODES but gives the
	// master as MASTER_ADDR and MASTER_PORT.
	if getenv("PET_NNODES") != "" {
		if d.masterAddr == "" {
			d.masterAddr = getenv("MASTER_ADDR")
		}
		if d.masterPort == 0 {
			if err := intVar("MASTER_PORT", &d.masterPort, 1); err != nil {
				return d, err
			}
		}
	}
	return d, nil
}

var nvidiaDevice = regexp.MustCompile(`/nvidia[0-9]+$`)

// nprocPerNode reads --nproc-per-node: a count, or auto (also gpu): the
// devices CUDA_VISIBLE_DEVICES lists when it is set, else the /dev/nvidiaN
// device files, and 1 when there are none.
func nprocPerNode(s string, getenv func(string) string, glob func(string) ([]string, error)) (int, error) {
	if s != "auto" && s != "gpu" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("--nproc-per-node %q: want a positive number or auto", s)
		}
		return n, nil
	}
	n := 0
	if v, ok := visibleDevices(getenv(launch.EnvVisibleDevices)); ok {
		n = v
	} else if files, err := glob("/dev/nvidia*"); err == nil {
		for _, f := range files {
			if nvidiaDevice.MatchString(f) {
				n++
			}
		}
	}
	return max(n, 1), nil
}

// visibleDevices counts the devices of a CUDA_VISIBLE_DEVICES value; ok is
// false when it is unset. CUDA stops at the first invalid entry, such as -1.
func visibleDevices(s string) (n int, ok bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	for _, d := range strings.Split(s, ",") {
		d = strings.TrimSpace(d)
		if d == "" || strings.HasPrefix(d, "-") || d == "NoDevFiles" {
			break
		}
		n++
	}
	return n, true
}

// resolveCommand runs this fleet binary for COMMANDs that start with fleet
// or one of its commands.
func resolveCommand(command []string, executable func() (string, error)) ([]string, error) {
	if !fleetCommands[command[0]] {
		return command, nil
	}
	self, err := executable()
	if err != nil {
		return nil, fmt.Errorf("finding the fleet binary to run %q: %v", command[0], err)
	}
	if command[0] == "fleet" {
		return append([]string{self}, command[1:]...), nil
	}
	return append([]string{self}, command...), nil
}
