package train

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fleetml/fleet/data"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
)

// initFrom applies --init-from: the file's shape replaces the model
// settings not in cfg.Given (NHead: 0 infers it), a given one that
// disagrees with the file is refused, and the file's tensors are returned
// for the new model.
func initFrom(cfg *Config) (*checkpoint.File, error) {
	if model.IsHFFolder(cfg.InitFrom) {
		return initFromHF(cfg)
	}
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

// hfContext is the longest context a run started from a Hugging Face
// folder trains on where --block-size is not given.
const hfContext = 1024

// initFromHF applies --init-from DIR, a Hugging Face folder of the Llama
// family (model.ReadHFConfig): its model settings replace the flags, a
// given one that disagrees is refused, the context is --block-size (at
// most max_position_embeddings) or else max_position_embeddings up to
// hfContext, and the folder's tokenizer.json tokenizes text data unless
// --tokenizer names another.
func initFromHF(cfg *Config) (*checkpoint.File, error) {
	dir := cfg.InitFrom
	given := func(f string) bool { return slices.Contains(cfg.Given, f) }
	context := hfContext
	if given("BlockSize") {
		context = cfg.BlockSize
	}
	mc, err := model.ReadHFConfig(dir, context)
	if err != nil {
		return nil, setting.Errorf("{InitFrom}: %w", err)
	}
	for _, s := range []struct {
		field      string
		mine, file any
	}{
		{"Arch", model.Config{Arch: cfg.Arch}.Family(), mc.Family()}, {"NLayer", cfg.NLayer, mc.NLayer},
		{"NHead", cfg.NHead, mc.NHead}, {"NEmbd", cfg.NEmbd, mc.NEmbd}, {"Bias", cfg.Bias, mc.Bias},
	} {
		if given(s.field) && s.mine != s.file {
			return nil, setting.Errorf("{"+s.field+"} %v disagrees with {InitFrom} %s, whose model has %v: leave it out, or give the folder's", s.mine, dir, s.file)
		}
	}
	if given("BlockSize") && mc.BlockSize < cfg.BlockSize {
		return nil, setting.Errorf("{BlockSize} %d is longer than {InitFrom} %s's max_position_embeddings, %d", cfg.BlockSize, dir, mc.BlockSize)
	}
	if cfg.VocabSize != 0 && cfg.VocabSize != mc.VocabSize {
		return nil, setting.Errorf("{InitFrom} %s has a vocabulary of %d, {VocabSize} is %d", dir, mc.VocabSize, cfg.VocabSize)
	}
	hf, err := model.ReadHFTensors(dir)
	if err != nil {
		return nil, setting.Errorf("{InitFrom}: %w", err)
	}
	ts, err := model.FromHF(mc, hf)
	if err != nil {
		return nil, setting.Errorf("{InitFrom} %s: %w", dir, err)
	}
	cfg.Arch, cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.Bias = mc.Arch, mc.NLayer, mc.NHead, mc.NEmbd, mc.BlockSize, mc.Bias
	cfg.NKVHead, cfg.HeadDim, cfg.MLPHidden, cfg.RopeTheta, cfg.RopeScaling = mc.NKVHead, mc.HeadDim, mc.MLPHidden, mc.RopeTheta, mc.RopeScaling
	cfg.NormEps, cfg.QKNorm, cfg.QKVBias, cfg.UntiedHead, cfg.VocabSize = mc.NormEps, mc.QKNorm, mc.QKVBias, mc.UntiedHead, mc.VocabSize
	cfg.MLP = mc.MLP
	if cfg.Tokenizer == "" && fileExists(filepath.Join(dir, "tokenizer.json")) && !data.IsPrepared(cfg.Data) && !data.IsTokenData(cfg.Data) {
		cfg.Tokenizer = "hf:" + dir
	}
	return &checkpoint.File{Tensors: ts}, nil
}

// fileExists reports whether path is a file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
