package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBenchSimJSON runs fleet bench on the simulated H200 with --json:
// the file holds the step's counts and the cost model's figures, and the
// printed report calls the device side an estimate.
func TestBenchSimJSON(t *testing.T) {
	stdout, r := benchJSON(t, "--device", "sim:h200", "--steps", "2", "--warmup", "1")
	if !strings.Contains(stdout, "simulated h200") || !strings.Contains(stdout, "(estimate)") {
		t.Errorf("the report does not say what is simulated and estimated:\n%s", stdout)
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
	if r["h2d_bytes_per_step"].(float64) < 2*12*64*4 || r["launches_per_step"].(float64) < 90 { // 98 launches since LayerNorm's backward is one
		t.Errorf("h2d %v, launches %v", r["h2d_bytes_per_step"], r["launches_per_step"])
	}
	if m := r["predicted_mfu"].(float64); m <= 0 || m >= 1 {
		t.Errorf("predicted MFU %v, want a fraction in (0, 1)", m)
	}
	if by, ok := r["launches_by_kernel"].(map[string]any); !ok || by["cublasGemmStridedBatchedEx"] == nil {
		t.Errorf("launches_by_kernel = %v", r["launches_by_kernel"])
	}
}

// TestBenchSimWorld: with --sim-world the step all-reduces its gradients
// in buckets over a simulated NCCL, each bucket as backward finishes it;
// the collectives' time is the bus-bandwidth model's, only part of it is
// left exposed after backward, and a world beyond one node gets the
// network's bandwidth.
func TestBenchSimWorld(t *testing.T) {
	run := func(world string) map[string]any {
		stdout, r := benchJSON(t, "--device", "sim:h200", "--n-layer", "4", "--n-embd", "256", "--n-head", "4",
			"--block-size", "128", "--batch-size", "8", "--vocab-size", "1000", "--bucket-mb", "1",
			"--steps", "2", "--warmup", "2", "--matmuls=false", "--sim-world", world)
		if !strings.Contains(stdout, world+" ranks") || !strings.Contains(stdout, "not hidden by backward") {
			t.Errorf("the report does not give the communication:\n%s", stdout)
		}
		return r
	}
	r8, r16 := run("8"), run("16")
	params := r8["num_params"].(float64)
	buckets := r8["launches_by_kernel"].(map[string]any)["ncclAllReduce"].(float64)
	if buckets < 3 {
		t.Fatalf("%v all-reduces per step, want one per bucket of 1 MiB of %v parameters", buckets, params)
	}
	for _, c := range []struct {
		r     map[string]any
		world float64
		bw    float64
	}{{r8, 8, 450e9}, {r16, 16, 45e9}} {
		comm, exposed := c.r["comm_ms_per_step"].(float64), c.r["exposed_comm_ms_per_step"].(float64)
		want := (2*(c.world-1)/c.world*4*params/c.bw + buckets*1e-6) * 1e3
		if comm < want*0.99 || comm > want*1.01 {
			t.Errorf("world %v: all-reduce %.4f ms per step, want %.4f (the ring over %v bytes at %v B/s)", c.world, comm, want, 4*params, c.bw)
		}
		// Launched after backward, every bucket would be exposed; here all
		// but the last ones (the embedding's gradient is final last) run
		// under backward.
		if !(exposed > 0 && exposed < 0.6*comm) {
			t.Errorf("world %v: %.4f of %.4f ms exposed: want most of the all-reduce hidden by backward, and the last bucket's not", c.world, exposed, comm)
		}
		if p, d, h := c.r["predicted_ms_per_step"].(float64), c.r["device_ms_per_step"].(float64), c.r["host_ms_per_step"].(float64); p < d+exposed*0.999 || p < h {
			t.Errorf("world %v: predicted %.3f ms, device %.3f + exposed %.3f, host %.3f", c.world, p, d, exposed, h)
		}
		if s := c.r["host_syncs_per_step"].(float64); s != 0 {
			t.Errorf("world %v: %v host syncs per step", c.world, s)
		}
	}
}

// benchJSON runs fleet bench with args and --json, failing the test where
// it fails, and returns what it printed and the JSON it wrote.
func benchJSON(t *testing.T, args ...string) (string, map[string]any) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "step.json")
	code, stdout, stderr := fleet(t, append(append([]string{"bench"}, args...), "--json", out)...)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return stdout, r
}

