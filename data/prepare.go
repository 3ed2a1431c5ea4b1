package data

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/fleetml/fleet/internal/atomicfile"
	"github.com/fleetml/fleet/internal/setting"
)

// Tokenizer turns text into token ids and back. It is fleet's one
// tokenizer interface: Prepare encodes with it, the trainer records it and
// samples with it, and fleet sample, eval and tokenizer use it. Char (here)
// and package tokenizer's BPE (a trained BPE, GPT-2's) and Raw (raw token
// ids) implement it, and tokenizer.Open opens any of them from a spec.
// It lives in this package, not in package tokenizer, because Prepare and
// Char need it and data must not import tokenizer (which imports data).
// A Tokenizer is safe for concurrent use.
type Tokenizer interface {
	// Encode returns the ids of text. It adds no special token: text that
	// spells one ("<|endoftext|>") is encoded as ordinary text. It fails
	// on text the tokenizer cannot encode (a character outside a char
	// vocabulary; any text, for raw token ids).
	Encode(text string) ([]int32, error)
	// Decode returns the text of ids; an id with no text (outside the
	// vocabulary) decodes to U+FFFD.
	Decode(ids []int32) string
	// Size returns the number of ids: every id is below it.
	Size() int
	// EOT returns the id of <|endoftext|>, which Prepare puts between
	// documents, when the tokenizer has one.
	EOT() (id int32, ok bool)
	// Spec returns the spec that opens the tokenizer again
	// (tokenizer.Open), or "" when there is none (a vocabulary built in
	// memory and not saved).
	Spec() string
}

// ManifestFile is the name of the manifest in a prepared folder.
const ManifestFile = "manifest.json"

// ManifestFormat and ManifestVersion identify a manifest.
const (
	ManifestFormat  = "fleet-tokens"
	ManifestVersion = 1
)

// Manifest describes a prepared folder: the tokenizer, and the train and
// val shards with their token counts and checksums.
type Manifest struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	Tokenizer string `json:"tokenizer"` // spec; a relative path in it is relative to the folder
	VocabSize int    `json:"vocab_size"`
	// EOT is the end-of-text token between documents, if any.
	EOT         *int32     `json:"eot,omitempty"`
	ValFraction float64    `json:"val_fraction"`
	Inputs      []string   `json:"inputs"`
	Documents   int        `json:"documents"`
	InputBytes  int64      `json:"input_bytes"`
	Train       SplitFiles `json:"train"`
	Val         SplitFiles `json:"val"`
}

// SplitFiles is one split's shards, in order.
type SplitFiles struct {
	Tokens int64       `json:"tokens"`
	Shards []ShardFile `json:"shards"`
}

// ShardFile is one shard of a split.
type ShardFile struct {
	File   string `json:"file"` // name in the folder
	Tokens int64  `json:"tokens"`
	SHA256 string `json:"sha256"` // of the whole file, header included
}

// PrepareConfig is one run of Prepare.
type PrepareConfig struct {
	Tokenizer Tokenizer
	// Boundary returns the length of the longest prefix of a chunk that
	// can be encoded on its own: encoding it and then the rest gives the
	// ids of encoding the whole, whatever follows. It returns 0 when there
	// is no such prefix. Nil means any boundary between complete UTF-8
	// characters, which is enough for a character tokenizer.
	Boundary func(chunk []byte) int
	// Inputs are files and folders; a folder stands for its files in
	// sorted path order, as ListFiles gives them.
	Inputs []string
	Out    string // folder for the shards and the manifest
	// ValFraction of the input bytes, at the end of the concatenated
	// input, becomes the val split; the cut moves back to a boundary.
	ValFraction float64
	ShardTokens int // tokens per shard; 0 means DefaultShardTokens
	ChunkBytes  int // bytes read and encoded at a time; 0 means 1 MiB
	// Workers encode chunks concurrently; 0 means 1. The shards do not
	// depend on it.
	Workers int
	// Progress, if set, is called after each chunk with the input bytes
	// done and the total.
	Progress func(done, total int64)
	// Files are written into Out, atomically, before the manifest: a
	// character vocabulary that the manifest's tokenizer spec names.
	Files map[string][]byte
}

// DefaultShardTokens is llm.c's shard size, 100M tokens.
const DefaultShardTokens = 100_000_000

// maxChunk bounds the bytes held while looking for a boundary; a longer
// run with none (a binary file, a megabyte of spaces) is cut at a UTF-8
// character boundary and encoded in pieces.
const maxChunk = 64 << 20

