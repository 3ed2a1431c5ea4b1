package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchSimJSON runs fleet bench on the simulated H200 with --json:
// the file holds the step's counts and the cost model's figures, and the
// printed report calls the device side an estimate.
func TestBenchSimJSON(t *testing.T) {
	out := filepath.Join(t.TempDir(), "step.json")
	code, stdout, stderr := fleet(t, "bench", "--device", "sim:h200", "--steps", "2", "--warmup", "1", "--json", out)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "simulated h200") || !strings.Contains(stdout, "(estimate)") {
		t.Errorf("the report does not say what is simulated and estimated:\n%s", stdout)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"launches_per_step", "host_syncs_per_step", "h2d_bytes_per_step", "d2h_bytes_per_step",
		"driver_allocs_per_step", "peak_memory_bytes", "bytes_touched_per_step", "flops_per_step", "host_ms_per_step",
		"device_ms_per_step", "predicted_ms_per_step", "predicted_tokens_per_sec", "predicted_mfu"} {
		v, ok := r[k].(float64)
		if !ok || v < 0 {
			t.Errorf("%s = %v", k, r[k])
		}
	}
	// The batch goes up every step: 12 sequences of 64 inputs and targets, int32.
	if r["h2d_bytes_per_step"].(float64) < 2*12*64*4 || r["launches_per_step"].(float64) < 100 {
		t.Errorf("h2d %v, launches %v", r["h2d_bytes_per_step"], r["launches_per_step"])
	}
	if m := r["predicted_mfu"].(float64); m <= 0 || m >= 1 {
		t.Errorf("predicted MFU %v, want a fraction in (0, 1)", m)
	}
	if by, ok := r["launches_by_kernel"].(map[string]any); !ok || by["cublasGemmStridedBatchedEx"] == nil {
		t.Errorf("launches_by_kernel = %v", r["launches_by_kernel"])
	}
}
