package train

import (
	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
)

// initFrom applies --init-from: the file's shape replaces the model flags
// (NHead: 0 infers it) and its tensors are returned for the new model.
func initFrom(cfg *Config) (*checkpoint.File, error) {
	f, err := checkpoint.Load(cfg.InitFrom)
	if err != nil {
		return nil, setting.Errorf("{InitFrom}: %w", err)
	}
	mc, err := model.InferConfig(f, cfg.NHead)
	if err != nil {
		return nil, setting.Errorf("{InitFrom} %s: %w", cfg.InitFrom, err)
	}
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.Bias = mc.NLayer, mc.NHead, mc.NEmbd, mc.BlockSize, mc.Bias
	if cfg.VocabSize != 0 && cfg.VocabSize != mc.VocabSize {
		return nil, setting.Errorf("{InitFrom} %s has a vocabulary of %d, {VocabSize} is %d", cfg.InitFrom, mc.VocabSize, cfg.VocabSize)
	}
	cfg.VocabSize = mc.VocabSize
	return f, nil
}
