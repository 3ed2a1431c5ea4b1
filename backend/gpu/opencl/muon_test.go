package opencl_test

import (
	"testing"

	"github.com/fleetml/fleet/train"
)

// TestMuonRunOnOpenCLTracksCPU is TestReferenceRunOnOpenCLTracksCPU with
// Muon, through the trainer's own step (the packed buffers, Muon's
// matrices after AdamW's stretch, the clip coefficient on the device):
// the reference model's Llama-style variant with grouped keys and values
// trains 60 steps on opencl:0 and on the CPU from the same weights on the
// same batches, and every 10-step mean loss on OpenCL must stay within
// 1e-3 (relative) of the CPU's.
func TestMuonRunOnOpenCLTracksCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("60 steps on the OpenCL device")
	}
	cfg := train.Default()
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.BatchSize, cfg.GradAccum = 2, 4, 64, 32, 8, 1
	cfg.Arch, cfg.NKVHead, cfg.QKNorm, cfg.UntiedHead = "llama", 2, true, true
	cfg.Optimizer, cfg.MuonWeightDecay = "muon", 0.01
	cfg.Dropout, cfg.GradClip = 0, 1
	trackCPU(t, cfg, 1<<20, 60, 20)
}
