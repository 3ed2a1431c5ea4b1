package train

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
)

// LoadFile loads a GPT-2 weights file on its own (fleet's or Hugging
// Face's), its shape inferred from the tensors (nHead when the width is not
// GPT-2's). tokSpec says how text becomes ids: "char" (the default) builds
// the character vocabulary of the text at dataPath, other specs (char:FILE,
// bpe:FILE, gpt2:FILE|DIR) are opened.
func LoadFile(path string, nHead int, device, tokSpec, dataPath string) (*Trained, error) {
	dev, err := backend.Resolve(device)
	if err != nil {
		return nil, fmt.Errorf("--device %s: %w", device, err)
	}
	m, err := model.LoadGPT2(path, nHead, dev)
	if err != nil {
		return nil, err
	}
	m.SetTraining(false)
	tr := &Trained{Model: m, Config: RunConfig{Train: Default(), Model: m.Config}}
	tr.Config.Train.Data = dataPath
	if tokSpec == "" {
		tokSpec = "char"
	}
	if tokSpec == "char" {
		if dataPath == "" || data.IsPrepared(dataPath) || data.IsTokenData(dataPath) {
			tr.Tokenizer = noTokenizer{m.Config.VocabSize}
			if dataPath == "" {
				return tr, nil
			}
		} else {
			text, err := data.LoadText(dataPath)
			if err != nil {
				return nil, err
			}
			tr.Tokenizer = data.NewChar(text)
		}
	} else if tr.Tokenizer, err = openTokenizer(tokSpec); err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", tokSpec, err)
	}
	if n := tr.Tokenizer.Size(); n > m.Config.VocabSize {
		return nil, fmt.Errorf("%s: the tokenizer (%s) has %d symbols but the model only %d", path, tokSpec, n, m.Config.VocabSize)
	}
	return tr, nil
}

// initFrom applies --init-from: the file's shape replaces the model flags
// (NHead: 0 infers it) and its tensors are returned for the new model.
func initFrom(cfg *Config) (*checkpoint.File, error) {
	f, err := checkpoint.Load(cfg.InitFrom)
	if err != nil {
		return nil, fmt.Errorf("--init-from: %w", err)
	}
	mc, err := model.InferConfig(f, cfg.NHead)
	if err != nil {
		return nil, fmt.Errorf("--init-from %s: %w", cfg.InitFrom, err)
	}
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.Bias = mc.NLayer, mc.NHead, mc.NEmbd, mc.BlockSize, mc.Bias
	if cfg.VocabSize != 0 && cfg.VocabSize != mc.VocabSize {
		return nil, fmt.Errorf("--init-from %s has a vocabulary of %d, --vocab-size is %d", cfg.InitFrom, mc.VocabSize, cfg.VocabSize)
	}
	cfg.VocabSize = mc.VocabSize
	return f, nil
}

// FirstWindows limits ids to the first n evaluation windows of T tokens
// (n <= 0: all).
func FirstWindows(ids data.Tokens, n, T int) data.Tokens {
	if n <= 0 || n*T+1 >= ids.Len() {
		return ids
	}
	return limited{ids, n*T + 1}
}

type limited struct {
	data.Tokens
	n int
}

func (l limited) Len() int { return l.n }
