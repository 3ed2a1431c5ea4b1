package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
)

// Trained is a model loaded back from a run's output folder.
type Trained struct {
	Config    RunConfig
	Model     *model.GPT
	Tokenizer *data.Char
}

// Load reads config.json, tokenizer.json and the weights file (ModelFile
// or BestFile) from a run folder onto device dev ("auto", "cpu", ...).
func Load(dir, weights, device string) (*Trained, error) {
	if weights == "" {
		weights = ModelFile
	}
	cfgPath := filepath.Join(dir, ConfigFile)
	b, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no model in %s: %s is missing (train one with: fleet train --out %s)", dir, ConfigFile, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", cfgPath, err)
	}
	var rc RunConfig
	if err := json.Unmarshal(b, &rc); err != nil {
		return nil, fmt.Errorf("load %s: %w", cfgPath, err)
	}
	tok, err := data.LoadChar(filepath.Join(dir, TokenizerFile))
	if err != nil {
		return nil, err
	}
	if tok.Size() != rc.Model.VocabSize {
		return nil, fmt.Errorf("%s: tokenizer has %d symbols but the model expects %d", dir, tok.Size(), rc.Model.VocabSize)
	}
	wpath := filepath.Join(dir, weights)
	if _, err := os.Stat(wpath); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no model in %s: %s is missing (training may not have finished)", dir, weights)
	}
	dev, err := backend.Resolve(device)
	if err != nil {
		return nil, fmt.Errorf("--device %s: %w", device, err)
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
func SequentialLoss(m *model.GPT, ids []int32, batch int) (float64, int, error) {
	T := m.Config.BlockSize
	windows := (len(ids) - 1) / T
	if windows < 1 {
		return 0, 0, fmt.Errorf("evaluation data has %d tokens, fewer than block size %d + 1", len(ids), T)
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
					copy(x[i*T:(i+1)*T], ids[o:o+T])
					copy(y[i*T:(i+1)*T], ids[o+1:o+T+1])
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
