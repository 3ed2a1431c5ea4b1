package launch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// Sources of an Env: who started the process.
const (
	SourceFleetRun = "fleet run"
	SourceTorchrun = "torchrun"
	SourceSlurm    = "slurm"
	SourceKubeflow = "kubeflow"
	SourceSingle   = "single"
)

// Environment variables fleet itself reads and sets beyond torchrun's.
const (
	// EnvSecret holds the job's shared secret; every process of a job
	// must see the same one. `fleet run` sets it for its processes.
	EnvSecret = "FLEET_JOB_SECRET"
	// EnvFleetRun is set to 1 by `fleet run` for its processes, so they
	// can tell it from torchrun.
	EnvFleetRun = "FLEET_RUN"
	// EnvLocalDevice is the device slot of a process on its node: its
	// local rank, until an elastic shrink (Options.MinNProc) drops a slot,
	// after which the survivors keep their own devices (the GPU of slot k
	// is cuda:k) while their local ranks close up.
	EnvLocalDevice = "FLEET_LOCAL_DEVICE"
	// EnvElastic is set to 1 when the group may shrink (Options.MinNProc):
	// a trainer resuming with fewer processes than its checkpoint's then
	// keeps the global batch by raising its gradient accumulation.
	EnvElastic = "FLEET_ELASTIC"
	// EnvFlightDir is a folder `fleet run` makes for each attempt, where
	// each rank also writes its collectives' flight record when one fails
	// (dist.FlightDump), so that the launcher can print the desync report.
	EnvFlightDir = "FLEET_FLIGHT_DIR"
)

// DefaultMasterPort is torchrun's default rendezvous port, used by
// `fleet run` for multi-node jobs when --master-port is not given.
const DefaultMasterPort = 29500

// Env is what a trainer process knows about its place in a job.
type Env struct {
	Rank           int    // global rank, 0 ≤ Rank < WorldSize
	LocalRank      int    // rank among the processes on this node
	WorldSize      int    // processes in the job
	LocalWorldSize int    // processes on this node
	NodeRank       int    // this node's index
	MasterAddr     string // host of rank 0's rendezvous store
	MasterPort     int    // its port; 0 for a single process (none needed)
	RestartCount   int    // how many times the launcher restarted the job
	// Secret is the job's shared secret: the store and the ring refuse
	// connections that cannot prove they hold it. Empty when the launcher
	// gave none and none could be derived (see FromEnv); never logged.
	Secret string
	Source string // SourceFleetRun, SourceTorchrun, SourceSlurm, SourceKubeflow or SourceSingle
	// Warnings are things the caller should print: an absent or derived
	// secret, a doubtful environment. FromEnv prints nothing itself.
	Warnings []string
}

// Master returns MasterAddr:MasterPort in a form net.Dial accepts.
func (e Env) Master() string { return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort)) }

// String describes e for a log line; it never shows the secret.
func (e Env) String() string {
	s := fmt.Sprintf("rank %d of %d (local %d of %d, node %d) via %s", e.Rank, e.WorldSize,
		e.LocalRank, e.LocalWorldSize, e.NodeRank, e.Source)
	if e.WorldSize > 1 {
		s += ", master " + e.Master()
	}
	if e.RestartCount > 0 {
		s += fmt.Sprintf(", restart %d", e.RestartCount)
	}
	return s
}

// vars reads variables through a getenv function, treating empty as unset.
type vars func(string) string

func (v vars) get(k string) string { return strings.TrimSpace(v(k)) }
func (v vars) has(k string) bool   { return v.get(k) != "" }

// int reads k as an integer of at least min; errors name the variable.
func (v vars) int(k string, min int) (int, error) {
	s := v.get(k)
	if s == "" {
		return 0, fmt.Errorf("%s is not set", k)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not an integer", k, s)
	}
	if n < min {
		return 0, fmt.Errorf("%s=%d: must be at least %d", k, n, min)
	}
	return n, nil
}

