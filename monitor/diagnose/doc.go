// Package diagnose says what is holding a training run back.
//
// The trainer measures a run (Telemetry: the device, the batch shape,
// step time split into phases, bytes copied between host and device,
// host reads of device values, utilisation, memory, communication) and
// writes it as telemetry.json in the run's folder. Diagnose applies a
// small set of rules to it and names the main bottleneck, the numbers
// that show it, and the flag that fixes it; Format prints the result.
// `fleet diagnose RUN_DIR` and `fleet report` are its users.
//
// The rules and their thresholds (each one a named constant below):
//
//   - Data loading: the step waited for its batches for at least
//     DataWaitShareMin of its time. Fix: more --data-workers and a deeper
//     --prefetch.
//   - Small batch: mean utilisation below LowUtilPct while peak memory is
//     below MemSpareShare of the device's, and the idle time is not
//     explained by the other findings. Fix: a larger --batch-size (or
//     --batch-size auto), keeping the tokens per step with --grad-accum.
//   - Host-device transfers: copies between host and device take at least
//     TransferShareMin of the step (measured, or estimated from the bytes
//     at the link's bandwidth). Fix: keep tensors on the device, prefetch
//     the batch on the copy stream.
//   - fp32 on tensor cores: products in fp32 on a GPU with tensor cores.
//     Fix: --precision bf16. Never on a CPU.
//   - Host sync points: more than MaxSyncsPerStep host reads of device
//     values per step on a GPU, each draining the device's queue. Fix: a
//     larger --log-interval; read scalars once per log line.
//   - Communication: all-reduce time not overlapped with backward of at
//     least ExposedCommShareMin of the step. Fix: accumulate more
//     micro-batches per all-reduce (--grad-accum), overlap the buckets.
//   - Checkpoints and logging: at least CkptLogShareMin of the step.
//
// Each finding carries an estimate of the share of the step it costs;
// the largest one of at least MainShareMin is the main bottleneck. When
// none is, the run is compute-bound: the healthy verdict, with the share
// of the step spent in forward, backward and the optimizer, and the MFU,
// as its evidence.
//
// On a CPU, utilisation is the process's CPU time over the cores it may
// use, there are no host-device copies and a host read costs nothing.
package diagnose
