// Package runs reads finished training runs back: a run folder's
// config, tokenizer and weights (fleet sample, eval and export, and
// --weights), a weights file on its own, and the evaluation data of a run.
// It sits above train, whose files it reads.
package runs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/tokenizer"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

// Trained is a model loaded back from a run's output folder.
type Trained struct {
	Config    config.RunConfig
	Model     *model.GPT
	Tokenizer data.Tokenizer
}

// Load reads config.json, tokenizer.json and the weights file (ModelFile
// or BestFile) from a run folder onto device dev.
// tokenizer.json holds the character tokenizer, or the spec of the
// tokenizer of the run's prepared data, which is opened, or says the run
// has none (tokenizer.LoadRecord).
func Load(dir, weights string, dev tensor.Device) (*Trained, error) {
	if weights == "" {
		weights = train.ModelFile
	}
	cfgPath := filepath.Join(dir, train.ConfigFile)
	b, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no model in %s: %s is missing (train one with: fleet train --out %s)", dir, train.ConfigFile, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", cfgPath, err)
	}
	var rc config.RunConfig
	if err := json.Unmarshal(b, &rc); err != nil {
		return nil, fmt.Errorf("load %s: %w", cfgPath, err)
	}
	tok, err := tokenizer.LoadRecord(filepath.Join(dir, train.TokenizerFile))
	if err != nil {
		return nil, err
	}
	if tok.Size() > rc.Model.VocabSize {
		return nil, fmt.Errorf("%s: tokenizer has %d symbols but the model only %d", dir, tok.Size(), rc.Model.VocabSize)
	}
	wpath := filepath.Join(dir, weights)
	if _, err := os.Stat(wpath); errors.Is(err, fs.ErrNotExist) {
		return nil, missingWeights(dir, weights)
	}
	m, err := model.New(rc.Model, dev, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfgPath, err)
	}
	if err := m.LoadWeights(wpath); err != nil {
		return nil, err
	}
	m.SetTraining(false)
	return &Trained{Config: rc, Model: m, Tokenizer: tok}, nil
}

// SequentialLoss evaluates ids in consecutive, non-overlapping windows of
// the block size: window w has inputs ids[wT : wT+T] and targets
// ids[wT+1 : wT+T+1]. It returns the mean loss over every predicted token,
// and the number of windows. Windows go through the model batch at a time.
func SequentialLoss(m *model.GPT, ids data.Tokens, batch int) (float64, int, error) {
	T := m.Config.BlockSize
	windows := (ids.Len() - 1) / T
	if windows < 1 {
		return 0, 0, fmt.Errorf("evaluation data has %d tokens, fewer than block size %d + 1", ids.Len(), T)
	}
	if largest := data.MaxID(ids); int(largest) >= m.Config.VocabSize {
		return 0, 0, fmt.Errorf("evaluation data holds token id %d, not below the model's vocabulary of %d", largest, m.Config.VocabSize)
	}
	var total float64
	defer m.SetTraining(m.SetTraining(false))
	err := tensor.Catch(func() {
		tensor.NoGrad(func() {
			for w0 := 0; w0 < windows; w0 += batch {
				n := min(batch, windows-w0)
				x := make([]int32, n*T)
				y := make([]int32, n*T)
				for i := 0; i < n; i++ {
					o := (w0 + i) * T
					ids.Read(x[i*T:(i+1)*T], o)
					ids.Read(y[i*T:(i+1)*T], o+1)
				}
				tensor.Step(func() {
					l := m.Loss(tensor.FromInt32s(m.Device(), x, n, T), tensor.FromInt32s(m.Device(), y, n, T))
					total += float64(l.Item()) * float64(n)
				})
			}
		})
	})
	if err != nil {
		return 0, 0, err
	}
	loss := total / float64(windows)
	if math.IsNaN(loss) {
		return 0, 0, fmt.Errorf("evaluation loss is NaN")
	}
	return loss, windows, nil
}

// EvalTokens returns the tokens fleet eval evaluates for a trained model:
// the val split of the data at path, or of the run's own data when path is
// "". Text is encoded with the run's tokenizer and split 90/10; prepared
// data and token files give their val split. Call close when done.
func EvalTokens(tr *Trained, path string) (val data.Tokens, close func(), err error) {
	c := tr.Config.Train
	if path != "" {
		c.Data = path
	}
	if c.Data != "" && (data.IsPrepared(c.Data) || data.IsTokenData(c.Data)) {
		c.VocabSize, c.Tokenizer = 0, ""
		if !data.IsPrepared(c.Data) {
			c.VocabSize = tr.Model.Config.VocabSize
		}
		_, val, _, _, closeData, err := train.OpenData(c)
		if err != nil {
			return nil, nil, err
		}
		return val, closeData, nil
	}
	var text string
	if c.Data == "" {
		if c.CorpusBytes == 0 {
			c.CorpusBytes = train.Default().CorpusBytes
		}
		text, _, err = data.DefaultCorpus(c.CorpusBytes)
	} else {
		text, err = data.LoadText(c.Data)
	}
	if err != nil {
		return nil, nil, err
	}
	ids, err := tr.Tokenizer.Encode(text)
	if err != nil {
		return nil, nil, setting.Errorf("{Data} %s: %w", c.Data, err)
	}
	_, v := data.Split(ids)
	return data.Int32s(v), func() {}, nil
}

