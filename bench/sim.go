package bench

import (
	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/tensor"
)

// SimReport is what a simulated GPU (--device sim:NAME) recorded over a
// benchmark's timed steps, each figure per training step. The host side is
// real: host_ms_per_step is the wall time this machine spent issuing a
// step, through the CUDA backend's own code. The device side is counted
// exactly, but its time is the cost model's estimate (see package sim),
// and so are the predictions built on it.
type SimReport struct {
	GPU              string             `json:"gpu"`
	Note             string             `json:"note"`
	LaunchesPerStep  float64            `json:"launches_per_step"`
	LaunchesByKernel map[string]float64 `json:"launches_by_kernel"`
	HostSyncsPerStep float64            `json:"host_syncs_per_step"`
	// HostSyncsByCall splits them by the call that waited.
	HostSyncsByCall map[string]float64 `json:"host_syncs_by_call"`
	// FinalSyncHostSyncs are the host waits of the one synchronisation
	// after the timed window, which the per-step figures leave out.
	FinalSyncHostSyncs  int64   `json:"final_sync_host_syncs"`
	H2DBytesPerStep     float64 `json:"h2d_bytes_per_step"`
	D2HBytesPerStep     float64 `json:"d2h_bytes_per_step"`
	DriverAllocsPerStep float64 `json:"driver_allocs_per_step"`
	PeakMemoryBytes     int64   `json:"peak_memory_bytes"`   // the pool's peak allocation
	PeakReservedBytes   int64   `json:"peak_reserved_bytes"` // the driver's: what the pool held at most
	BytesTouchedPerStep float64 `json:"bytes_touched_per_step"`
	FLOPsPerStep        float64 `json:"flops_per_step"`
	// FLOPsByKernel, BytesByKernel and DeviceMsByKernel are what the cost
	// model charges each kernel (and each library call, by its
	// function's name) per step: the FLOPs it executes, the bytes it
	// moves and its predicted time, which sums to DeviceMsPerStep.
	FLOPsByKernel    map[string]float64 `json:"flops_by_kernel"`
	BytesByKernel    map[string]float64 `json:"bytes_by_kernel"`
	DeviceMsByKernel map[string]float64 `json:"device_ms_by_kernel"`
	// HostMsPerStep, HostTokensPerSec and HostGFLOPs are this machine's:
	// the wall time to issue a step (through the CUDA backend's own code,
	// against the simulated libraries), and the rate it would mean if the
	// device took no time. They are not the GPU's figures; the predicted
	// ones are.
	HostMsPerStep         float64 `json:"host_ms_per_step"`
	HostTokensPerSec      float64 `json:"host_tokens_per_sec"`
	HostGFLOPs            float64 `json:"host_gflops"`
	DeviceMsPerStep       float64 `json:"device_ms_per_step"`
	PredictedMsPerStep    float64 `json:"predicted_ms_per_step"`
	PredictedTokensPerSec float64 `json:"predicted_tokens_per_sec"`
	// PredictedMFU is in llm.c's units (model.GPT.FLOPsPerToken: 6N +
	// 6·L·C·T per token), PredictedMFUPaLM in PaLM's (12·L·C·T for
	// attention), each against the model GPU's dense BF16 peak.
	PredictedMFU     float64 `json:"predicted_mfu"`
	PredictedMFUPaLM float64 `json:"predicted_mfu_palm"`
	// With --sim-world: the ranks, the collectives' bandwidth model, the
	// collectives' time per step and the part of it the compute stream
	// waited for (exposed, not overlapped with backward), which adds to
	// the step's device time in the prediction. Estimates.
	SimWorld             int     `json:"sim_world,omitempty"`
	CommModel            string  `json:"comm_model,omitempty"`
	CommMsPerStep        float64 `json:"comm_ms_per_step"`
	ExposedCommMsPerStep float64 `json:"exposed_comm_ms_per_step"`
}

// simGroup is a dist.DeviceGroup of world ranks on a simulated GPU: the
// collectives of rank (0 unless --sim-rank) are recorded on the device
// (sim.Device.Collective) with the bytes a ring moves through each rank's
// link; the other ranks are imagined doing the same. Nothing is reduced
// (the device holds no data).
type simGroup struct {
	dev         *sim.Device
	world, rank int
}

var _ dist.DeviceGroup = (*simGroup)(nil)

