package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetml/fleet/tokenizer"
)

// stdinReader is what fleet tokenizer encode and decode read (a variable
// for tests).
var stdinReader io.Reader = os.Stdin

const tokenizerUsage = `Usage:
  fleet tokenizer train --vocab-size N --out FILE INPUT...
  fleet tokenizer encode --tokenizer SPEC    (text on stdin, ids on stdout)
  fleet tokenizer decode --tokenizer SPEC    (ids on stdin, text on stdout)

train trains a byte-level BPE with GPT-2's pre-tokenizer on the INPUT files
(a folder stands for the files under it); each file is a document. The
vocabulary is the 256 bytes, N-257 merges and <|endoftext|> (id N-1).

SPEC names a tokenizer; nothing is downloaded:
  char:FILE   the char tokenizer.json that a char-level fleet train saved
  bpe:FILE    a BPE that fleet tokenizer train wrote
  gpt2:FILE   GPT-2's tokenizer from r50k_base.tiktoken
  gpt2:DIR    GPT-2's tokenizer from a folder with encoder.json and vocab.bpe
  hf:FILE     a Hugging Face tokenizer.json
  hf:DIR      a Hugging Face folder (tokenizer.json, tokenizer_config.json)

encode writes the ids separated by spaces; it never emits <|endoftext|>
(with hf, added and special tokens written in the text become their ids,
as in Hugging Face's tokenizer, and BOS is not added).
decode reads ids separated by whitespace.
`

func tokenizerCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, tokenizerUsage)
		return errUsage
	}
	switch args[0] {
	case "train":
		return tokenizerTrain(args[1:], stdout, stderr)
	case "encode":
		return tokenizerEncode(args[1:], stdout, stderr)
	case "decode":
		return tokenizerDecode(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, tokenizerUsage)
		return flag.ErrHelp
	}
	fmt.Fprintf(stderr, "fleet tokenizer: unknown subcommand %q\n\n%s", args[0], tokenizerUsage)
	return errUsage
}

func tokenizerTrain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokenizer train", flag.ContinueOnError)
	vocab := fs.Int("vocab-size", 0, "vocabulary size, <|endoftext|> included (257 to 65535)")
	out := fs.String("out", "", "file to write the tokenizer to (open it as bpe:FILE)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: fleet tokenizer train --vocab-size N --out FILE INPUT...")
		fs.PrintDefaults()
	}
	// Flags may come before, between or after the inputs.
	fs.SetOutput(stderr)
	var inputs []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return errUsage
		}
		left := fs.Args()
		if len(left) == 0 {
			break
		}
		if n := len(rest) - len(left); n > 0 && rest[n-1] == "--" {
			inputs = append(inputs, left...)
			break
		}
		inputs = append(inputs, left[0])
		rest = left[1:]
	}
	switch {
	case *vocab == 0:
		fmt.Fprintln(stderr, "fleet tokenizer train: --vocab-size is required")
		fs.Usage()
		return errUsage
	case *out == "":
		fmt.Fprintln(stderr, "fleet tokenizer train: --out is required")
		fs.Usage()
		return errUsage
	case len(inputs) == 0:
		fmt.Fprintln(stderr, "fleet tokenizer train: no input files")
		fs.Usage()
		return errUsage
	}
	files, err := expandInputs(inputs)
	if err != nil {
		return err
	}
	start := time.Now()
	bpe, err := tokenizer.TrainBPE(files, *vocab)
	if err != nil {
		return err
	}
	took := time.Since(start)
	if err := bpe.Save(*out); err != nil {
		return err
	}
	var nbytes, ntokens int64
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		cr := &countingReader{r: f}
		err = tokenizer.EncodeReader(bpe, cr, func(ids []int32) error {
			ntokens += int64(len(ids))
			return nil
		})
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		nbytes += cr.n
	}
	fmt.Fprintf(stdout, "trained a BPE of %d tokens (%d merges) on %d file(s), %d bytes, in %.2fs: %.3f tokens per byte\n",
		bpe.Size(), len(bpe.Merges()), len(files), nbytes, took.Seconds(), float64(ntokens)/float64(nbytes))
	fmt.Fprintf(stdout, "wrote %s (use it as --tokenizer %s)\n", *out, bpe.Spec())
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// expandInputs replaces each folder by the regular files under it, in
// lexical order, skipping hidden files and folders.
func expandInputs(inputs []string) ([]string, error) {
	var files []string
	for _, in := range inputs {
		info, err := os.Stat(in)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, fmt.Errorf("input %s: %w", in, err)
		}
		if !info.IsDir() {
			files = append(files, in)
			continue
		}
		var under []string
		err = filepath.WalkDir(in, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != in && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				under = append(under, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in, err)
		}
		if len(under) == 0 {
			return nil, fmt.Errorf("%s: folder has no files", in)
		}
		slices.Sort(under)
		files = append(files, under...)
	}
	return files, nil
}

func tokenizerEncode(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokenizer encode", flag.ContinueOnError)
	spec := fs.String("tokenizer", "", "tokenizer: char:FILE, bpe:FILE, gpt2:FILE|DIR or hf:FILE|DIR")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *spec == "" {
		fmt.Fprintln(stderr, "fleet tokenizer encode: --tokenizer is required")
		fs.Usage()
		return errUsage
	}
	tok, err := tokenizer.Open(*spec, tokenizer.Options{})
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	var num []byte
	first := true
	err = tokenizer.EncodeReader(tok, stdinReader, func(ids []int32) error {
		for _, id := range ids {
			num = num[:0]
			if !first {
				num = append(num, ' ')
			}
			first = false
			num = strconv.AppendInt(num, int64(id), 10)
			if _, err := w.Write(num); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	if !first {
		w.WriteByte('\n')
	}
	return w.Flush()
}

func tokenizerDecode(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokenizer decode", flag.ContinueOnError)
	spec := fs.String("tokenizer", "", "tokenizer: char:FILE, bpe:FILE, gpt2:FILE|DIR or hf:FILE|DIR")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *spec == "" {
		fmt.Fprintln(stderr, "fleet tokenizer decode: --tokenizer is required")
		fs.Usage()
		return errUsage
	}
	tok, err := tokenizer.Open(*spec, tokenizer.Options{})
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(stdinReader)
	sc.Buffer(make([]byte, 4096), 1<<20)
	sc.Split(bufio.ScanWords)
	w := bufio.NewWriterSize(stdout, 64<<10)
	ids := make([]int32, 0, 4096)
	flush := func() error {
		text := tok.Decode(ids) // every id is in the vocabulary: checked below
		ids = ids[:0]
		_, err := w.WriteString(text)
		return err
	}
	size := int64(tok.Size())
	for n := 0; sc.Scan(); {
		v, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			return fmt.Errorf("decode: token %d: %q is not an id", n, clipText(sc.Text()))
		}
		if v < 0 || v >= size {
			return fmt.Errorf("decode: token %d: id %d is outside the vocabulary (0 to %d)", n, v, size-1)
		}
		ids = append(ids, int32(v))
		n++
		if len(ids) == cap(ids) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("decode: reading the ids: %w", err)
	}
	if err := flush(); err != nil {
		return err
	}
	return w.Flush()
}

func clipText(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}