// intOr is int with a default for an unset variable.
func (v vars) intOr(k string, min, def int) (int, error) {
	if !v.has(k) {
		return def, nil
	}
	return v.int(k, min)
}

// first returns the name of the first set variable among ks, or "".
func (v vars) first(ks ...string) string {
	for _, k := range ks {
		if v.has(k) {
			return k
		}
	}
	return ""
}

// names records which variables an Env's fields came from, for errors.
type names struct{ rank, world, local, localWorld, addr, port string }

var torchNames = names{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}

// FromEnv works out a process's place in its job from its environment,
// read through getenv (os.Getenv when nil). The sources are tried in order:
//
//  1. torchrun's variables (LOCAL_RANK, GROUP_RANK or TORCHELASTIC_RUN_ID
//     set): RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE are required,
//     GROUP_RANK gives the node rank (RANK / LOCAL_WORLD_SIZE when unset),
//     TORCHELASTIC_RESTART_COUNT the restart count. Source is "fleet run"
//     when FLEET_RUN=1 is also set, else "torchrun".
//  2. Slurm (SLURM_PROCID set): SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS
//     (or SLURM_NPROCS), SLURM_NODEID; the processes on this node from the
//     first of SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE and
//     SLURM_NTASKS_PER_NODE, indexed by SLURM_NODEID ("4(x2),1" and "2,1"
//     forms); the master from MASTER_ADDR if set, else the first host of
//     SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST; the port
//     from MASTER_PORT if set, else SlurmPort(SLURM_JOB_ID, SLURM_STEP_ID);
//     SLURM_RESTART_COUNT (a requeued job) the restart count. Without
//     SLURM_STEP_ID the process was not started by srun (it is the batch
//     script itself): this is read the same way, with a warning.
//  3. A Kubeflow PyTorchJob (RANK or WORLD_SIZE set, one process per pod):
//     RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (PET_MASTER_ADDR and
//     PET_MASTER_PORT when those are unset), PET_NODE_RANK for the node.
//     Any launcher that sets just these four env:// variables reads the
//     same way.
//  4. A Kubeflow TrainJob (PET_NNODES, PET_NODE_RANK or PET_NPROC_PER_NODE
//     set, no RANK): one process per pod, rank PET_NODE_RANK of PET_NNODES,
//     master PET_MASTER_ADDR:PET_MASTER_PORT.
//  5. None of these: a single process, rank 0 of 1.
//
// For 3 and 4, PET_NPROC_PER_NODE above 1 means the pod expects a launcher
// to start that many processes: FromEnv refuses, since the trainer was
// started directly; run it under `fleet run`, which reads PET_* as its
// defaults. An elastic PET_NNODES range ("1:4") is refused too.
//
// Inconsistent values are errors naming the variable: an integer that does
// not parse or is negative, a rank not below its world size, a world of
// more than one process with no master address or port.
//
// The secret is FLEET_JOB_SECRET. torchrun, srun and the operators do not
// set it; when it is unset and the world has more than one process, FromEnv
// derives one that all processes of the job agree on — from
// TORCHELASTIC_RUN_ID under torchrun (unless it is torchrun's default
// "none"), from SLURM_JOB_ID and SLURM_STEP_ID under Slurm — and adds a
// warning: a derived secret keeps processes of other jobs out by accident,
// not an attacker who can guess the id. With nothing to derive from (a
// PyTorchJob, torchrun's default run id) Secret is empty, with a warning
// that the store then cannot refuse strangers.
func FromEnv(getenv func(string) string) (Env, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	v := vars(getenv)
	var (
		e   Env
		n   names
		err error
	)
	switch {
	case v.first("LOCAL_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID") != "":
		e, n, err = fromTorchrun(v)
	case v.has("SLURM_PROCID"):
		e, n, err = fromSlurm(v)
	case v.first("RANK", "WORLD_SIZE") != "":
		e, n, err = fromPyTorchJob(v)
	case v.first("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE") != "":
		e, n, err = fromTrainJob(v)
	default:
		e = Env{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", Source: SourceSingle}
		n = torchNames
	}
	if err != nil {
		return Env{}, err
	}
	if err := e.check(n); err != nil {
		return Env{}, err
	}
	e.secret(v)
	return e, nil
}

// check enforces what must hold whatever the source.
func (e *Env) check(n names) error {
	switch {
	case e.Rank >= e.WorldSize:
		return fmt.Errorf("%s=%d is not below %s=%d", n.rank, e.Rank, n.world, e.WorldSize)
	case e.LocalRank >= e.LocalWorldSize:
		return fmt.Errorf("%s=%d is not below %s=%d", n.local, e.LocalRank, n.localWorld, e.LocalWorldSize)
	case e.LocalWorldSize > e.WorldSize:
		return fmt.Errorf("%s=%d exceeds %s=%d", n.localWorld, e.LocalWorldSize, n.world, e.WorldSize)
	case e.WorldSize > 1 && e.MasterAddr == "":
		return fmt.Errorf("%s is not set (needed with %s=%d)", n.addr, n.world, e.WorldSize)
	case e.WorldSize > 1 && e.MasterPort == 0:
		return fmt.Errorf("%s is not set (needed with %s=%d)", n.port, n.world, e.WorldSize)
	}
	return nil
}

// port reads a TCP port from k, or 0 when unset.
func (v vars) port(k string) (int, error) {
	if !v.has(k) {
		return 0, nil
	}
	p, err := v.int(k, 1)
	if err != nil {
		return 0, err
	}
	if p > 65535 {
		return 0, fmt.Errorf("%s=%d is not a TCP port (1-65535)", k, p)
	}
	return p, nil
}

func fromTorchrun(v vars) (Env, names, error) {
	e := Env{Source: SourceTorchrun}
	if v.get(EnvFleetRun) == "1" {
		e.Source = SourceFleetRun
	}
	var err error
	if e.WorldSize, err = v.int("WORLD_SIZE", 1); err != nil {
		return e, torchNames, err
	}
	if e.Rank, err = v.int("RANK", 0); err != nil {
		return e, torchNames, err
	}
	if e.LocalRank, err = v.int("LOCAL_RANK", 0); err != nil {
		return e, torchNames, err
	}
	if e.LocalWorldSize, err = v.int("LOCAL_WORLD_SIZE", 1); err != nil {
		return e, torchNames, err
	}
	if e.NodeRank, err = v.intOr("GROUP_RANK", 0, e.Rank/e.LocalWorldSize); err != nil {
		return e, torchNames, err
	}
	if e.RestartCount, err = v.intOr("TORCHELASTIC_RESTART_COUNT", 0, 0); err != nil {
		return e, torchNames, err
	}
	e.MasterAddr = v.get("MASTER_ADDR")
	e.MasterPort, err = v.port("MASTER_PORT")
	return e, torchNames, err
}

// SlurmPort is the rendezvous port of a Slurm step when MASTER_PORT is not
// set: 12000 + (job ID + 1000 × step ID) mod 20000, the same on every node
// of the step, different for steps of one job that run side by side, and
// below Linux's default ephemeral range (32768 and up).
func SlurmPort(jobID, stepID int) int {
	return 12000 + (jobID%20000+1000*(stepID%20))%20000
}

func fromSlurm(v vars) (Env, names, error) {
	e := Env{Source: SourceSlurm}
	n := names{rank: "SLURM_PROCID", world: "SLURM_NTASKS", local: "SLURM_LOCALID", addr: "SLURM_JOB_NODELIST", port: "MASTER_PORT"}
	var err error
	if e.Rank, err = v.int("SLURM_PROCID", 0); err != nil {
		return e, n, err
	}
	if !v.has("SLURM_NTASKS") && v.has("SLURM_NPROCS") {
		n.world = "SLURM_NPROCS"
	}
	if e.WorldSize, err = v.int(n.world, 1); err != nil {
		return e, n, err
	}
	if e.LocalRank, err = v.intOr("SLURM_LOCALID", 0, 0); err != nil {
		return e, n, err
	}
	if e.NodeRank, err = v.intOr("SLURM_NODEID", 0, 0); err != nil {
		return e, n, err
	}
	// Processes on this node.
	n.localWorld = v.first("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE")
	if n.localWorld == "" {
		if e.WorldSize > 1 {
			e.Warnings = append(e.Warnings, "no SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE or SLURM_NTASKS_PER_NODE: assuming every process of the step is on this node")
		}
		n.localWorld = n.world
		e.LocalWorldSize = e.WorldSize
	} else {
		counts, err := ParseTasksPerNode(v.get(n.localWorld))
		if err != nil {
			return e, n, fmt.Errorf("%s: %v", n.localWorld, err)
		}
		switch {
		case e.NodeRank < len(counts):
			e.LocalWorldSize = counts[e.NodeRank]
		case len(counts) == 1:
			e.LocalWorldSize = counts[0]
		default:
			return e, n, fmt.Errorf("SLURM_NODEID=%d is beyond %s=%q (%d nodes)", e.NodeRank, n.localWorld, v.get(n.localWorld), len(counts))
		}
	}
	if e.RestartCount, err = v.intOr("SLURM_RESTART_COUNT", 0, 0); err != nil {
		return e, n, err
	}
	// The master: rank 0 runs on the first node of the step.
	if v.has("MASTER_ADDR") {
		n.addr = "MASTER_ADDR"
		e.MasterAddr = v.get("MASTER_ADDR")
	} else if k := v.first("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"); k != "" {
		n.addr = k
		if e.MasterAddr, err = FirstHost(v.get(k)); err != nil {
			return e, n, fmt.Errorf("%s: %v", k, err)
		}
	}
	stepKey := v.first("SLURM_STEP_ID", "SLURM_STEPID")
	if stepKey == "" && e.WorldSize > 1 {
		e.Warnings = append(e.Warnings, fmt.Sprintf("SLURM_PROCID is set but SLURM_STEP_ID is not: this process was not started by srun, yet %s=%d; start the trainer with srun (or fleet run) or the other ranks will never come", n.world, e.WorldSize))
	}
	if v.has("MASTER_PORT") {
		e.MasterPort, err = v.port("MASTER_PORT")
		return e, n, err
	}
	if e.WorldSize > 1 {
		job, err := v.int("SLURM_JOB_ID", 0)
		if err != nil {
			return e, n, fmt.Errorf("%v (and MASTER_PORT is not set either: one of them gives the port)", err)
		}
		step := 0
		if stepKey != "" {
			// A batch or interactive step may read "batch" or
			// "extern"; those never run a multi-task job.
			step, _ = strconv.Atoi(v.get(stepKey))
		}
		e.MasterPort = SlurmPort(job, max(step, 0))
	}
	return e, n, nil
}

// petProcs checks PET_NPROC_PER_NODE for a process started directly, one
// per pod.
func petProcs(v vars, e *Env) error {
	s := v.get("PET_NPROC_PER_NODE")
	switch {
	case s == "" || s == "1":
		return nil
	case s == "auto" || s == "gpu":
		if !v.has("RANK") {
			e.Warnings = append(e.Warnings, fmt.Sprintf("PET_NPROC_PER_NODE=%s: running one process in this pod; to start one per GPU, run the trainer under `fleet run --nproc-per-node auto`", s))
		}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return fmt.Errorf("PET_NPROC_PER_NODE=%q is not an integer or auto", s)
	}
	return fmt.Errorf("PET_NPROC_PER_NODE=%d: the pod expects a launcher to start %d processes, but the trainer was started directly; start it under `fleet run` (which reads PET_*), or set %d processes per node to 1", n, n, n)
}

func petNodes(v vars) error {
	if s := v.get("PET_NNODES"); strings.Contains(s, ":") {
		return fmt.Errorf("PET_NNODES=%q: elastic node ranges are not supported; give a fixed number of nodes", s)
	}
	return nil
}

func fromPyTorchJob(v vars) (Env, names, error) {
	e := Env{Source: SourceKubeflow, LocalWorldSize: 1}
	n := torchNames
	n.local, n.localWorld = "LOCAL_RANK", "PET_NPROC_PER_NODE"
	var err error
	if e.WorldSize, err = v.int("WORLD_SIZE", 1); err != nil {
		return e, n, err
	}
	if e.Rank, err = v.int("RANK", 0); err != nil {
		return e, n, err
	}
	if err := petNodes(v); err != nil {
		return e, n, err
	}
	if err := petProcs(v, &e); err != nil {
		return e, n, err
	}
	if e.NodeRank, err = v.intOr("PET_NODE_RANK", 0, e.Rank); err != nil {
		return e, n, err
	}
	e.MasterAddr = v.get("MASTER_ADDR")
	if e.MasterAddr == "" && v.has("PET_MASTER_ADDR") {
		n.addr, e.MasterAddr = "PET_MASTER_ADDR", v.get("PET_MASTER_ADDR")
	}
	if !v.has("MASTER_PORT") && v.has("PET_MASTER_PORT") {
		n.port = "PET_MASTER_PORT"
	}
	e.MasterPort, err = v.port(n.port)
	return e, n, err
}

func fromTrainJob(v vars) (Env, names, error) {
	e := Env{Source: SourceKubeflow, LocalWorldSize: 1}
	n := names{"PET_NODE_RANK", "PET_NNODES", "LOCAL_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
	if err := petNodes(v); err != nil {
		return e, n, err
	}
	if err := petProcs(v, &e); err != nil {
		return e, n, err
	}
	var err error
	if e.WorldSize, err = v.int("PET_NNODES", 1); err != nil {
		return e, n, err
	}
	if e.Rank, err = v.int("PET_NODE_RANK", 0); err != nil {
		return e, n, err
	}
	e.NodeRank = e.Rank
	e.MasterAddr = v.get("PET_MASTER_ADDR")
	e.MasterPort, err = v.port("PET_MASTER_PORT")
	return e, n, err
}

// DeriveSecret is the secret FromEnv derives from a launcher's job id
// when FLEET_JOB_SECRET is unset: SHA-256 of a fixed label, the source and
// the id, in hex. Anyone who knows the id can compute it.
func DeriveSecret(source, id string) string {
	h := sha256.New()
	h.Write([]byte("fleet job secret v1\x00"))
	h.Write([]byte(source))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return hex.EncodeToString(h.Sum(nil))
}

// secret fills e.Secret; see FromEnv.
func (e *Env) secret(v vars) {
	if s := v(EnvSecret); s != "" {
		e.Secret = s
		return
	}
	if e.WorldSize == 1 {
		return
	}
	id, from := "", ""
	switch e.Source {
	case SourceTorchrun:
		if r := v.get("TORCHELASTIC_RUN_ID"); r != "" && r != "none" {
			id, from = r, "TORCHELASTIC_RUN_ID"
		}
	case SourceSlurm:
		if j := v.get("SLURM_JOB_ID"); j != "" {
			id, from = j+"."+v.get(v.first("SLURM_STEP_ID", "SLURM_STEPID")), "SLURM_JOB_ID and SLURM_STEP_ID"
		}
	}
	if id != "" {
		e.Secret = DeriveSecret(e.Source, id)
		e.Warnings = append(e.Warnings, fmt.Sprintf("%s is not set: the job secret is derived from %s, which keeps other jobs out by accident but not anyone who knows the id; export the same random %s to every process to make it a secret", EnvSecret, from, EnvSecret))
		return
	}
	e.Warnings = append(e.Warnings, fmt.Sprintf("%s is not set and there is nothing to derive one from: the job has no secret, so the rendezvous store cannot refuse strangers that reach %s; export the same random %s to every process", EnvSecret, e.Master(), EnvSecret))
}