func (g *simGroup) Rank() int { return g.rank }
func (g *simGroup) Size() int { return g.world }
func (g *simGroup) AllReduce(buf uintptr, count int, dt dist.DType, op dist.Op, stream uintptr) error {
	n := float64(g.world)
	g.dev.Collective("ncclAllReduce", 2*(n-1)/n*float64(count*dt.Size()), g.world, stream)
	return nil
}
func (g *simGroup) Broadcast(buf uintptr, count int, dt dist.DType, root int, stream uintptr) error {
	g.dev.Collective("ncclBroadcast", float64(count*dt.Size()), g.world, stream)
	return nil
}
func (g *simGroup) AllGather(send, recv uintptr, count int, dt dist.DType, stream uintptr) error {
	g.dev.Collective("ncclAllGather", float64(g.world-1)*float64(count*dt.Size()), g.world, stream)
	return nil
}
func (g *simGroup) ReduceScatterShards(buf uintptr, off, count int, b dist.Bounds, dt dist.DType, op dist.Op, stream uintptr) error {
	// As NCCL's group does it: a ring reduce to each owner of a shard the
	// piece meets, each moving its piece once through every link.
	for k := range g.world {
		lo, hi := b.Shard(k)
		if lo, hi = max(lo, off), min(hi, off+count); lo < hi {
			g.dev.Collective("ncclReduce", float64((hi-lo)*dt.Size()), g.world, stream)
		}
	}
	return nil
}
func (g *simGroup) AllGatherShards(buf uintptr, b dist.Bounds, dt dist.DType, stream uintptr) error {
	for k := range g.world { // a broadcast from each owner
		lo, hi := b.Shard(k)
		g.dev.Collective("ncclBroadcast", float64((hi-lo)*dt.Size()), g.world, stream)
	}
	return nil
}
func (g *simGroup) CheckAsync() error { return nil }
func (g *simGroup) Abort() error      { return nil }
func (g *simGroup) Close() error      { return nil }

// simOf returns the simulated device behind dev, or nil.
func simOf(dev tensor.Device) *sim.Device {
	b, err := backend.Get(dev)
	if err != nil {
		return nil
	}
	return sim.Of(b)
}

// simReport turns a timed window's counters (steps steps; then the final
// synchronisation's) into per-step figures and the cost model's
// prediction.
func simReport(spec sim.Spec, w sim.Counters, finalSyncs int64, steps int, host Result, flopsPerTokenPaLM float64) *SimReport {
	hostMs, peakAlloc, tokensPerStep, flopsPerToken := host.MsPerStep, host.PeakBytes, host.TokensPerStep, host.FLOPsPerToken
	n := float64(steps)
	r := &SimReport{
		GPU: spec.Name,
		Note: "simulated: launches, host syncs, copies, allocations, memory and FLOPs are counted exactly; bytes are each kernel's stated traffic; " +
			"device_ms_per_step, device_ms_by_kernel and the predicted figures are the cost model's estimates; the host_ figures are this machine's, not the GPU's",
		LaunchesPerStep: float64(w.Launches) / n, LaunchesByKernel: map[string]float64{},
		HostSyncsPerStep: float64(w.HostSyncs) / n, FinalSyncHostSyncs: finalSyncs,
		H2DBytesPerStep: float64(w.H2DBytes) / n, D2HBytesPerStep: float64(w.D2HBytes) / n,
		DriverAllocsPerStep: float64(w.DriverAllocs) / n, PeakMemoryBytes: peakAlloc, PeakReservedBytes: w.Peak,
		BytesTouchedPerStep: w.BytesTouched / n, FLOPsPerStep: w.FLOPs / n,
		HostMsPerStep: hostMs, HostTokensPerSec: host.TokensPerSec, HostGFLOPs: host.GFLOPs, DeviceMsPerStep: w.DeviceSeconds / n * 1e3,
		FLOPsByKernel: map[string]float64{}, BytesByKernel: map[string]float64{}, DeviceMsByKernel: map[string]float64{},
		CommMsPerStep: w.CommSeconds / n * 1e3, ExposedCommMsPerStep: w.ExposedCommSeconds / n * 1e3,
	}
	for k, v := range w.ByKernel {
		r.LaunchesByKernel[k] = float64(v) / n
	}
	for k, v := range w.FLOPsByKernel {
		r.FLOPsByKernel[k] = v / n
	}
	for k, v := range w.BytesByKernel {
		r.BytesByKernel[k] = v / n
	}
	for k, v := range w.SecondsByKernel {
		r.DeviceMsByKernel[k] = v / n * 1e3
	}
	r.HostSyncsByCall = map[string]float64{}
	for k, v := range w.SyncsBy {
		r.HostSyncsByCall[k] = float64(v) / n
	}
	// The host issues while the device runs: a step takes the longer. The
	// device's time includes its waits for collectives.
	r.PredictedMsPerStep = max(r.HostMsPerStep, r.DeviceMsPerStep+r.ExposedCommMsPerStep)
	if r.PredictedMsPerStep > 0 {
		r.PredictedTokensPerSec = float64(tokensPerStep) / (r.PredictedMsPerStep / 1e3)
		r.PredictedMFU = flopsPerToken * r.PredictedTokensPerSec / (spec.BF16 * 1e12)
		r.PredictedMFUPaLM = flopsPerTokenPaLM * r.PredictedTokensPerSec / (spec.BF16 * 1e12)
	}
	return r
}
