package train

import (
	"slices"
	"strings"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
)

// initFrom applies --init-from: the file's shape replaces the model
// settings not in cfg.Given (NHead: 0 infers it), a given one that
// disagrees with the file is refused, and the file's tensors are returned
// for the new model.
func initFrom(cfg *Config) (*checkpoint.File, error) {
	f, err := checkpoint.Load(cfg.InitFrom)
	if err != nil {
		return nil, setting.Errorf("{InitFrom}: %w", err)
	}
	mc, err := model.InferConfig(f, cfg.NHead)
	if err != nil {
		return nil, setting.Errorf("{InitFrom} %s: %w", cfg.InitFrom, err)
	}
	// A shape setting given explicitly must be the file's.
	var given, its []string
	var givenArgs, itsArgs []any
	for _, s := range []struct {
		field string
		mine  any
		file  any
	}{
		{"Arch", model.Config{Arch: cfg.Arch}.Family(), mc.Family()},
		{"NLayer", cfg.NLayer, mc.NLayer}, {"NEmbd", cfg.NEmbd, mc.NEmbd},
		{"BlockSize", cfg.BlockSize, mc.BlockSize}, {"Bias", cfg.Bias, mc.Bias},
	} {
		if slices.Contains(cfg.Given, s.field) && s.mine != s.file {
			given, its = append(given, "{"+s.field+"} %v"), append(its, "{"+s.field+"} %v")
			givenArgs, itsArgs = append(givenArgs, s.mine), append(itsArgs, s.file)
		}
	}
	if len(given) > 0 {
		verb, them := "disagrees", "it"
		if len(given) > 1 {
			verb, them = "disagree", "them"
		}
		format := strings.Join(given, ", ") + " " + verb + " with {InitFrom} %s, whose model has " + strings.Join(its, ", ") +
			": the run takes the file's shape; leave " + them + " out, or give the file's"
		args := append(append(givenArgs, cfg.InitFrom), itsArgs...)
		return nil, setting.Errorf(format, args...)
	}
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.Bias = mc.NLayer, mc.NHead, mc.NEmbd, mc.BlockSize, mc.Bias
	if cfg.VocabSize != 0 && cfg.VocabSize != mc.VocabSize {
		return nil, setting.Errorf("{InitFrom} %s has a vocabulary of %d, {VocabSize} is %d", cfg.InitFrom, mc.VocabSize, cfg.VocabSize)
	}
	cfg.VocabSize = mc.VocabSize
	return f, nil
}
