package bench

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/train"
)

// TestSimChargesPerKernel benchmarks a small GPT in bf16 on the simulated
// H100 and reads what the cost model charged each kernel: the per-kernel
// figures sum to the step's, no attention kernel runs above
// sim.MMAEfficiency of the BF16 peak and no kernel above
// sim.TensorCoreEfficiency, MFU is given in both units, and the JSON names
// the host's figures as the host's.
func TestSimChargesPerKernel(t *testing.T) {
	cfg := train.Default()
	cfg.Device, cfg.Precision = "sim:h100", "bf16"
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.BatchSize = 2, 4, 256, 256, 8
	r, err := Steps(cfg, 1000, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	s := r.SimReport
	if s == nil {
		t.Fatal("no simulator report")
	}
	peak := sim.Specs[1].BF16 * 1e12
	var ms, flops, bytes float64
	attention := 0
	for k, v := range s.DeviceMsByKernel {
		ms += v
		f := s.FLOPsByKernel[k]
		flops += f
		bytes += s.BytesByKernel[k]
		if v <= 0 || s.LaunchesByKernel[k] <= 0 {
			t.Errorf("%s: %g ms, %g launches", k, v, s.LaunchesByKernel[k])
		}
		rate := f / (v / 1e3) / peak
		limit := sim.TensorCoreEfficiency
		if strings.Contains(k, "attention") {
			limit = sim.MMAEfficiency
			attention++
		}
		if rate > limit+1e-9 {
			t.Errorf("%s is charged at %.3f of the BF16 peak, above %.2f", k, rate, limit)
		}
	}
	// The forward kernel and the backward pass's three launches (D and the
	// dq accumulator zeroed, the main kernel, dq written out).
	if attention != 4 {
		t.Errorf("%d attention kernels charged, want 4 (%v)", attention, s.DeviceMsByKernel)
	}
	for _, c := range []struct {
		what      string
		sum, want float64
	}{{"device ms", ms, s.DeviceMsPerStep}, {"FLOPs", flops, s.FLOPsPerStep}, {"bytes", bytes, s.BytesTouchedPerStep}} {
		if math.Abs(c.sum-c.want) > 1e-9*c.want || c.want <= 0 {
			t.Errorf("the kernels' %s sum to %g, the step's are %g", c.what, c.sum, c.want)
		}
	}
	// llm.c's 6N + 6·L·C·T against PaLM's 6N + 12·L·C·T.
	n := float64(r.NumParams)
	if r.FLOPsPerToken != 6*n+6*2*256*256 || r.FLOPsPerTokenPaLM != 6*n+12*2*256*256 {
		t.Errorf("FLOPs per token %g (llm.c) and %g (PaLM), want %g and %g", r.FLOPsPerToken, r.FLOPsPerTokenPaLM, 6*n+6*2*256*256, 6*n+12*2*256*256)
	}
	if got, want := s.PredictedMFUPaLM/s.PredictedMFU, r.FLOPsPerTokenPaLM/r.FLOPsPerToken; math.Abs(got-want) > 1e-12 || s.PredictedMFU <= 0 {
		t.Errorf("predicted MFU %g (llm.c), %g (PaLM)", s.PredictedMFU, s.PredictedMFUPaLM)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ms_per_step", "tokens_per_sec", "gflops"} {
		if _, ok := m[k]; ok {
			t.Errorf("the JSON of a simulated GPU has %s, the host's figure under the device's name", k)
		}
	}
	for _, k := range []string{"host_ms_per_step", "host_tokens_per_sec", "host_gflops", "flops_by_kernel", "device_ms_by_kernel", "predicted_mfu", "predicted_mfu_palm", "flops_per_token_palm"} {
		if _, ok := m[k]; !ok {
			t.Errorf("the JSON has no %s", k)
		}
	}
}
