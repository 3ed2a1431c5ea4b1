package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/stats"
	"github.com/fleetml/fleet/train/ddp/ddptest"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/testenv"
	"github.com/fleetml/fleet/train/config"
)

// The data-parallel tests start each rank as a child process: the test
// binary itself, run with -test.run=^TestDDPChild$ and these variables,
// next to the launcher's (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// FLEET_JOB_SECRET).
const (
	envChildConfig  = "FLEET_DDP_TEST_CONFIG"  // the run's Config as JSON
	envChildWeights = "FLEET_DDP_TEST_WEIGHTS" // where the rank writes its final weights
	envChildResume  = "FLEET_DDP_TEST_RESUME"  // 1: Config.Resume (not in the JSON)
	envChildBucket  = "FLEET_DDP_TEST_BUCKET"  // the device group's bucket size in bytes
)

// TestDDPChild is one rank of a data-parallel group started by runGroup;
// run by itself it does nothing.
func TestDDPChild(t *testing.T) {
	js := os.Getenv(envChildConfig)
	if js == "" {
		t.Skip("a child process of the data-parallel tests")
	}
	var cfg Config
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatal(err)
	}
	atoi := func(name string) int {
		n, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return n
	}
	cfg.Rank, cfg.WorldSize, cfg.MasterPort = atoi("RANK"), atoi("WORLD_SIZE"), atoi("MASTER_PORT")
	cfg.MasterAddr, cfg.Secret = os.Getenv("MASTER_ADDR"), os.Getenv("FLEET_JOB_SECRET")
	cfg.Resume = os.Getenv(envChildResume) == "1"
	if cfg.DistBackend == "nccl" && cfg.Device == "cpu" {
		newDeviceGroup = ddptest.NewHostDeviceGroup // NCCL's stand-in on the host
	}
	if v := os.Getenv(envChildBucket); v != "" {
		testDeviceBucket = atoi(envChildBucket)
	}
	res, err := Run(cfg, os.Stderr)
	if err != nil {
		t.Fatalf("rank %d: %v", cfg.Rank, err)
	}
	if err := res.Model.SaveWeights(os.Getenv(envChildWeights), nil); err != nil {
		t.Fatal(err)
	}
}

// freePort is a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// childEnv is the test process's environment without the variables that
// would place a child in another job or inject a fault.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
			"FLEET_JOB_SECRET", "TORCHELASTIC_RESTART_COUNT", "FLEET_FAULT_EXIT", envChildConfig, envChildWeights, envChildResume:
			continue
		}
		env = append(env, kv)
	}
	return env
}

// runGroup trains cfg with world ranks, each a child process on loopback,
// and returns every rank's final weights.
func runGroup(t testing.TB, cfg Config, world int) []*checkpoint.File {
	t.Helper()
	files, _ := runGroupOut(t, cfg, world)
	return files
}

// runGroupOut is runGroup that returns each rank's output too.
func runGroupOut(t testing.TB, cfg Config, world int) ([]*checkpoint.File, []string) {
	t.Helper()
	cfgs := make([]Config, world)
	for r := range cfgs {
		cfgs[r] = cfg
	}
	files, errs, outs := startGroup(t, cfgs)
	for r, err := range errs {
		if err != nil {
			for q := range world {
				t.Logf("rank %d of %d (%v):\n%s", q, world, errs[q], outs[q])
			}
			t.Fatalf("rank %d of %d: %v", r, world, err)
		}
	}
	for r := range world {
		if want := fmt.Sprintf("dist: %d ranks joined", world); world > 1 && !strings.Contains(outs[r], want) {
			t.Fatalf("rank %d's log lacks %q:\n%s", r, want, outs[r])
		}
		if want := "all-reduced on the device"; cfg.DistBackend == "nccl" && !strings.Contains(outs[r], want) {
			t.Fatalf("rank %d did not take the device-group path (no %q):\n%s", r, want, outs[r])
		}
	}
	return files, outs
}