// Prepare tokenizes the inputs into llm.c shards in cfg.Out and writes the
// manifest, which it returns. It streams: it holds a few chunks in memory
// whatever the size of the inputs.
//
// Each input file is a document. When the tokenizer has an end-of-text
// token, it goes between documents; otherwise the files are concatenated
// as they are. The val split is the last ValFraction of the input bytes:
// the cut is at byte int((1-ValFraction)*total) of the concatenated input,
// moved back to a boundary, so that on ASCII text with a character
// tokenizer the splits are exactly those of Split. Shards are named
// train_000000.bin, val_000000.bin, and so on; every file is written
// atomically, the manifest last.
func Prepare(cfg PrepareConfig) (man *Manifest, err error) {
	if cfg.Tokenizer == nil {
		return nil, errors.New("prepare: no tokenizer")
	}
	if v := cfg.Tokenizer.Size(); v <= 0 || v > MaxVocab {
		return nil, fmt.Errorf("prepare: tokenizer %s has a vocabulary of %d, not in [1, %d]", cfg.Tokenizer.Spec(), v, MaxVocab)
	}
	if cfg.ValFraction < 0 || cfg.ValFraction >= 1 || math.IsNaN(cfg.ValFraction) {
		return nil, fmt.Errorf("prepare: val fraction %v is not in [0, 1)", cfg.ValFraction)
	}
	if cfg.ShardTokens == 0 {
		cfg.ShardTokens = DefaultShardTokens
	}
	if cfg.ShardTokens < 0 || cfg.ShardTokens > MaxShardTokens {
		return nil, fmt.Errorf("prepare: shard size %d tokens is not in [1, %d]", cfg.ShardTokens, MaxShardTokens)
	}
	if cfg.ChunkBytes <= 0 {
		cfg.ChunkBytes = 1 << 20
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.Boundary == nil {
		cfg.Boundary = UTF8Boundary
	}
	if len(cfg.Inputs) == 0 {
		return nil, errors.New("prepare: no input files")
	}
	docs, total, err := listInputs(cfg.Inputs)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	for _, d := range docs {
		if inside(d.path, cfg.Out) {
			return nil, fmt.Errorf("prepare: input %s is inside the output folder %s", d.path, cfg.Out)
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, setting.Errorf("prepare: {Out} %s: %w", cfg.Out, err)
	}
	// A crash from here on must not leave a manifest naming shards that
	// are being replaced.
	if err := os.Remove(filepath.Join(cfg.Out, ManifestFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, setting.Errorf("prepare: {Out} %s: %w", cfg.Out, err)
	}

	man = &Manifest{Format: ManifestFormat, Version: ManifestVersion, Tokenizer: cfg.Tokenizer.Spec(),
		VocabSize: cfg.Tokenizer.Size(), ValFraction: cfg.ValFraction, Inputs: cfg.Inputs,
		Documents: len(docs), InputBytes: total}
	if id, ok := cfg.Tokenizer.EOT(); ok {
		man.EOT = &id
	}
	p := &preparer{cfg: cfg, man: man, total: total,
		cut: int64((1 - cfg.ValFraction) * float64(total))}
	defer func() {
		if err != nil {
			p.abort()
		}
	}()
	if err := p.run(docs); err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if man.Train.Tokens == 0 {
		return nil, fmt.Errorf("prepare: the inputs gave no training tokens")
	}
	for name, b := range cfg.Files {
		if name != filepath.Base(name) || shardName.MatchString(name) || name == ManifestFile {
			return nil, fmt.Errorf("prepare: cannot write a file named %q into the output folder", name)
		}
		if err := atomicfile.WriteFile(filepath.Join(cfg.Out, name), b); err != nil {
			return nil, fmt.Errorf("prepare: %w", err)
		}
	}
	b, _ := json.MarshalIndent(man, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(cfg.Out, ManifestFile), append(b, '\n')); err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	removeStaleShards(cfg.Out, man)
	return man, nil
}

// inside reports whether path is in folder dir (at any depth).
func inside(path, dir string) bool {
	ap, err1 := filepath.Abs(path)
	ad, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(ad, ap)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// document is one input file and the size it had when listed.
type document struct {
	path string
	size int64
}

// listInputs expands the inputs into documents. A file named as an input
// must not be empty; empty files inside a folder are skipped.
func listInputs(inputs []string) ([]document, int64, error) {
	var docs []document
	var total int64
	for _, in := range inputs {
		fi, err := os.Stat(in)
		if err != nil {
			return nil, 0, fmt.Errorf("input %s: %w", in, unwrapPath(err))
		}
		files := []string{in}
		if fi.IsDir() {
			if files, err = ListFiles(in); err != nil {
				return nil, 0, err
			}
		}
		n := 0
		for _, f := range files {
			fi, err := os.Stat(f)
			if err != nil {
				return nil, 0, fmt.Errorf("input %s: %w", f, unwrapPath(err))
			}
			if fi.Size() == 0 {
				continue
			}
			docs = append(docs, document{f, fi.Size()})
			total += fi.Size()
			n++
		}
		if n == 0 {
			if fi.IsDir() {
				return nil, 0, fmt.Errorf("input %s: the folder holds no files with any bytes", in)
			}
			return nil, 0, fmt.Errorf("input %s: empty", in)
		}
	}
	return docs, total, nil
}

// preparer is one Prepare in progress.
type preparer struct {
	cfg   PrepareConfig
	man   *Manifest
	total int64
	cut   int64 // input byte where val begins

	done    int64 // input bytes read
	inVal   bool
	writers [2]*ShardWriter // train, val
}

// A job is a piece of text to encode and write to a split, or (text nil)
// an end-of-text token.
type job struct {
	doc   string // the input file
	text  []byte
	val   bool
	eot   bool
	ids   []int32
	err   error // the tokenizer could not encode text
	ready chan struct{}
}

// errStopped ends reading when the writer has failed.
var errStopped = errors.New("stopped")

// run reads the documents and feeds the pipeline: chunks go to the
// encoders in order and come out to the writer in the same order. At most
// Workers+2 chunks are in flight.
func (p *preparer) run(docs []document) error {
	W := p.cfg.Workers
	free := make(chan *job, W+2)
	for range W + 2 {
		free <- &job{ready: make(chan struct{}, 1)}
	}
	encode := make(chan *job, W+2)
	ordered := make(chan *job, W+2)
	var wg sync.WaitGroup
	wg.Add(W)
	for range W {
		go func() {
			defer wg.Done()
			for j := range encode {
				j.err = nil
				if j.eot {
					id, _ := p.cfg.Tokenizer.EOT()
					j.ids = append(j.ids[:0], id)
				} else {
					j.ids, j.err = p.cfg.Tokenizer.Encode(string(j.text))
				}
				j.ready <- struct{}{}
			}
		}()
	}
	var failed atomic.Bool
	writeErr := make(chan error, 1)
	go func() {
		var err error
		for j := range ordered {
			<-j.ready
			if err == nil {
				if err = p.write(j); err != nil {
					failed.Store(true)
				}
			}
			free <- j
		}
		writeErr <- err
	}()
	var doc string
	emit := func(text []byte, eot bool) error {
		if failed.Load() {
			return errStopped
		}
		j := <-free
		j.text = append(j.text[:0], text...)
		j.eot, j.val, j.doc = eot, p.inVal, doc
		encode <- j
		ordered <- j
		return nil
	}
	var readErr error
	_, hasEOT := p.cfg.Tokenizer.EOT()
	buf := make([]byte, p.cfg.ChunkBytes)
	for i, d := range docs {
		doc = d.path
		if i > 0 && hasEOT {
			p.switchAt(p.done)
			if readErr = emit(nil, true); readErr != nil {
				break
			}
		}
		if readErr = p.readDoc(d, &buf, emit); readErr != nil {
			break
		}
	}
	close(encode)
	close(ordered)
	wg.Wait()
	if err := <-writeErr; err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	return p.finish()
}

// switchAt starts the val split when pos reaches the cut.
func (p *preparer) switchAt(pos int64) {
	if !p.inVal && pos >= p.cut && p.cfg.ValFraction > 0 {
		p.inVal = true
	}
}

// readDoc reads one document in chunks, cutting each at a boundary and
// emitting the pieces, and the val cut where it falls.
func (p *preparer) readDoc(d document, buf *[]byte, emit func([]byte, bool) error) error {
	f, err := os.Open(d.path)
	if err != nil {
		return fmt.Errorf("input %s: %w", d.path, unwrapPath(err))
	}
	defer f.Close()
	var read int64
	carry := 0 // bytes at the start of buf left from the last chunk
	start := p.done
	for {
		b := *buf
		n, err := io.ReadFull(f, b[carry:])
		read += int64(n)
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !eof {
			return fmt.Errorf("input %s: %w", d.path, err)
		}
		if read > d.size {
			return fmt.Errorf("input %s: grew while being read (from %d bytes)", d.path, d.size)
		}
		data := b[:carry+n]
		pos := start + read - int64(len(data)) // input offset of data[0]
		// The val cut, if it falls in data: encode up to a boundary before
		// it as train, and the rest as val.
		if !p.inVal && p.cfg.ValFraction > 0 && p.cut < pos+int64(len(data)) {
			s := int(max(p.cut-pos, 0))
			q := p.cfg.Boundary(data[:s])
			if q == 0 {
				q = UTF8Boundary(data[:s])
			}
			if q > 0 {
				if err := emit(data[:q], false); err != nil {
					return err
				}
			}
			p.inVal = true
			data = data[q:]
		}
		q := len(data)
		if !eof {
			if q = p.cfg.Boundary(data); q == 0 {
				switch {
				case len(data) < len(b): // the val cut took a prefix: read more
				case len(b) < maxChunk: // no boundary in a full buffer: grow it
					b = make([]byte, min(2*len(b), maxChunk))
					*buf = b
				default:
					if q = UTF8Boundary(data); q == 0 {
						q = len(data)
					}
				}
			}
		}
		if q > 0 {
			if err := emit(data[:q], false); err != nil {
				return err
			}
		}
		carry = copy(b, data[q:])
		p.done = start + read - int64(carry)
		if p.cfg.Progress != nil {
			p.cfg.Progress(p.done, p.total)
		}
		if eof {
			break
		}
	}
	if read != d.size {
		return fmt.Errorf("input %s: shrank while being read (from %d to %d bytes)", d.path, d.size, read)
	}
	p.done = start + read
	return nil
}

// write appends a job's ids to its split, starting shards as they fill.
func (p *preparer) write(j *job) error {
	split := 0
	if j.val {
		split = 1
	}
	ids := j.ids
	switch id, bad := firstBadID(ids, p.man.VocabSize); {
	case j.err != nil, bad && id < 0:
		return fmt.Errorf("input %s: tokenizer %s cannot encode it (a character outside its vocabulary)", j.doc, p.cfg.Tokenizer.Spec())
	case bad:
		return fmt.Errorf("input %s: tokenizer %s gave id %d, outside its vocabulary of %d", j.doc, p.cfg.Tokenizer.Spec(), id, p.man.VocabSize)
	}
	for len(ids) > 0 {
		w := p.writers[split]
		if w != nil && w.Len() == p.cfg.ShardTokens {
			if err := p.closeShard(split); err != nil {
				return err
			}
			w = nil
		}
		if w == nil {
			files := p.splitFiles(split)
			name := fmt.Sprintf("%s_%06d.bin", [2]string{"train", "val"}[split], len(files.Shards))
			var err error
			if w, err = CreateShard(filepath.Join(p.cfg.Out, name), p.cfg.Tokenizer.Size()); err != nil {
				return err
			}
			p.writers[split] = w
		}
		n := min(len(ids), p.cfg.ShardTokens-w.Len())
		if err := w.Write(ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func firstBadID(ids []int32, vocab int) (int32, bool) {
	for _, id := range ids {
		if id < 0 || int(id) >= vocab {
			return id, true
		}
	}
	return 0, false
}

func (p *preparer) splitFiles(split int) *SplitFiles {
	if split == 0 {
		return &p.man.Train
	}
	return &p.man.Val
}

// closeShard completes the split's open shard and records it.
func (p *preparer) closeShard(split int) error {
	w := p.writers[split]
	p.writers[split] = nil
	n := w.Len()
	sha, err := w.Close()
	if err != nil {
		return err
	}
	f := p.splitFiles(split)
	f.Shards = append(f.Shards, ShardFile{File: filepath.Base(w.path), Tokens: int64(n), SHA256: sha})
	f.Tokens += int64(n)
	return nil
}

// finish closes the open shards.
func (p *preparer) finish() error {
	for split := range p.writers {
		if p.writers[split] != nil {
			if err := p.closeShard(split); err != nil {
				return err
			}
		}
	}
	return nil
}

// abort removes the temporary files of open shards.
func (p *preparer) abort() {
	for _, w := range p.writers {
		if w != nil {
			w.Abort()
		}
	}
}

var shardName = regexp.MustCompile(`^(train|val)_[0-9]{6}\.bin$`)

// removeStaleShards deletes shards of an earlier Prepare into the same
// folder that the new manifest does not list.
func removeStaleShards(dir string, man *Manifest) {
	keep := map[string]bool{}
	for _, s := range append(man.Train.Shards, man.Val.Shards...) {
		keep[s.File] = true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if shardName.MatchString(e.Name()) && !keep[e.Name()] {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// UTF8Boundary returns the length of the longest prefix of b that ends
// between complete UTF-8 characters (an invalid byte counts as one
// character): the boundary rule of a character tokenizer.
func UTF8Boundary(b []byte) int {
	n := len(b)
	if n == 0 {
		return 0
	}
	i := n - 1
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i--
	}
	if utf8.FullRune(b[i:]) {
		return n
	}
	return i
}
