// Package dist is fleet's data-parallel plumbing: the rendezvous store that
// a job's ranks meet through, and process groups whose collectives
// (all-reduce, broadcast, all-gather, barrier) keep every rank's copy of the
// model identical.
//
// A job starts with [NewStore]: rank 0 hosts a small key-value store on
// MASTER_ADDR:MASTER_PORT, every rank connects to it and registers, and the
// call returns once all ranks have arrived, or fails naming the ranks that
// never did. Every connection, to the store or between ranks, must prove it
// holds the job's secret (an HMAC challenge and response; the secret never
// crosses the wire); strangers are refused and logged, and the job carries on.
//
// [NewTCPGroup] is the CPU backend, the role gloo has for PyTorch: ranks
// connect in a ring (each to its successor) on the interface that reaches
// the master, and all-reduce is a chunked, pipelined ring reduce-scatter
// followed by an all-gather. Each element's sum is formed by one rank in a
// fixed order and then copied to the others, so every rank ends with
// bitwise-identical results, run after run. Collectives run one at a time,
// in the order they were issued (which must be the same on every rank);
// [ProcessGroup.AllReduceAsync] lets a caller keep several in flight while
// it computes, as DDP does during the backward pass.
//
// Failures never hang silently: a collective that gets no data from a
// neighbour for the group's timeout (10 minutes by default), or whose
// neighbour goes away, fails on every rank with an error naming the
// operation and the rank at fault, e.g.
//
//	all-reduce #17 (4.0 MB): rank 2 closed its connection
//
// and the group is then unusable: every later call returns that error.
//
// [Reducer] is the data-parallel gradient path: gradients grouped into
// buckets (25 MB, reverse parameter order) whose averaging all-reduces start
// as soon as their gradients are final, during the backward pass;
// [BroadcastParams] gives every rank rank 0's initial weights.
// [BenchAllReduce] measures the ring's bandwidth as nccl-tests reports it.
//
// Package dist/nccl is the GPU backend: NCCL, opened at run time, with its
// unique id passed through the store.
package dist
