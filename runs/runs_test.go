package runs

import (
	"bytes"
	"github.com/fleetml/fleet/internal/testenv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
)

// TestLoadBack trains a tiny run, loads its folder back and evaluates it
// sequentially: the loss agrees in scale with the trainer's estimate.
func TestLoadBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "input.txt")
	if err := os.WriteFile(path, []byte(testenv.Text()), 0o644); err != nil {
		t.Fatal(err)
	}
	c := train.Default()
	c.Data, c.Out, c.Device = path, filepath.Join(dir, "out"), "cpu"
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize, c.BatchSize = 2, 2, 32, 16, 8
	c.MaxIters, c.LR, c.WarmupIters, c.EvalInterval, c.EvalIters, c.LogInterval = 60, 3e-3, 5, 60, 4, 30
	res, err := train.Run(c, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Load(c.Out, "", tensor.CPU)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Config.Model != res.Model.Config {
		t.Errorf("loaded model config %+v, trained %+v", tr.Config.Model, res.Model.Config)
	}
	ids, _ := tr.Tokenizer.Encode(testenv.Text())
	_, val := data.Split(ids)
	loss, windows, err := SequentialLoss(tr.Model, data.Int32s(val), 16)
	if err != nil || windows != (len(val)-1)/c.BlockSize {
		t.Fatalf("sequential loss: %v, %d windows", err, windows)
	}
	if math.Abs(loss-res.Summary.FinalValLoss) > 0.3 {
		t.Errorf("sequential val loss %.3f far from the trainer's %.3f", loss, res.Summary.FinalValLoss)
	}
	if _, err := Load(filepath.Join(dir, "none"), "", tensor.CPU); err == nil || !strings.Contains(err.Error(), "fleet train --out") {
		t.Errorf("loading a folder without a run: %v", err)
	}
}