// startGroup runs a group of len(cfgs) ranks, rank r with cfgs[r] (and
// cfgs[r].Resume), until every rank has exited, and returns the weights
// of those that succeeded, each rank's error and output.
func startGroup(t testing.TB, cfgs []Config) (files []*checkpoint.File, errs []error, outs []string) {
	testenv.NeedSelfExec(t)
	t.Helper()
	world := len(cfgs)
	dir := t.TempDir()
	secret := fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
	port := strconv.Itoa(freePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bufs := make([]bytes.Buffer, world)
	errs = make([]error, world)
	var wg sync.WaitGroup
	for r, cfg := range cfgs {
		js, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDDPChild$", "-test.count=1")
		cmd.Env = append(childEnv(), envChildConfig+"="+string(js),
			envChildWeights+"="+filepath.Join(dir, fmt.Sprintf("rank%d.safetensors", r)),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port, "FLEET_JOB_SECRET="+secret)
		if cfg.Resume {
			cmd.Env = append(cmd.Env, envChildResume+"=1")
		}
		cmd.Stdout, cmd.Stderr = &bufs[r], &bufs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs[r] = cmd.Wait() })
	}
	wg.Wait()
	files = make([]*checkpoint.File, world)
	outs = make([]string, world)
	for r := range world {
		outs[r] = bufs[r].String()
		if errs[r] != nil {
			continue
		}
		var err error
		if files[r], err = checkpoint.Load(filepath.Join(dir, fmt.Sprintf("rank%d.safetensors", r))); err != nil {
			t.Fatal(err)
		}
	}
	return files, errs, outs
}

// runSingle trains cfg in this process, alone, and returns its weights.
func runSingle(t *testing.T, cfg Config) *checkpoint.File {
	t.Helper()
	cfg.Out = filepath.Join(t.TempDir(), "out")
	return runSingleIn(t, cfg)
}