// TestBenchSimZero: with --zero 1 on 8 simulated ranks the buckets are
// reduced into their shards' owners (ncclReduce, at least one per
// bucket), the shards' norms are added (one ncclAllReduce of a float) and
// the parameters gathered (a broadcast from each rank), with no host
// sync; each rank keeps an eighth of AdamW's moments, so the peak memory
// falls by about 7/8 of them (8 bytes per parameter).
func TestBenchSimZero(t *testing.T) {
	run := func(zero string) map[string]any {
		_, r := benchJSON(t, "--device", "sim:h200", "--n-layer", "4", "--n-embd", "256", "--n-head", "4",
			"--block-size", "128", "--batch-size", "8", "--vocab-size", "1000", "--bucket-mb", "1",
			"--steps", "2", "--warmup", "2", "--matmuls=false", "--sim-world", "8", "--zero", zero)
		return r
	}
	plain, zero := run("0"), run("1")
	params := zero["num_params"].(float64)
	by := zero["launches_by_kernel"].(map[string]any)
	buckets := plain["launches_by_kernel"].(map[string]any)["ncclAllReduce"].(float64)
	if r, _ := by["ncclReduce"].(float64); r < buckets {
		t.Errorf("%v reduces per step for %v buckets", r, buckets)
	}
	if a, _ := by["ncclAllReduce"].(float64); a != 1 {
		t.Errorf("%v all-reduces per step, want 1 (the norm)", a)
	}
	if b, _ := by["ncclBroadcast"].(float64); b != 8 {
		t.Errorf("%v broadcasts per step, want 8 (a shard each)", b)
	}
	if s := zero["host_syncs_per_step"].(float64); s != 0 {
		t.Errorf("%v host syncs per step", s)
	}
	saved := plain["peak_memory_bytes"].(float64) - zero["peak_memory_bytes"].(float64)
	if want := 8 * params * 7 / 8; saved < 0.9*want || saved > 1.1*want {
		t.Errorf("--zero 1 saves %.0f bytes of peak memory, want about %.0f (7/8 of the moments)", saved, want)
	}
	code, _, stderr := fleet(t, "bench", "--device", "sim:h200", "--zero", "1", "--steps", "1", "--warmup", "0")
	if code == 0 || !strings.Contains(stderr, "--sim-world") {
		t.Errorf("--zero without --sim-world: exit %d, %s", code, stderr)
	}
}

// TestBenchSimZeroMuon: Muon under --zero 1 on 4 simulated ranks, each
// rank simulated in turn (--sim-rank): every rank's step gathers the 4
// shards (a broadcast each) with no host sync, and the ranks' steps differ
// in the work they do (each orthogonalises its own matrices). A rank
// outside the world is refused.
func TestBenchSimZeroMuon(t *testing.T) {
	flops := map[float64]bool{}
	for r := range 4 {
		_, res := benchJSON(t, "--device", "sim:h100", "--n-layer", "4", "--n-embd", "128", "--n-head", "4",
			"--block-size", "64", "--batch-size", "4", "--vocab-size", "500", "--steps", "1", "--warmup", "1", "--matmuls=false",
			"--optimizer", "muon", "--sim-world", "4", "--zero", "1", "--sim-rank", strconv.Itoa(r))
		by := res["launches_by_kernel"].(map[string]any)
		if b, _ := by["ncclBroadcast"].(float64); b != 4 {
			t.Errorf("rank %d: %v broadcasts per step, want 4 (a shard each)", r, b)
		}
		if s := res["host_syncs_per_step"].(float64); s != 0 {
			t.Errorf("rank %d: %v host syncs per step", r, s)
		}
		flops[res["flops_per_step"].(float64)] = true
	}
	if len(flops) < 2 {
		t.Errorf("every rank's step does the same FLOPs (%v): the shards' matrices are not theirs alone", flops)
	}
	code, _, stderr := fleet(t, "bench", "--device", "sim:h100", "--sim-world", "4", "--sim-rank", "4", "--steps", "1", "--warmup", "0")
	if code == 0 || !strings.Contains(stderr, "--sim-rank 4") {
		t.Errorf("--sim-rank 4 of 4: exit %d, %s", code, stderr)
	}
}
