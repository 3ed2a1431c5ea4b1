// Package launch is fleet's launcher contract: how a trainer process learns
// its place in a data-parallel job, and the supervisor behind `fleet run`.
//
// FromEnv reads the environment a process was started with, whoever started
// it: `fleet run` or torchrun (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_RESTART_COUNT), Slurm's srun (SLURM_PROCID, SLURM_LOCALID,
// SLURM_NTASKS, the tasks-per-node lists and the first host of the step's
// node list), a Kubeflow PyTorchJob or TrainJob (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT and the PET_* variables the operators set), or
// nothing at all: a single process, rank 0 of 1. The result is one Env, the
// same whatever the source, so the rest of fleet never looks at a launcher's
// variables itself.
//
// Run starts and supervises one node's share of a job the way torchrun
// does: N local processes with torchrun's variables and a per-job secret
// (FLEET_JOB_SECRET), each output line prefixed with its rank, signals
// forwarded, and the whole group stopped and restarted when one process
// fails, up to a limit. Restarts are per node: see Run.
//
// ExpandHostList and FirstHost read Slurm's compressed host lists
// ("node[01-04,07],gpu5").
package launch
