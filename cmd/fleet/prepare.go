package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/fleetml/fleet/internal/term"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/tokenizer"
)

func prepareCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("prepare", flag.ContinueOnError)
	spec := fs.String("tokenizer", "", "char (its vocabulary built from the inputs), char:FILE, bpe:FILE, gpt2:FILE|DIR or hf:FILE|DIR")
	valFraction := fs.Float64("val-fraction", 0.1, "the last fraction of the input bytes that becomes the val split")
	shardTokens := fs.Int("shard-tokens", data.DefaultShardTokens, "tokens per shard")
	out := fs.String("out", "", "output folder for the shards and manifest.json")
	workers := fs.Int("workers", runtime.NumCPU(), "goroutines encoding chunks (the shards do not depend on it)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fleet prepare --tokenizer SPEC [--val-fraction 0.1] [--shard-tokens N] --out DIR INPUT...\n\n"+
			"Tokenizes files and folders (their files in sorted order) into llm.c token shards for fleet train --data DIR.\n\n")
		fs.PrintDefaults()
	}
	inputs, err := parseWithArgs(fs, args, stderr)
	if err != nil {
		return err
	}
	switch {
	case *spec == "":
		return usageError(fs, stderr, "--tokenizer is required")
	case *out == "":
		return usageError(fs, stderr, "--out is required")
	case len(inputs) == 0:
		return usageError(fs, stderr, "no INPUT files or folders")
	case *workers <= 0:
		return fmt.Errorf("--workers must be positive")
	}
	bar := newProgress(stderr)
	start := time.Now()
	tok, boundary, files, err := prepareTokenizer(*spec, inputs, bar)
	if err != nil {
		return err
	}
	bar.phase("encoding")
	man, err := data.Prepare(data.PrepareConfig{Tokenizer: tok, Boundary: boundary, Inputs: inputs, Out: *out,
		ValFraction: *valFraction, ShardTokens: *shardTokens, Workers: *workers, Progress: bar.update, Files: files})
	bar.done()
	if err != nil {
		return err
	}
	sec := time.Since(start).Seconds()
	fmt.Fprintf(stdout, "wrote %s: %d train tokens in %d shards, %d val tokens in %d shards; vocabulary %d (%s); "+
		"%d documents, %.1f MB in %.1f s (%.1f MB/s)\n",
		*out, man.Train.Tokens, len(man.Train.Shards), man.Val.Tokens, len(man.Val.Shards), man.VocabSize, man.Tokenizer,
		man.Documents, float64(man.InputBytes)/1e6, sec, float64(man.InputBytes)/1e6/sec)
	return nil
}

// prepareTokenizer opens the tokenizer spec for Prepare, with the
// boundary rule its chunks are cut at. A char tokenizer, built from the
// inputs (char) or read (char:FILE), goes into out as tokenizer.json (in
// files), which the manifest names, so the folder is self-contained; other
// specs are recorded with an absolute path.
func prepareTokenizer(spec string, inputs []string, bar *progress) (tok data.Tokenizer, boundary func([]byte) int, files map[string][]byte, err error) {
	var inputErr error // an input the vocabulary is built from is unreadable
	chars := func() (*data.Char, error) {
		bar.phase("vocabulary")
		c, err := data.CharVocab(inputs, bar.update)
		bar.done()
		inputErr = err
		return c, err
	}
	if tok, err = tokenizer.Open(spec, tokenizer.Options{Chars: chars}); err != nil {
		if inputErr != nil {
			return nil, nil, nil, err
		}
		return nil, nil, nil, fmt.Errorf("--tokenizer: %w", err)
	}
	c, ok := tok.(*data.Char)
	if !ok {
		return tok, tokenizer.SplitPointOf(tok), nil, nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, nil, nil, err
	}
	const name = "tokenizer.json"
	return c.WithSpec("char:" + name), nil, map[string][]byte{name: append(b, '\n')}, nil
}

// parseWithArgs parses flags that may come before, between or after the
// positional arguments, and returns those.
func parseWithArgs(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func usageError(fs *flag.FlagSet, stderr io.Writer, msg string) error {
	fmt.Fprintf(stderr, "fleet %s: %s\n", fs.Name(), msg)
	fs.Usage()
	return errUsage
}

// progress reports bytes done: a bar redrawn in place on a terminal,
// plain lines at every tenth otherwise.
type progress struct {
	w       io.Writer
	tty     bool
	label   string
	start   time.Time
	last    time.Time
	tenth   int64
	drawn   bool
	cur     int64
	total   int64
	enabled bool
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: term.IsTerminal(w)}
}

// phase starts a new pass over the inputs.
func (p *progress) phase(label string) {
	*p = progress{w: p.w, tty: p.tty, label: label, start: time.Now(), tenth: -1, enabled: true}
}

func (p *progress) update(done, total int64) {
	if !p.enabled {
		return
	}
	p.cur, p.total = done, total
	now := time.Now()
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond && done < total {
			return
		}
		p.last = now
		p.draw(now)
		return
	}
	if t := 10 * done / max(total, 1); t > p.tenth {
		p.tenth = t
		fmt.Fprintf(p.w, "prepare: %s %3d%% (%s of %s, %s)\n", p.label, 100*done/max(total, 1),
			mb(done), mb(total), rate(done, now.Sub(p.start)))
	}
}

func (p *progress) draw(now time.Time) {
	const width = 30
	frac := float64(p.cur) / float64(max(p.total, 1))
	n := int(frac * width)
	bar := strings.Repeat("=", n) + strings.Repeat(" ", width-n)
	if n < width {
		bar = bar[:n] + ">" + bar[n+1:]
	}
	fmt.Fprintf(p.w, "\r%-10s [%s] %5.1f%%  %s / %s  %s ", p.label, bar, 100*frac, mb(p.cur), mb(p.total), rate(p.cur, now.Sub(p.start)))
	p.drawn = true
}

// done ends the phase (the bar's line).
func (p *progress) done() {
	if p.tty && p.drawn {
		p.draw(time.Now())
		fmt.Fprintln(p.w)
	}
	p.enabled = false
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "- MB/s"
	}
	return fmt.Sprintf("%.1f MB/s", float64(n)/1e6/d.Seconds())
}
