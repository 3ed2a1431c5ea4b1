package cpu_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fcpu "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/train"
)

// TestAMXRunMatchesTwin trains a small GPT-2 for 60 steps in bf16 with
// the AMX product, once with the assembly and once with its portable
// kernel, and requires the same weights, bit for bit. Where the CPU or
// the OS has no AMX it skips, saying why.
func TestAMXRunMatchesTwin(t *testing.T) {
	if ok, why := fcpu.AMXOffered(); !ok {
		t.Skipf("the AMX product is not offered here: %s", why)
	}
	dir := t.TempDir()
	var text strings.Builder
	for i := 0; text.Len() < 40_000; i++ {
		fmt.Fprintf(&text, "word%d and the %d other words, ", i*7919%1000, i%13)
	}
	data := filepath.Join(dir, "input.txt")
	if err := os.WriteFile(data, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string) []byte {
		c := train.Default()
		c.Data, c.Out, c.Device = data, filepath.Join(dir, name), "cpu"
		c.NLayer, c.NHead, c.NEmbd, c.BlockSize, c.BatchSize = 2, 2, 32, 16, 4
		c.MaxIters, c.LRDecayIters, c.WarmupIters = 60, 60, 5
		c.EvalInterval, c.EvalIters, c.LogInterval, c.DataWorkers = 1000, 1, 20, 1
		c.Precision, c.CPUBF16 = "bf16", fcpu.BF16ProductAMX
		var log bytes.Buffer
		res, err := train.Run(c, &log)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, log.String())
		}
		path := filepath.Join(dir, name+".safetensors")
		if err := res.Model.SaveWeights(path, nil); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	asm := run("asm")
	restore := fcpu.AMXPortable()
	twin := run("twin")
	restore()
	if !bytes.Equal(asm, twin) {
		t.Fatal("60 bf16 steps with the AMX assembly end elsewhere than with its portable twin")
	}
}
