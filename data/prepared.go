package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Prepared is a folder written by Prepare, opened for training: the
// manifest, and each split's shards memory-mapped and read as one
// sequence.
type Prepared struct {
	Dir      string
	Manifest Manifest
	// Train and Val are the splits' tokens, each the concatenation of its
	// shards.
	Train, Val Tokens
	shards     []*Shard
}

// IsPrepared reports whether dir holds a manifest.
func IsPrepared(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, ManifestFile))
	return err == nil && fi.Mode().IsRegular()
}

// OpenPrepared reads dir's manifest and maps its shards. It checks the
// manifest and that every shard is a well-formed llm.c shard holding the
// number of tokens the manifest says; Verify also checks the checksums.
func OpenPrepared(dir string) (*Prepared, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("prepared data %s: %w", dir, unwrapPath(err))
	}
	p := &Prepared{Dir: dir}
	if err := json.Unmarshal(b, &p.Manifest); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	m := &p.Manifest
	switch {
	case m.Format != ManifestFormat:
		return nil, fmt.Errorf("manifest %s: format %q, want %q", path, m.Format, ManifestFormat)
	case m.Version != ManifestVersion:
		return nil, fmt.Errorf("manifest %s: version %d, want %d", path, m.Version, ManifestVersion)
	case m.VocabSize <= 0 || m.VocabSize > MaxVocab:
		return nil, fmt.Errorf("manifest %s: vocabulary size %d is not in [1, %d]", path, m.VocabSize, MaxVocab)
	}
	open := func(name string, s *SplitFiles) (Tokens, error) {
		var parts []Tokens
		var total int64
		for _, f := range s.Shards {
			if f.File != filepath.Base(f.File) || f.File == "." || f.File == ".." {
				return nil, fmt.Errorf("manifest %s: shard name %q is not a file in the folder", path, f.File)
			}
			sh, err := OpenShard(filepath.Join(dir, f.File))
			if err != nil {
				return nil, err
			}
			p.shards = append(p.shards, sh)
			if _, wide := sh.Tokens.(Uint32s); wide != (m.VocabSize > MaxVocab16) {
				return nil, fmt.Errorf("shard %s holds %s tokens, but manifest %s's vocabulary size %d calls for %s ones",
					sh.Path, widthName(wide), path, m.VocabSize, widthName(m.VocabSize > MaxVocab16))
			}
			if int64(sh.Tokens.Len()) != f.Tokens {
				return nil, fmt.Errorf("shard %s holds %d tokens, but manifest %s says %d",
					sh.Path, sh.Tokens.Len(), path, f.Tokens)
			}
			total += f.Tokens
			parts = append(parts, sh.Tokens)
		}
		if total != s.Tokens {
			return nil, fmt.Errorf("manifest %s: the %s shards hold %d tokens, but the split says %d", path, name, total, s.Tokens)
		}
		return NewConcat(parts...), nil
	}
	if p.Train, err = open("train", &m.Train); err == nil {
		p.Val, err = open("val", &m.Val)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Verify checks every shard against the manifest's SHA-256.
func (p *Prepared) Verify() error {
	want := map[string]string{}
	for _, f := range append(p.Manifest.Train.Shards, p.Manifest.Val.Shards...) {
		want[f.File] = f.SHA256
	}
	for _, s := range p.shards {
		if got := s.SHA256(); got != want[filepath.Base(s.Path)] {
			return fmt.Errorf("shard %s: SHA-256 %s, but the manifest says %s", s.Path, got, want[filepath.Base(s.Path)])
		}
	}
	return nil
}

// Close unmaps the shards.
func (p *Prepared) Close() error {
	var errs []error
	for _, s := range p.shards {
		errs = append(errs, s.Close())
	}
	p.shards = nil
	return errors.Join(errs...)
}

// TokenFiles opens token files that no manifest describes: a single .bin
// file (llm.c shard or raw nanoGPT uint16 ids), or a folder of them, where
// the files whose names contain "train" are the train split and those
// containing "val" the val split, each in sorted order (nanoGPT's
// train.bin and val.bin, llm.c's *_train_*.bin and *_val_*.bin). A single
// file is split as Split does: the last 10% is val. Close the returned
// files when done with the tokens.
func TokenFiles(path string) (train, val Tokens, files []*Shard, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("data %s: %w", path, unwrapPath(err))
	}
	defer func() {
		if err != nil {
			for _, s := range files {
				s.Close()
			}
			files = nil
		}
	}()
	if !fi.IsDir() {
		s, err := OpenTokenFile(path)
		if err != nil {
			return nil, nil, nil, err
		}
		files = append(files, s)
		train, val = SplitTokens(s.Tokens)
		return train, val, files, nil
	}
	names, err := tokenFileNames(path)
	if err != nil {
		return nil, nil, nil, err
	}
	var splits [2][]Tokens
	for i, split := range [2]string{"train", "val"} {
		for _, n := range names[split] {
			s, err := OpenTokenFile(n)
			if err != nil {
				return nil, nil, files, err
			}
			files = append(files, s)
			splits[i] = append(splits[i], s.Tokens)
		}
	}
	return NewConcat(splits[0]...), NewConcat(splits[1]...), files, nil
}

// IsTokenData reports whether path is token data that TokenFiles opens: a
// file named *.bin, or a folder holding a *.bin file whose name contains
// "train".
func IsTokenData(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	if !fi.IsDir() {
		return strings.HasSuffix(path, ".bin")
	}
	names, _ := tokenFileNames(path)
	return len(names["train"]) > 0
}

// tokenFileNames lists the .bin files directly in dir by split.
func tokenFileNames(dir string) (map[string][]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data %s: %w", dir, unwrapPath(err))
	}
	names := map[string][]string{}
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".bin") || strings.HasPrefix(n, ".") || e.Type()&fs.ModeType&^fs.ModeSymlink != 0 {
			continue
		}
		switch {
		case strings.Contains(n, "train"):
			names["train"] = append(names["train"], filepath.Join(dir, n))
		case strings.Contains(n, "val"):
			names["val"] = append(names["val"], filepath.Join(dir, n))
		}
	}
	if len(names["train"]) == 0 || len(names["val"]) == 0 {
		return names, fmt.Errorf("data %s: a folder of token files needs .bin files named *train* and *val*", dir)
	}
	return names, nil
}

func widthName(wide bool) string {
	if wide {
		return "uint32"
	}
	return "uint16"
}