// missingWeights is the error for a run folder without the weights file
// asked for. Where the run has a checkpoint (it was interrupted, or is
// still training), it says how to use the newest one.
func missingWeights(dir, weights string) error {
	msg := fmt.Sprintf("no model in %s: %s is missing (training may not have finished)", dir, weights)
	ck, _, _, err := checkpoint.Latest(filepath.Join(dir, train.CheckpointDir))
	if err != nil || ck == "" {
		return errors.New(msg)
	}
	rel, err := filepath.Rel(dir, filepath.Join(ck, train.ModelFile))
	if err != nil {
		rel = filepath.Join(ck, train.ModelFile)
	}
	return setting.Errorf("%s; its newest checkpoint is %s: give {Weights} %s to use its weights, "+
		"or finish the run with fleet train --out %s --resume", msg, ck, rel, dir)
}

// LoadFile loads weights on their own: a GPT-2 safetensors file (fleet's
// or Hugging Face's), its shape inferred from the tensors (nHead when the
// width is not GPT-2's), or a Hugging Face folder of the Llama family
// (model.LoadHF; blockSize, where positive, bounds its context, else its
// max_position_embeddings does). tokSpec says how text becomes ids: ""
// is the folder's tokenizer.json where it has one, else "char", which
// builds the character vocabulary of the text at dataPath (with no text
// there, the ids are raw: "none"); other specs (char:FILE, bpe:FILE,
// gpt2:FILE|DIR, hf:FILE|DIR) are opened (tokenizer.Open).
func LoadFile(path string, nHead, blockSize int, dev tensor.Device, tokSpec, dataPath string) (*Trained, error) {
	var m *model.GPT
	var err error
	if model.IsHFFolder(path) {
		m, err = model.LoadHF(path, blockSize, dev)
		if tokSpec == "" && HasHFTokenizer(path) {
			tokSpec = "hf:" + path
		}
	} else {
		m, err = model.LoadGPT2(path, nHead, dev)
	}
	if err != nil {
		return nil, err
	}
	m.SetTraining(false)
	tr := &Trained{Model: m, Config: config.RunConfig{Train: train.Default(), Model: m.Config}}
	tr.Config.Train.Data = dataPath
	if tokSpec == "" {
		tokSpec = "char"
	}
	// "char" is the characters of the text at dataPath; prepared data and
	// token files are ids already, and need no tokenizer ("none").
	o := tokenizer.Options{VocabSize: m.Config.VocabSize}
	if tokSpec == "char" {
		if dataPath == "" || data.IsPrepared(dataPath) || data.IsTokenData(dataPath) {
			tokSpec = "none"
		} else {
			text, err := data.LoadText(dataPath)
			if err != nil {
				return nil, err
			}
			o.Chars = func() (*data.Char, error) { return data.NewChar(text), nil }
		}
	}
	if tr.Tokenizer, err = tokenizer.Open(tokSpec, o); err != nil {
		return nil, setting.Errorf("{Tokenizer} %s: %w", tokSpec, err)
	}
	if n := tr.Tokenizer.Size(); n > m.Config.VocabSize {
		return nil, fmt.Errorf("%s: the tokenizer (%s) has %d symbols but the model only %d", path, tokSpec, n, m.Config.VocabSize)
	}
	return tr, nil
}

// HasHFTokenizer reports whether dir is a folder with a tokenizer.json.
func HasHFTokenizer(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
	return err == nil && !st.IsDir()
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

// RunFolder resolves the run folder of fleet sample, eval and export: out
// when it is given, else the newest run under DefaultRunsDir. It returns
// the folder and a note naming it, "" when out was given.
func RunFolder(out string) (dir, note string, err error) {
	if out != "" {
		return out, "", nil
	}
	d, err := config.NewestRun(config.DefaultRunsDir)
	if err != nil {
		return "", "", err
	}
	return d, fmt.Sprintf("using %s, the newest run in %s (--out DIR names another)", d, config.DefaultRunsDir), nil
}
