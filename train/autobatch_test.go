package train

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetml/fleet/tensor"
)

// TestChooseBatchCPU: on the CPU, --batch-size auto picks a batch whose
// real step fits the --memory-limit while the next batch's does not, and
// with --tokens-per-step a batch that divides the budget.
func TestChooseBatchCPU(t *testing.T) {
	c := Default()
	c.Device = "cpu"
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize = 2, 2, 32, 32
	c.BatchAuto = true
	c.MemoryLimit = 12 << 20
	var log bytes.Buffer
	before := tensor.MemStats(tensor.CPU).Allocated // other tests' models
	ab, err := ChooseBatch(c, 70, tensor.CPU, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Logf("chose %d: %s\n%s", ab.Batch, ab.Reason, log.String())
	if ab.Batch < 3 || ab.Peak > c.MemoryLimit {
		t.Fatalf("chose batch %d with peak %d for a limit of %d", ab.Batch, ab.Peak, c.MemoryLimit)
	}
	next, err := probeBatch(c, 70, tensor.CPU, ab.Batch+1)
	if err != nil {
		t.Fatal(err)
	}
	if next <= c.MemoryLimit {
		t.Errorf("batch %d would also fit (peak %d ≤ %d): the choice is not the largest", ab.Batch+1, next, c.MemoryLimit)
	}
	if s := tensor.MemStats(tensor.CPU); s.Allocated-before > 64<<10 {
		t.Errorf("the probes left %d bytes allocated", s.Allocated-before)
	}

	c.TokensPerStep = 7 * 32 * 4 // 28 sequences: the batch must divide 28
	ab, err = ChooseBatch(c, 70, tensor.CPU, &log)
	if err != nil {
		t.Fatal(err)
	}
	if 28%ab.Batch != 0 || ab.Peak > c.MemoryLimit {
		t.Errorf("with 28 sequences per step, chose batch %d (peak %d)", ab.Batch, ab.Peak)
	}

	c.MemoryLimit = 1 << 10
	if _, err := ChooseBatch(c, 70, tensor.CPU, &log); err == nil || !strings.Contains(err.Error(), "even batch 1") {
		t.Errorf("a 1 KiB limit gave %v, want an error saying batch 1 does not fit", err)
	}
}

// TestSearchBatch holds the GPU search (doubling, then bisection) to a
// synthetic device on which batches above a threshold run out of memory.
func TestSearchBatch(t *testing.T) {
	for _, tc := range []struct {
		limit, maxB, div int
		want             int
	}{
		{limit: 37, maxB: 1024, want: 37},
		{limit: 1, maxB: 1024, want: 1},
		{limit: 0, maxB: 1024, want: 0},
		{limit: 5000, maxB: 1024, want: 1024},
		{limit: 100, maxB: 96, div: 96, want: 96},
		{limit: 50, maxB: 96, div: 96, want: 48},
		{limit: 47, maxB: 96, div: 96, want: 32},
		{limit: 200, maxB: 120, div: 120, want: 120},
	} {
		ok := func(b int) bool { return tc.div == 0 || tc.div%b == 0 }
		var probes []int
		probe := func(b int) (BatchProbe, error) {
			probes = append(probes, b)
			if !ok(b) {
				return BatchProbe{}, fmt.Errorf("probed batch %d, which does not divide %d", b, tc.div)
			}
			return BatchProbe{Batch: b, Peak: int64(b), Fits: b <= tc.limit, OOM: b > tc.limit}, nil
		}
		good, _, _, err := searchBatch(tc.maxB, ok, probe)
		if err != nil || good != tc.want {
			t.Errorf("limit %d, max %d, divisor %d: chose %d (err %v), want %d; probes %v", tc.limit, tc.maxB, tc.div, good, err, tc.want, probes)
		}
		if len(probes) > 25 {
			t.Errorf("limit %d: %d probes", tc.limit, len(probes))
		}
	}
}

// TestRunBatchAuto: a run with --batch-size auto says what it chose and
// trains with it, and keeps --tokens-per-step's budget.
func TestRunBatchAuto(t *testing.T) {
	c := tinyConfig(t)
	c.BatchAuto, c.BatchSize = true, 0
	c.MemoryLimit = 16 << 20
	c.TokensPerStep = 12 * c.BlockSize
	c.MaxIters = 2
	var log bytes.Buffer
	res, err := Run(c, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	b, accum := res.Summary.Config.BatchSize, res.Summary.Config.GradAccum
	if b <= 0 || 12%b != 0 || b*accum != 12 || !strings.Contains(log.String(), fmt.Sprintf("batch auto: chose micro-batch %d", b)) {
		t.Fatalf("batch %d × %d accumulation for 12 sequences per step:\n%s", b, accum, log.String())
	}
}
