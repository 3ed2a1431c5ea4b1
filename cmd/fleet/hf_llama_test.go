package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
)

const hfModels = "../../testdata/hf/models"

// TestEvalHFLlama evaluates each random Hugging Face folder that
// scripts/make_llama_fixture.py made (Llama, Llama 3.1, Qwen2, Qwen3, Arcee) with
// fleet eval --weights DIR: the same val_loss as PyTorch's within 1e-4.
func TestEvalHFLlama(t *testing.T) {
	data := filepath.Join(hfModels, "eval.txt")
	for _, name := range []string{"llama_gqa", "llama3_tied", "qwen2", "qwen3", "arcee"} {
		ref, err := checkpoint.Load(filepath.Join(hfModels, name+"_ref.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.Tensors["eval_loss"].Float64s()
		code, stdout, stderr := fleet(t, "eval", "--weights", filepath.Join(hfModels, name), "--data", data, "--tokenizer", "char",
			"--eval-windows", "4", "--device", "cpu")
		m := regexp.MustCompile(`^val_loss=(\S+) `).FindStringSubmatch(stdout)
		if code != 0 || m == nil {
			t.Fatalf("%s: exit %d %q %s", name, code, stdout, stderr)
		}
		got, _ := strconv.ParseFloat(m[1], 64)
		if math.Abs(got-want[0]) > 1e-4*want[0] {
			t.Errorf("%s: val_loss %v, PyTorch %v", name, got, want[0])
		}
	}
}

// TestExportHFLlama trains tiny Llama-style runs, exports each as a
// Hugging Face folder and evaluates the folder: the loss of the run's own
// weights (to bf16's rounding of them). With QK-norm in bf16 the folder is
// a Qwen3ForCausalLM with BF16 weights; with --mlp relu2 in fp32 an
// ArceeForCausalLM (up_proj and down_proj, no gate), F32.
func TestExportHFLlama(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two runs")
	}
	for _, tc := range []struct {
		flags             []string
		modelType, tensor string
		dtype             checkpoint.DType
	}{
		{[]string{"--qk-norm", "--precision", "bf16"}, "qwen3", "model.layers.0.self_attn.q_proj.weight", checkpoint.BF16},
		{[]string{"--mlp", "relu2"}, "arcee", "model.layers.0.mlp.up_proj.weight", checkpoint.F32},
	} {
		t.Run(tc.modelType, func(t *testing.T) { testExportHF(t, tc.flags, tc.modelType, tc.tensor, tc.dtype) })
	}
}

func testExportHF(t *testing.T, flags []string, modelType, tensorName string, dtype checkpoint.DType) {
	dir := t.TempDir()
	data := writeFile(t, dir, "input.txt", corpus())
	run := filepath.Join(dir, "run")
	args := append([]string{"train", "--data", data, "--out", run, "--arch", "llama", "--n-kv-head", "1",
		"--tie-embeddings=false"}, flags...)
	args = append(args, tiny...)
	if code, stdout, stderr := fleet(t, args...); code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	hf := filepath.Join(dir, "hf")
	if code, _, stderr := fleet(t, "export", "--out", run, "--hf", hf); code != 0 {
		t.Fatalf("export: %s", stderr)
	}
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(hf, "config.json"))
	wantDType := map[checkpoint.DType]string{checkpoint.BF16: "bfloat16", checkpoint.F32: "float32"}[dtype]
	if err != nil || json.Unmarshal(b, &cfg) != nil || cfg["model_type"] != modelType || cfg["torch_dtype"] != wantDType ||
		cfg["num_key_value_heads"] != 1.0 || cfg["tie_word_embeddings"] != false {
		t.Fatalf("config.json: %v %s", err, b)
	}
	f, err := checkpoint.Load(filepath.Join(hf, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := f.Tensors[tensorName]; !ok || w.DType != dtype {
		t.Fatalf("no %v %s in the export: %v", dtype, tensorName, w.DType)
	}
	_, want, _ := fleet(t, "eval", "--out", run, "--data", data, "--device", "cpu", "--eval-windows", "8")
	code, got, stderr := fleet(t, "eval", "--weights", hf, "--tokenizer", "char:"+filepath.Join(run, "tokenizer.json"),
		"--data", data, "--device", "cpu", "--eval-windows", "8")
	re := regexp.MustCompile(`^val_loss=(\S+) `)
	w, g := re.FindStringSubmatch(want), re.FindStringSubmatch(got)
	if code != 0 || w == nil || g == nil {
		t.Fatalf("eval of the export: exit %d %q, the run's %q; %s", code, got, want, stderr)
	}
	wv, _ := strconv.ParseFloat(w[1], 64)
	gv, _ := strconv.ParseFloat(g[1], 64)
	if math.Abs(wv-gv) > 0.02*wv {
		t.Errorf("the export's val_loss %v, the run's %v", gv, wv)
	}
}

// TestFineTuneHFFolder is the fine-tuning a user does: a Hugging Face
// folder (here made by fleet: a tiny Llama trained on text with a
// byte-level BPE tokenizer.json, exported, the tokenizer copied in) is
// the start of a run on the user's text, tokenized by the folder's
// tokenizer without a --tokenizer flag; the run starts from the folder's
// weights (its first evaluation is the folder's loss, not a fresh
// model's), and fleet sample continues a prompt with the tokenizer.
func TestFineTuneHFFolder(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two runs")
	}
	dir := t.TempDir()
	data := writeFile(t, dir, "input.txt", corpus())
	tokDir := "../../testdata/hf/gpt2"
	base := filepath.Join(dir, "base")
	args := []string{"train", "--data", data, "--out", base, "--arch", "llama", "--tokenizer", "hf:" + tokDir,
		"--device", "cpu", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
		"--batch-size", "4", "--max-iters", "30", "--eval-interval", "30", "--eval-iters", "4", "--log-interval", "30"}
	if code, stdout, stderr := fleet(t, args...); code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	hf := filepath.Join(dir, "hf")
	if code, _, stderr := fleet(t, "export", "--out", base, "--hf", hf); code != 0 {
		t.Fatalf("export: %s", stderr)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(tokDir, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, hf, f, string(b))
	}
	tuned := filepath.Join(dir, "tuned")
	code, stdout, stderr := fleet(t, "train", "--init-from", hf, "--data", data, "--out", tuned, "--device", "cpu", "--block-size", "8",
		"--batch-size", "4", "--max-iters", "4", "--eval-interval", "4", "--eval-iters", "4", "--log-interval", "4")
	if code != 0 {
		t.Fatalf("train --init-from a Hugging Face folder: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr+stdout, "tokenized by hf:"+hf) {
		t.Errorf("the run did not tokenize the text with the folder's tokenizer:\n%s%s", stdout, stderr)
	}
	// The same evaluation windows of the same text: the folder's model
	// gives the loss the base run ended with.
	m0 := regexp.MustCompile(`eval step 0: train loss \S+, val loss (\S+)`).FindStringSubmatch(stderr + stdout)
	var sum struct {
		FinalValLoss float64 `json:"final_val_loss"`
	}
	b, err := os.ReadFile(filepath.Join(base, "summary.json"))
	if m0 == nil || err != nil || json.Unmarshal(b, &sum) != nil || sum.FinalValLoss == 0 {
		t.Fatalf("no first evaluation in the log, or no base summary (%v):\n%s%s", err, stdout, stderr)
	}
	if first, _ := strconv.ParseFloat(strings.TrimSuffix(m0[1], ","), 64); math.Abs(first-sum.FinalValLoss) > 1e-3*sum.FinalValLoss {
		t.Errorf("the run starts at val loss %v, the folder's model ended at %v", first, sum.FinalValLoss)
	}
	code, stdout, stderr = fleet(t, "sample", "--out", tuned, "--prompt", "to be", "--tokens", "5", "--device", "cpu")
	if code != 0 || !strings.HasPrefix(stdout, "to be") {
		t.Fatalf("sample: exit %d %q %s", code, stdout, stderr)
	}
	code, stdout, stderr = fleet(t, "sample", "--weights", hf, "--prompt", "to be", "--tokens", "5", "--device", "cpu")
	if code != 0 || !strings.HasPrefix(stdout, "to be") {
		t.Fatalf("sample --weights DIR: exit %d %q %s", code, stdout, stderr)
	}
}