// runSingleIn is runSingle in cfg.Out (a run to resume, say).
func runSingleIn(t *testing.T, cfg Config) *checkpoint.File {
	t.Helper()
	var log bytes.Buffer
	res, err := Run(cfg, &log)
	if err != nil {
		t.Fatalf("single process: %v\n%s", err, log.String())
	}
	path := filepath.Join(t.TempDir(), "single.safetensors")
	if err := res.Model.SaveWeights(path, nil); err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// maxDiff is the largest absolute difference between two sets of weights
// (+Inf where they do not hold the same tensors).
func maxDiff(t *testing.T, a, b *checkpoint.File) float64 {
	t.Helper()
	if len(a.Tensors) != len(b.Tensors) || len(a.Tensors) == 0 {
		return math.Inf(1)
	}
	var d float64
	for name, ta := range a.Tensors {
		tb, ok := b.Tensors[name]
		if !ok || !slices.Equal(ta.Shape, tb.Shape) {
			return math.Inf(1)
		}
		va, err := ta.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		vb, err := tb.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for i := range va {
			x := math.Abs(float64(va[i]) - float64(vb[i]))
			if math.IsNaN(x) {
				return math.Inf(1)
			}
			d = max(d, x)
		}
	}
	return d
}

// sameBits reports the first tensor whose bytes differ ("" when none).
func sameBits(a, b *checkpoint.File) string {
	for name, ta := range a.Tensors {
		if tb, ok := b.Tensors[name]; !ok || !bytes.Equal(ta.Data, tb.Data) {
			return name
		}
	}
	if len(a.Tensors) != len(b.Tensors) {
		return "(the number of tensors)"
	}
	return ""
}

// randomWords is n bytes or more of text of random words from seed.
func randomWords(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 7))
	var b strings.Builder
	for b.Len() < n {
		for range 2 + r.IntN(7) {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		switch r.IntN(10) {
		case 0:
			b.WriteString(".\n")
		case 1:
			b.WriteString(", ")
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// ddpConfig is a small model for the equivalence tests: no dropout, a
// learning rate that moves the weights well beyond the tolerance in a few
// steps, and a global batch of 12 windows.
//
// The tolerance depends on the learning rate: a different summation order
// (ranks, micro-batches) changes a gradient by rounding, and where a
// gradient nearly cancels (the attention keys' component along the query,
// to which softmax is blind) AdamW turns that into a change of up to the
// learning rate times the step's m/√v. Over 30 seeds, 10 steps at 1e-3
// ended at most 2.7e-6 apart (8.4e-6 at 3e-3), one process on half the
// batch at least 8.7e-3 away.
func ddpConfig(t testing.TB, seed uint64) Config {
	dir := t.TempDir()
	path := filepath.Join(dir, "input.txt")
	if err := os.WriteFile(path, []byte(randomWords(seed, 60_000)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.Data = path
	c.Out = filepath.Join(dir, "out")
	c.Device = "cpu"
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize = 2, 2, 32, 16
	c.Dropout = 0
	c.BatchSize, c.GradAccum = 12, 1
	c.MaxIters = 10
	c.LR, c.MinLR, c.WarmupIters = 1e-3, 1e-4, 2
	c.EvalInterval, c.EvalIters, c.LogInterval = 1000, 1, 3
	c.DataWorkers = 1
	c.Seed = seed
	c.CommTimeout = time.Minute
	return c
}

// TestDDPEquivalence trains with 2 and 4 processes on loopback (tcp
// all-reduce) and checks that every rank ends with bitwise identical
// weights, equal within 1e-5 to one process training on the same global
// batch of 12 windows: 2 ranks × 6, 4 ranks × 3, and 2 ranks × 3 ×
// --grad-accum 2 (no all-reduce on the first micro-step, PyTorch's
// no_sync), which one process also matches as 6 × --grad-accum 2; and, with
// dropout 0.1, the same splits end where one process does.
func TestDDPEquivalence(t *testing.T) {
	base := ddpConfig(t, 2026) // fixed: see ddpConfig on the tolerance
	ref := runSingle(t, base)  // 1 process × 12 windows

	// The tolerance must be able to tell the global batch from a rank's
	// part of it: one process on rank 0's 6 windows ends far away.
	part := base
	part.BatchSize = 6
	if d := maxDiff(t, ref, runSingle(t, part)); d < 1e-3 {
		t.Fatalf("batch 6 and batch 12 end %.3g apart: the test could not see a rank train on its part alone", d)
	}

	accumRef := base
	accumRef.BatchSize, accumRef.GradAccum = 6, 2
	if d := maxDiff(t, ref, runSingle(t, accumRef)); d > 1e-5 {
		t.Errorf("1 process × 6 × accum 2 is %.3g from 1 process × 12 (want ≤ 1e-5)", d)
	}

	for _, tc := range []struct {
		name               string
		world, batch, accm int
		pipeline           string // each rank a pipeline over these devices
	}{
		{"2x6", 2, 6, 1, ""},
		{"4x3", 4, 3, 1, ""},
		{"2x3_accum2", 2, 3, 2, ""},
		{"2x6_pipeline2x2", 2, 6, 1, "cpu:0,cpu:1"}, // 2-D: data × pipeline
		{"2x3_accum2_devicegroup", 2, 3, 2, "device-group"},
		{"4x3_devicegroup_buckets", 4, 3, 1, "device-group-buckets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Out = filepath.Join(t.TempDir(), "out")
			cfg.BatchSize, cfg.GradAccum = tc.batch, tc.accm
			switch tc.pipeline {
			case "":
			case "device-group": // the NCCL path, with a host stand-in for NCCL
				cfg.DistBackend = "nccl"
			case "device-group-buckets": // the same, cut into several buckets that backward launches
				cfg.DistBackend = "nccl"
				t.Setenv(envChildBucket, "4096")
			default:
				cfg.Pipeline, cfg.MicroBatches = tc.pipeline, 2
			}
			ranks, outs := runGroupOut(t, cfg, tc.world)
			if tc.pipeline == "device-group-buckets" {
				cutRE := regexp.MustCompile(`dist: the flat gradients \(.*\) cut into (\d+) all-reduce buckets`)
				earlyRE := regexp.MustCompile(`dist: (\d+) of (\d+) buckets all-reduced during backward`)
				for r, out := range outs {
					m, e := cutRE.FindStringSubmatch(out), earlyRE.FindStringSubmatch(out)
					if m == nil || e == nil {
						t.Fatalf("rank %d's log does not say how the gradients were cut and launched:\n%s", r, out)
					}
					cut, _ := strconv.Atoi(m[1])
					early, _ := strconv.Atoi(e[1])
					if cut < 4 {
						t.Fatalf("rank %d: the gradients were cut into %d buckets, want several:\n%s", r, cut, out)
					}
					if early != cut || e[2] != m[1] {
						t.Errorf("rank %d: %s of %s buckets launched during backward, want all %d", r, e[1], e[2], cut)
					}
				}
			}
			for r := 1; r < tc.world; r++ {
				if name := sameBits(ranks[0], ranks[r]); name != "" {
					t.Errorf("rank %d's %s differs from rank 0's (%.3g at most)", r, name, maxDiff(t, ranks[0], ranks[r]))
				}
			}
			d := maxDiff(t, ranks[0], ref)
			t.Logf("%d ranks × batch %d × accum %d: max |w − w_single| = %.3g", tc.world, tc.batch, tc.accm, d)
			if d > 1e-5 {
				t.Errorf("%d ranks × batch %d × accum %d end %.3g from 1 process × batch 12 (want ≤ 1e-5)", tc.world, tc.batch, tc.accm, d)
			}
		})
	}

	// With dropout too: masks are keyed by each element's place in the
	// global batch, so every split draws the one process's masks.
	drop := base
	drop.Dropout = 0.1
	dropRef := runSingle(t, drop)
	if d := maxDiff(t, ref, dropRef); d < 1e-3 {
		t.Fatalf("dropout 0.1 and none end %.3g apart: the test could not see the masks", d)
	}
	for _, tc := range []struct {
		name               string
		world, batch, accm int
		pipeline           string
	}{{"2x6", 2, 6, 1, ""}, {"4x3", 4, 3, 1, ""}, {"2x3_accum2", 2, 3, 2, ""}, {"2x6_pipeline2x2", 2, 6, 1, "cpu:0,cpu:1"}} {
		t.Run("dropout_"+tc.name, func(t *testing.T) {
			cfg := drop
			cfg.Out = filepath.Join(t.TempDir(), "out")
			cfg.BatchSize, cfg.GradAccum = tc.batch, tc.accm
			if tc.pipeline != "" {
				cfg.Pipeline, cfg.MicroBatches = tc.pipeline, 2
			}
			ranks, _ := runGroupOut(t, cfg, tc.world)
			if d := maxDiff(t, ranks[0], dropRef); d > 1e-5 {
				t.Errorf("dropout 0.1, %d ranks × batch %d × accum %d end %.3g from 1 process × batch 12 (want ≤ 1e-5)", tc.world, tc.batch, tc.accm, d)
			}
		})
	}
}

// TestDDPResumeWithoutCheckpoint restarts a group whose rank 1 cannot see
// rank 0's checkpoints (its own --out, as on another node without shared
// storage): rather than train on from other steps with other optimizer
// state (and checkpoint the mixture), every rank must fail at once, saying
// why.
func TestDDPResumeWithoutCheckpoint(t *testing.T) {
	cfg := ddpConfig(t, 11)
	cfg.MaxIters, cfg.CkptInterval, cfg.LogInterval = 6, 3, 1000
	cfg.LRDecayIters = 12 // the horizon of the resumed run
	runGroup(t, cfg, 2)

	cfg.MaxIters, cfg.Resume, cfg.CommTimeout = 12, true, 20*time.Second
	other := cfg
	other.Out = filepath.Join(t.TempDir(), "out")
	t0 := time.Now()
	_, errs, outs := startGroup(t, []Config{cfg, other})
	took := time.Since(t0)
	for r, err := range errs {
		if want := "rank 0 after 6 optimizer steps, rank 1 after 0"; err == nil || !strings.Contains(outs[r], want) {
			t.Errorf("rank %d (%v) does not fail with %q:\n%s", r, err, want, outs[r])
		}
	}
	if took > 10*time.Second {
		t.Errorf("the group took %v to fail", took)
	}
	dir, _, _, err := checkpoint.Latest(filepath.Join(cfg.Out, CheckpointDir))
	if err != nil || filepath.Base(dir) != "step-0000006" {
		t.Errorf("the newest checkpoint is %q (%v), want step 6's", dir, err)
	}
}

// BenchmarkDDPStepOverhead times the same per-rank work, a micro-batch of
// 6 × 64 tokens of the default model shape (4 layers, 128 embd), alone
// (world 1) and as one of 2 ranks that all-reduce their gradients, each
// a child process. It reports the median ms/step of each, their ratio,
// and the exposed all-reduce time per step of world 2 (its telemetry's
// comm phase). Where the machine has fewer cores than the 2 ranks use
// (the CPU backend's threads default to all cores), the ranks share them:
// then a ratio of 2 means no cost beyond the sharing itself, and the
// figure is DDP's overhead under contention, not DDP's alone.
func BenchmarkDDPStepOverhead(b *testing.B) {
	cfg := ddpConfig(b, 7)
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize = 4, 4, 128, 64
	cfg.BatchSize, cfg.MaxIters, cfg.LogInterval = 6, 30, 10
	run := func(world int) Summary {
		c := cfg
		c.Out = filepath.Join(b.TempDir(), "out")
		runGroup(b, c, world)
		var sum Summary
		js, err := os.ReadFile(filepath.Join(c.Out, SummaryFile))
		if err == nil {
			err = json.Unmarshal(js, &sum)
		}
		if err != nil || sum.MsPerStep <= 0 {
			b.Fatalf("world %d: summary: %v (ms/step %v)", world, err, sum.MsPerStep)
		}
		return sum
	}
	var one, two, comm []float64
	for range b.N {
		one = append(one, run(1).MsPerStep)
		s := run(2)
		two = append(two, s.MsPerStep)
		comm = append(comm, s.PhaseMs["comm"])
	}
	m1, m2, mc := stats.Median(one), stats.Median(two), stats.Median(comm)
	b.ReportMetric(m1, "ms/step-world1")
	b.ReportMetric(m2, "ms/step-world2")
	b.ReportMetric(m2/m1, "ratio")
	b.ReportMetric(mc, "comm-ms/step")
	b.Logf("micro-batch 6×64 per rank, %d cores, medians of %d: world 1 %.1f ms/step, world 2 %.1f ms/step (%.1f ms exposed all-reduce), ratio %.2f",
		runtime.NumCPU(), b.N, m1, m2, mc, m2/m1)
	if runtime.NumCPU() < 4 {
		b.Logf("the 2 ranks share %d cores, so the ratio includes the contention: about 2 if sharing were all it cost, "+
			"less where one process uses all the cores less well than 2 processes do", runtime.NumCPU())
	}
}

// TestDDPRanksAgree starts ranks by hand with different settings: every
// rank fails before step 1, naming each setting by its flag, and rank 0
// writes nothing. Same flags but a folder rank 0 refuses: every rank
// fails with rank 0's reason.
func TestDDPRanksAgree(t *testing.T) {
	cfg := ddpConfig(t, 5)
	cfg.MaxIters, cfg.CommTimeout = 4, 30*time.Second
	other := cfg
	other.LR, other.GradClip = 2*cfg.LR, 0.5
	t0 := time.Now()
	_, errs, outs := startGroup(t, []Config{cfg, other})
	for r, err := range errs {
		for _, want := range []string{"settings differ", "LR: rank 0 has 0.001, rank 1 has 0.002", "GradClip: rank 0 has 1, rank 1 has 0.5"} {
			if err == nil || !strings.Contains(outs[r], want) {
				t.Errorf("rank %d (%v) does not fail saying %q:\n%s", r, err, want, outs[r])
			}
		}
	}
	if took := time.Since(t0); took > 20*time.Second {
		t.Errorf("the group took %v to fail", took)
	}
	if _, err := os.Stat(cfg.Out); err == nil {
		t.Errorf("rank 0 made %s for a job that cannot start", cfg.Out)
	}

	// Rank 0 refuses a folder that holds a run; rank 1 gives up with it.
	os.MkdirAll(cfg.Out, 0o755)
	os.WriteFile(filepath.Join(cfg.Out, ModelFile), []byte("weights"), 0o644)
	_, errs, outs = startGroup(t, []Config{cfg, cfg})
	for r, err := range errs {
		if want := "already holds a run"; err == nil || !strings.Contains(outs[r], want) {
			t.Errorf("rank %d (%v) does not fail saying %q:\n%s", r, err, want, outs[r])
		}
	}
	if !strings.Contains(outs[1], "rank 0 refused the run") {
		t.Errorf("rank 1 does not say that rank 0 refused:\n%s", outs[1])
	}
	if b, _ := os.ReadFile(filepath.Join(cfg.Out, ModelFile)); string(b) != "weights" {
		t.Error("the folder's weights were overwritten")
	}
}

// TestDDPNumberedFolder: without --out, rank 0 picks the group's
// numbered folder, and a resumed group continues it.
func TestDDPNumberedFolder(t *testing.T) {
	cfg := ddpConfig(t, 6)
	cfg.Out, cfg.Runs = "", filepath.Join(t.TempDir(), "runs")
	cfg.MaxIters, cfg.CkptInterval, cfg.LRDecayIters = 4, 2, 6
	runGroup(t, cfg, 2)
	want := filepath.Join(cfg.Runs, config.RunName(1))
	if _, err := os.Stat(filepath.Join(want, ModelFile)); err != nil {
		t.Fatalf("the group's run folder: %v", err)
	}
	if ns := config.RunNumbers(cfg.Runs); len(ns) != 1 {
		t.Fatalf("the group made run folders %v, want one", ns)
	}
	cfg.Resume, cfg.MaxIters = true, 6
	_, errs, outs := startGroup(t, []Config{cfg, cfg})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d resuming: %v\n%s", r, err, outs[r])
		}
	}
	if !strings.Contains(outs[0], "continuing from "+filepath.Join(want, CheckpointDir)) {
		t.Errorf("rank 0 did not continue %s:\n%s", want, outs[0])
	}
	if ns := config.RunNumbers(cfg.Runs); len(ns) != 1 {
		t.Errorf("resuming made run folders %v, want one", ns)
	}
}

// TestDDPEvalEqualsOneProcess: each rank evaluates its share of the
// windows one process of the same global micro-batch evaluates, and the
// group's losses (at step 0, where the weights are the same) equal that
// process's within 1e-6.
func TestDDPEvalEqualsOneProcess(t *testing.T) {
	base := ddpConfig(t, 8)
	base.MaxIters, base.EvalIters, base.EvalInterval = 1, 3, 1000
	single := base
	single.Out = filepath.Join(t.TempDir(), "out")
	var log bytes.Buffer
	if _, err := Run(single, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	evalAt0 := func(dir string) (tl, vl float64) {
		t.Helper()
		for _, line := range splitLines(mustRead(t, filepath.Join(dir, MetricsFile))) {
			var m Metric
			if json.Unmarshal(line, &m) == nil && m.Step == 0 && m.ValLoss != nil {
				return *m.TrainLoss, *m.ValLoss
			}
		}
		t.Fatalf("%s has no evaluation at step 0", dir)
		return
	}
	wantT, wantV := evalAt0(single.Out)
	// A rank evaluating its own 6 windows alone would be this far off.
	half := base
	half.BatchSize, half.Out = 6, filepath.Join(t.TempDir(), "out")
	if _, err := Run(half, &log); err != nil {
		t.Fatal(err)
	}
	if _, hv := evalAt0(half.Out); math.Abs(hv-wantV) < 1e-4 {
		t.Fatalf("6 and 12 windows give val losses %.7f and %.7f: the test could not tell a rank's share from the whole", hv, wantV)
	}
	group := base
	group.BatchSize, group.Out = 6, filepath.Join(t.TempDir(), "out")
	runGroup(t, group, 2)
	gotT, gotV := evalAt0(group.Out)
	t.Logf("val loss at step 0: 1 process %.8f, 2 ranks %.8f; train loss %.8f and %.8f", wantV, gotV, wantT, gotT)
	if math.Abs(gotV-wantV) > 1e-6 || math.Abs(gotT-wantT) > 1e-6 {
		t.Errorf("2 ranks × 6 evaluate train %.8f, val %.8f; 1 process × 12: %.8f, %.8f (want within 1e-6)", gotT, gotV, wantT, wantV)
	}
}

// TestDDPDivergenceStopsTheGroup: a loss that is not finite on the ranks
// stops every rank at the first such step.
func TestDDPDivergenceStopsTheGroup(t *testing.T) {
	cfg := ddpConfig(t, 9)
	cfg.LR, cfg.MinLR, cfg.WarmupIters, cfg.GradClip, cfg.MaxIters = 1e30, 0, 0, 0, 6
	cfg.BatchSize = 6
	_, errs, outs := startGroup(t, []Config{cfg, cfg})
	for r, err := range errs {
		if want := ": 2 of the 2 ranks' losses or gradients are not finite"; err == nil || !strings.Contains(outs[r], want) {
			t.Errorf("rank %d (%v) does not fail saying %q:\n%s", r, err, want, outs[r])
		}
	}
}

// checkTwoRanksEqualOne trains base (a global batch of 12) in one process
// and on 2 ranks of 6: every rank ends with the same weights, within 1e-5
// of the one process's.
func checkTwoRanksEqualOne(t *testing.T, base Config) {
	t.Helper()
	ref := runSingle(t, base)
	cfg := base
	cfg.Out = filepath.Join(t.TempDir(), "out")
	cfg.BatchSize = 6
	ranks, _ := runGroupOut(t, cfg, 2)
	if name := sameBits(ranks[0], ranks[1]); name != "" {
		t.Errorf("rank 1's %s differs from rank 0's", name)
	}
	if d := maxDiff(t, ranks[0], ref); d > 1e-5 {
		t.Errorf("2 ranks × 6 end %.3g from 1 process × 12 (want ≤ 1e-5)", d)
	}
}
