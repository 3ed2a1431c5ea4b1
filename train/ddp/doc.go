// Package ddp is a training run's data parallelism, PyTorch
// DistributedDataParallel's recipe, one process per device:
//
//   - Join joins the job's rendezvous store; Open forms the TCP process
//     group over it, broadcasts rank 0's parameters and checks that every
//     rank starts at the same step.
//   - On the last micro-step of a step, the gradient-ready hook (Hook)
//     hands each final gradient to its bucket, which is all-reduced while
//     backward goes on: over the TCP ring through host memory (a
//     dist.Reducer), or in device memory over a dist.DeviceGroup (NCCL) on
//     a communication stream, watched by a watchdog goroutine. Sync waits
//     for the last bucket.
//   - Under --zero 1 (ZeRO-1) Start shards the optimizer over the ranks,
//     the buckets are reduce-scattered into the ranks' shards instead, and
//     Finish updates this rank's shard and all-gathers the parameters.
//   - At the trainer's read points the ranks agree on stopping and on a
//     diverged step (Agree) and average what they log (Average).
//   - Every collective is recorded in a flight record (dist.FlightRecorder),
//     which a rank writes into the run's FlightDir when a collective fails
//     or on SIGUSR1, for fleet diagnose's desync report.
//
// The trainer (package train) sees a Group through the same small
// interface as a process alone; ddptest stands in for NCCL on the host in
// tests.
package ddp
