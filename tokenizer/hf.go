package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// HF is a Hugging Face tokenizer read from a tokenizer.json (the format
// of the Rust tokenizers library), with BOS and EOS from the
// tokenizer_config.json beside it. It runs the file's pipeline: added
// tokens, normalizer, pre-tokenizer, a BPE model and the decoder. What
// fleet supports of the format is in the package documentation; anything
// else is refused when the file is opened, naming the field. An HF is a
// data.Tokenizer and is safe for concurrent use.
type HF struct {
	spec string
	file string // the tokenizer.json

	size   int      // the largest id + 1
	tokens []string // each id's token as the file writes it; "" for none
	has    []bool   // has[id]: id is a token (vocabularies may have gaps)
	added  []bool   // added[id]: an added token, kept whole by the decoder

	norm      []hfNorm
	pre       []hfPre
	model     *hfBPE
	rawAdded  *addedMatcher // added tokens matched in the text as it is
	normAdded *addedMatcher // added tokens matched after normalization
	dec       []hfDec

	bos, eos int32 // -1: none
	addBOS   bool

	// Split points (SplitPoint): the boundary rule of the pre-tokenizer,
	// or none.
	safe      func(prev, next rune) bool // nil: the model's junctions
	noSplit   bool                       // no split point at all
	needSpace bool                       // a split point must be followed by a space
	normForm  *norm.Form                 // a Unicode normalization the cut must not touch
	spaceRepl string                     // Metaspace's replacement for a space
	strips    bool                       // some added token strips whitespace
	maxAdded  int                        // the longest added token, in bytes
}

// hfNorm is one normalizer step.
type hfNorm struct {
	kind          string // "NFC", "NFD", "NFKC", "NFKD", "Prepend", "Replace"
	form          norm.Form
	text, content string
}

// hfPre is one pre-tokenizer step.
type hfPre struct {
	kind        string    // "split", "digits", "bytelevel", "metaspace"
	pattern     hfPattern // split
	individual  bool      // digits
	prefixSpace bool      // bytelevel
	useRegex    bool      // bytelevel
	repl        string    // metaspace
	scheme      string    // metaspace: "always", "first" or "never"
}

// hfDec is one decoder step.
type hfDec struct {
	kind            string // "ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"
	pattern, with   string // Replace; Metaspace's replacement in pattern
	strip           string // Strip's content
	start, stop     int    // Strip
	stripFirstSpace bool   // Metaspace
}

// hfAdded is one entry of added_tokens.
type hfAdded struct {
	ID         *int64 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// OpenHF opens the tokenizer that path names: a tokenizer.json, or a
// folder holding one. tokenizer_config.json, in the folder or beside a
// file named tokenizer.json, gives BOS and EOS; without it the tokenizer
// has neither.
func OpenHF(path string) (*HF, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("hf tokenizer: %w", err)
	}
	file, config := path, ""
	if info.IsDir() {
		file = filepath.Join(path, "tokenizer.json")
		config = filepath.Join(path, "tokenizer_config.json")
	} else if filepath.Base(path) == "tokenizer.json" {
		config = filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("hf tokenizer: %w", err)
	}
	t, err := parseHF(b)
	if err != nil {
		return nil, fmt.Errorf("hf tokenizer %s: %w", file, err)
	}
	t.file, t.spec = file, "hf:"+path
	if config != "" {
		cb, err := os.ReadFile(config)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("hf tokenizer: %w", err)
		default:
			if err := t.readConfig(cb); err != nil {
				return nil, fmt.Errorf("hf tokenizer %s: %w", config, err)
			}
		}
	}
	if !t.addBOS {
		t.bos = -1
	}
	return t, nil
}

// hfFile is tokenizer.json; the components stay raw, for errors that
// name their fields.
type hfFile struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []hfAdded       `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

// component is one JSON object of the pipeline.
type component struct {
	field string // where it is, for errors: "pre_tokenizer.pretokenizers[0]"
	m     map[string]json.RawMessage
}

func parseComponent(field string, raw json.RawMessage) (*component, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	c := &component{field: field}
	if err := json.Unmarshal(raw, &c.m); err != nil {
		return nil, fmt.Errorf("%s: want an object: %v", field, err)
	}
	return c, nil
}

func (c *component) errorf(format string, a ...any) error {
	return fmt.Errorf("%s: %s", c.field, fmt.Sprintf(format, a...))
}

func (c *component) typ() (string, error) {
	var s string
	if raw, ok := c.m["type"]; !ok || json.Unmarshal(raw, &s) != nil {
		return "", c.errorf("no \"type\"")
	}
	return s, nil
}

// str, boolean and integer read an optional field; absent or null gives
// def.
func (c *component) str(key, def string) (string, error) {
	raw, ok := c.m[key]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", c.errorf("%s is not a string", key)
	}
	return s, nil
}

func (c *component) boolean(key string, def bool) (bool, error) {
	raw, ok := c.m[key]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, c.errorf("%s is not true or false", key)
	}
	return v, nil
}

func (c *component) integer(key string, def int) (int, error) {
	raw, ok := c.m[key]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	var v int
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, c.errorf("%s is not an integer", key)
	}
	return v, nil
}

// list reads a field that holds an array of components.
// each runs visit on c, or, where c is a Sequence, on each of the parts
// it lists under key (Sequences nested in turn), in order.
func (c *component) each(key string, visit func(typ string, c *component) error) error {
	typ, err := c.typ()
	if err != nil {
		return err
	}
	if typ != "Sequence" {
		return visit(typ, c)
	}
	subs, err := c.list(key)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if err := s.each(key, visit); err != nil {
			return err
		}
	}
	return nil
}

func (c *component) list(key string) ([]*component, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(c.m[key], &raws); err != nil {
		return nil, c.errorf("%s is not an array", key)
	}
	out := make([]*component, 0, len(raws))
	for i, raw := range raws {
		sub, err := parseComponent(fmt.Sprintf("%s.%s[%d]", c.field, key, i), raw)
		if err != nil {
			return nil, err
		}
		if sub != nil {
			out = append(out, sub)
		}
	}
	return out, nil
}

// pattern reads a {"String": s} or {"Regex": r} pattern.
func (c *component) pattern() (s string, regex bool, err error) {
	var p struct {
		String *string
		Regex  *string
	}
	if err := json.Unmarshal(c.m["pattern"], &p); err != nil || (p.String == nil) == (p.Regex == nil) {
		return "", false, c.errorf("pattern is not {\"String\": ...} or {\"Regex\": ...}")
	}
	if p.Regex != nil {
		return *p.Regex, true, nil
	}
	return *p.String, false, nil
}

func parseHF(b []byte) (*HF, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	var f hfFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	if len(f.Model) == 0 || string(f.Model) == "null" {
		return nil, fmt.Errorf("not a tokenizer.json: no model")
	}
	t := &HF{bos: -1, eos: -1}
	var err error
	if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	byteLevel := false
	for _, p := range t.pre {
		byteLevel = byteLevel || p.kind == "bytelevel"
	}
	mc, err := parseComponent("model", f.Model)
	if err != nil {
		return nil, err
	}
	vocab, err := t.parseModel(mc, byteLevel)
	if err != nil {
		return nil, err
	}
	if err := t.parseAdded(f.AddedTokens, vocab); err != nil {
		return nil, err
	}
	if t.dec, err = parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := t.parsePostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	t.planSplit()
	t.model.init()
	return t, nil
}

func parseNormalizer(raw json.RawMessage) ([]hfNorm, error) {
	c, err := parseComponent("normalizer", raw)
	if err != nil || c == nil {
		return nil, err
	}
	var out []hfNorm
	visit := func(typ string, c *component) (err error) {
		switch typ {
		case "NFC", "NFD", "NFKC", "NFKD":
			form := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}[typ]
			out = append(out, hfNorm{kind: typ, form: form})
		case "Prepend":
			p, err := c.str("prepend", "")
			if err != nil {
				return err
			}
			out = append(out, hfNorm{kind: typ, text: p})
		case "Replace":
			s, regex, err := c.pattern()
			if err != nil {
				return err
			}
			if regex || s == "" {
				return c.errorf("a Replace normalizer with a regular expression or an empty pattern is not supported (only {\"String\": ...})")
			}
			content, err := c.str("content", "")
			if err != nil {
				return err
			}
			out = append(out, hfNorm{kind: typ, text: s, content: content})
		default:
			return c.errorf("normalizer type %q is not supported (fleet reads NFC, NFD, NFKC, NFKD, Prepend, Replace and Sequence)", typ)
		}
		return nil
	}
	return out, c.each("normalizers", visit)
}

func parsePreTokenizer(raw json.RawMessage) ([]hfPre, error) {
	c, err := parseComponent("pre_tokenizer", raw)
	if err != nil || c == nil {
		return nil, err
	}
	var out []hfPre
	visit := func(typ string, c *component) (err error) {
		if n := len(out); n > 0 && out[n-1].kind == "bytelevel" {
			return c.errorf("%s after ByteLevel is not supported (ByteLevel must be the last pre-tokenizer)", typ)
		}
		switch typ {
		case "Split":
			s, regex, err := c.pattern()
			if err != nil {
				return err
			}
			pat, ok := knownPatterns[s]
			if !regex || !ok {
				return c.errorf("split pattern %q is not supported (fleet knows the patterns of GPT-2, Llama 3 and Qwen2)", s)
			}
			behavior, err := c.str("behavior", "")
			if err != nil {
				return err
			}
			invert, err := c.boolean("invert", false)
			if err != nil {
				return err
			}
			if behavior != "Isolated" || invert {
				return c.errorf("behavior %q with invert %v is not supported (only \"Isolated\", not inverted)", behavior, invert)
			}
			out = append(out, hfPre{kind: "split", pattern: pat})
		case "Digits":
			ind, err := c.boolean("individual_digits", false)
			if err != nil {
				return err
			}
			out = append(out, hfPre{kind: "digits", individual: ind})
		case "ByteLevel":
			p := hfPre{kind: "bytelevel"}
			if p.prefixSpace, err = c.boolean("add_prefix_space", false); err != nil {
				return err
			}
			if p.useRegex, err = c.boolean("use_regex", true); err != nil {
				return err
			}
			out = append(out, p)
		case "Metaspace":
			p := hfPre{kind: "metaspace"}
			if p.repl, err = c.str("replacement", "▁"); err != nil {
				return err
			}
			if utf8.RuneCountInString(p.repl) != 1 {
				return c.errorf("replacement %q is not one character", p.repl)
			}
			if p.scheme, err = metaspaceScheme(c); err != nil {
				return err
			}
			split, err := c.boolean("split", true)
			if err != nil {
				return err
			}
			if split {
				return c.errorf("split true is not supported (Llama and Mistral files have split false)")
			}
			out = append(out, p)
		default:
			return c.errorf("pre-tokenizer type %q is not supported (fleet reads ByteLevel, Split with the GPT-2, Llama 3 or Qwen2 pattern, Digits, Metaspace and Sequence)", typ)
		}
		return nil
	}
	return out, c.each("pretokenizers", visit)
}

// metaspaceScheme reads prepend_scheme, or the older add_prefix_space.
func metaspaceScheme(c *component) (string, error) {
	s, err := c.str("prepend_scheme", "")
	if err != nil {
		return "", err
	}
	switch s {
	case "always", "first", "never":
		return s, nil
	case "":
		add, err := c.boolean("add_prefix_space", true)
		if err != nil {
			return "", err
		}
		if add {
			return "always", nil
		}
		return "never", nil
	}
	return "", c.errorf("prepend_scheme %q is not always, first or never", s)
}

// parseModel reads the BPE model and returns its vocabulary (the token
// strings as the file writes them).
func (t *HF) parseModel(c *component, byteLevel bool) (map[string]int64, error) {
	typ, err := c.typ()
	if err != nil {
		return nil, err
	}
	if typ != "BPE" {
		return nil, c.errorf("type %q is not supported (fleet reads BPE models only)", typ)
	}
	for _, key := range []string{"continuing_subword_prefix", "end_of_word_suffix"} {
		if s, err := c.str(key, ""); err != nil || s != "" {
			if err != nil {
				return nil, err
			}
			return nil, c.errorf("%s %q is not supported", key, s)
		}
	}
	if raw, ok := c.m["dropout"]; ok && string(raw) != "null" {
		var d float64
		if json.Unmarshal(raw, &d) != nil || d != 0 {
			return nil, c.errorf("dropout %s is not supported", raw)
		}
	}
	m := &hfBPE{byteLevel: byteLevel, unk: -1}
	if m.byteFallback, err = c.boolean("byte_fallback", false); err != nil {
		return nil, err
	}
	if m.fuseUnk, err = c.boolean("fuse_unk", false); err != nil {
		return nil, err
	}
	if m.ignoreMerges, err = c.boolean("ignore_merges", false); err != nil {
		return nil, err
	}
	var vocab map[string]int64
	if err := json.Unmarshal(c.m["vocab"], &vocab); err != nil || vocab == nil {
		return nil, c.errorf("vocab is not an object of token ids")
	}
	maxID := int64(-1)
	for tok, id := range vocab {
		if id < 0 || id >= 1<<31-1 {
			return nil, c.errorf("vocab: token %q has id %d", tok, id)
		}
		maxID = max(maxID, id)
	}
	if maxID > 1<<24 {
		return nil, c.errorf("vocab: id %d is too large", maxID)
	}
	t.grow(int(maxID) + 1)
	m.vocab = make(map[string]int32, len(vocab))
	for tok, id := range vocab {
		if t.has[id] {
			return nil, c.errorf("vocab: id %d is given to %q and %q", id, t.tokens[id], tok)
		}
		t.tokens[id], t.has[id] = tok, true
		key := tok
		if byteLevel {
			b, ok := unmapBytes(tok)
			if !ok {
				continue // not byte-level text: BPE never makes it
			}
			key = string(b)
		}
		m.vocab[key] = int32(id)
	}
	// unit returns a merge part's key in m.vocab.
	unit := func(s string) (string, bool) {
		if byteLevel {
			b, ok := unmapBytes(s)
			return string(b), ok
		}
		return s, true
	}
	if byteLevel {
		for b := range 256 {
			id, ok := m.vocab[string([]byte{byte(b)})]
			if !ok {
				return nil, c.errorf("vocab: byte %#02x (%q) has no token, which a ByteLevel pre-tokenizer needs", b, string(byteUnicode[b]))
			}
			m.byteUnit[b] = id
		}
	}
	for b := range 256 {
		m.fallback[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok && m.byteFallback {
			m.fallback[b] = id
		}
	}
	if s, err := c.str("unk_token", ""); err != nil {
		return nil, err
	} else if s != "" {
		id, ok := vocab[s]
		if !ok {
			return nil, c.errorf("unk_token %q is not in the vocab", s)
		}
		m.unk = int32(id)
	}
	var merges []json.RawMessage
	if err := json.Unmarshal(c.m["merges"], &merges); err != nil {
		return nil, c.errorf("merges is not an array")
	}
	m.pairs = make(pairRanks, len(merges))
	for i, raw := range merges {
		var a, b string
		var s string
		var pair []string
		switch {
		case len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil:
			parts := bytes.Split([]byte(s), []byte{' '})
			if len(parts) != 2 {
				return nil, c.errorf("merges[%d] is %q, want two tokens separated by a space", i, s)
			}
			a, b = string(parts[0]), string(parts[1])
		case len(raw) > 0 && raw[0] == '[' && json.Unmarshal(raw, &pair) == nil && len(pair) == 2:
			a, b = pair[0], pair[1]
		default:
			return nil, c.errorf("merges[%d] is %s, want \"A B\" or [\"A\", \"B\"]", i, clip(raw))
		}
		ua, aok := unit(a)
		ub, bok := unit(b)
		ia, aok2 := m.vocab[ua]
		ib, bok2 := m.vocab[ub]
		im, mok := m.vocab[ua+ub]
		switch {
		case !aok || !aok2:
			return nil, c.errorf("merges[%d] (%q %q): %q is not in the vocab", i, a, b, a)
		case !bok || !bok2:
			return nil, c.errorf("merges[%d] (%q %q): %q is not in the vocab", i, a, b, b)
		case !mok:
			return nil, c.errorf("merges[%d] (%q %q): the merged token %q is not in the vocab", i, a, b, a+b)
		}
		// A pair listed twice takes its later rank, as in the reference
		// implementations.
		m.pairs.set(ia, ib, i, im)
	}
	t.model = m
	return vocab, nil
}

// grow makes room for ids below n.
func (t *HF) grow(n int) {
	if n <= t.size {
		return
	}
	t.tokens = append(t.tokens, make([]string, n-t.size)...)
	t.has = append(t.has, make([]bool, n-t.size)...)
	t.added = append(t.added, make([]bool, n-t.size)...)
	t.size = n
}

func (t *HF) parseAdded(list []hfAdded, vocab map[string]int64) error {
	var raw, normd []addedToken
	for i, a := range list {
		field := fmt.Sprintf("added_tokens[%d]", i)
		switch {
		case a.ID == nil:
			return fmt.Errorf("%s: no id", field)
		case *a.ID < 0 || *a.ID > 1<<24:
			return fmt.Errorf("%s: id %d is out of range", field, *a.ID)
		case a.Content == "":
			return fmt.Errorf("%s: empty content", field)
		case a.SingleWord:
			return fmt.Errorf("%s (%q): single_word true is not supported", field, a.Content)
		}
		id := int32(*a.ID)
		if v, ok := vocab[a.Content]; ok && v != *a.ID {
			return fmt.Errorf("%s: %q has id %d, but the vocab gives it %d", field, a.Content, id, v)
		}
		t.grow(int(id) + 1)
		if t.has[id] && t.tokens[id] != a.Content {
			return fmt.Errorf("%s: id %d is %q, and already %q", field, id, a.Content, t.tokens[id])
		}
		t.tokens[id], t.has[id], t.added[id] = a.Content, true, true
		normalized := !a.Special // the default, as in the Rust library
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		at := addedToken{text: a.Content, id: id, lstrip: a.LStrip, rstrip: a.RStrip}
		t.strips = t.strips || a.LStrip || a.RStrip
		t.maxAdded = max(t.maxAdded, len(a.Content))
		if normalized && len(t.norm) > 0 {
			at.text = string(t.normalize([]byte(a.Content)))
			t.maxAdded = max(t.maxAdded, len(at.text))
			normd = append(normd, at)
		} else {
			raw = append(raw, at)
		}
	}
	t.rawAdded, t.normAdded = newAddedMatcher(raw), newAddedMatcher(normd)
	return nil
}

func parseDecoder(raw json.RawMessage) ([]hfDec, error) {
	c, err := parseComponent("decoder", raw)
	if err != nil || c == nil {
		return nil, err
	}
	var out []hfDec
	visit := func(typ string, c *component) (err error) {
		d := hfDec{kind: typ}
		switch typ {
		case "ByteLevel", "ByteFallback", "Fuse":
		case "Replace":
			s, regex, err := c.pattern()
			if err != nil {
				return err
			}
			if regex || s == "" {
				return c.errorf("a Replace decoder with a regular expression or an empty pattern is not supported")
			}
			d.pattern = s
			if d.with, err = c.str("content", ""); err != nil {
				return err
			}
		case "Strip":
			if d.strip, err = c.str("content", " "); err != nil {
				return err
			}
			if utf8.RuneCountInString(d.strip) != 1 {
				return c.errorf("content %q is not one character", d.strip)
			}
			if d.start, err = c.integer("start", 0); err != nil {
				return err
			}
			if d.stop, err = c.integer("stop", 0); err != nil {
				return err
			}
		case "Metaspace":
			if d.pattern, err = c.str("replacement", "▁"); err != nil {
				return err
			}
			scheme, err := metaspaceScheme(c)
			if err != nil {
				return err
			}
			d.stripFirstSpace = scheme != "never"
		default:
			return c.errorf("decoder type %q is not supported (fleet reads ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence)", typ)
		}
		out = append(out, d)
		return nil
	}
	return out, c.each("decoders", visit)
}

// parsePostProcessor reads the post-processor only for the BOS that its
// template puts first, used when tokenizer_config.json does not say.
func (t *HF) parsePostProcessor(raw json.RawMessage) error {
	c, err := parseComponent("post_processor", raw)
	if err != nil || c == nil {
		return err
	}
	visit := func(typ string, c *component) (err error) {
		switch typ {
		case "ByteLevel":
		case "TemplateProcessing":
			var single []struct {
				SpecialToken *struct{ ID string } `json:"SpecialToken"`
			}
			if err := json.Unmarshal(c.m["single"], &single); err != nil {
				return c.errorf("single is not a template: %v", err)
			}
			if len(single) > 0 && single[0].SpecialToken != nil {
				id, ok := t.id(single[0].SpecialToken.ID)
				if !ok {
					return c.errorf("single: %q is not a token", single[0].SpecialToken.ID)
				}
				t.bos, t.addBOS = id, true
			}
		default:
			return c.errorf("post-processor type %q is not supported (fleet reads ByteLevel, TemplateProcessing and Sequence)", typ)
		}
		return nil
	}
	return c.each("processors", visit)
}

// id returns the id of the token written s in the file.
func (t *HF) id(s string) (int32, bool) {
	for id, tok := range t.tokens {
		if t.has[id] && tok == s {
			return int32(id), true
		}
	}
	return -1, false
}

// readConfig reads tokenizer_config.json: bos_token, eos_token (a string
// or an object with "content") and add_bos_token.
func (t *HF) readConfig(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("empty file")
	}
	var c map[string]json.RawMessage
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("not a tokenizer_config.json: %w", err)
	}
	token := func(key string) (int32, bool, error) {
		raw, ok := c[key]
		if !ok || string(raw) == "null" {
			return -1, false, nil
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			var o struct{ Content *string }
			if json.Unmarshal(raw, &o) != nil || o.Content == nil {
				return -1, false, fmt.Errorf("%s is not a string or an object with \"content\"", key)
			}
			s = *o.Content
		}
		id, ok := t.id(s)
		if !ok {
			return -1, false, fmt.Errorf("%s %q is not a token of the tokenizer.json", key, s)
		}
		return id, true, nil
	}
	if id, ok, err := token("bos_token"); err != nil {
		return err
	} else if ok {
		t.bos = id
	}
	if id, ok, err := token("eos_token"); err != nil {
		return err
	} else if ok {
		t.eos = id
	}
	if raw, ok := c["add_bos_token"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &t.addBOS); err != nil {
			return fmt.Errorf("add_bos_token is not true or false")
		}
	}
	if t.addBOS && t.bos < 0 {
		return fmt.Errorf("add_bos_token is true, but there is no bos_token")
	}
	return nil
}

// Size returns the number of ids: the largest id + 1.
func (t *HF) Size() int { return t.size }

// EOT returns the id of the EOS token of tokenizer_config.json, which
// separates documents.
func (t *HF) EOT() (int32, bool) { return t.eos, t.eos >= 0 }

// BOS returns the id of the token that a sequence starts with, when the
// folder says to add one (add_bos_token in tokenizer_config.json, or a
// post-processor whose template starts with a special token). Encode
// never adds it; a caller that starts a sequence (a prompt) may.
func (t *HF) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// Spec returns "hf:PATH".
func (t *HF) Spec() string { return t.spec }

// Token returns id's token as tokenizer.json writes it, or "" and false.
func (t *HF) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= t.size || !t.has[id] {
		return "", false
	}
	return t.tokens[id], true
}

// normalize runs the normalizer on s.
func (t *HF) normalize(s []byte) []byte {
	for _, n := range t.norm {
		switch n.kind {
		case "Prepend":
			if len(s) > 0 {
				s = append([]byte(n.text), s...)
			}
		case "Replace":
			s = bytes.ReplaceAll(s, []byte(n.text), []byte(n.content))
		default:
			s = n.form.Bytes(s)
		}
	}
	return s
}

// Encode returns the ids of text. Added tokens in the text, special ones
// included, become their ids (as the reference implementations do by
// default); BOS and EOS are not added. Any bytes encode: with a
// byte-level model, bytes that are not valid UTF-8 are encoded as bytes
// (the reference implementations take only valid text); with byte
// fallback, as <0xNN> tokens.
func (t *HF) Encode(text string) ([]int32, error) {
	e := hfEncoder{t: t, out: make([]int32, 0, len(text)/3+1)}
	s := []byte(text)
	t.rawAdded.split(s, 0, func(piece []byte, off int, id int32) {
		if e.err != nil {
			return
		}
		if id >= 0 {
			e.out = append(e.out, id)
			return
		}
		e.section(piece, off == 0)
	})
	if e.err != nil {
		return nil, e.err
	}
	return e.out, nil
}

type hfEncoder struct {
	t   *HF
	out []int32
	err error
}

// section encodes a stretch of text between added tokens.
func (e *hfEncoder) section(s []byte, atStart bool) {
	t := e.t
	if len(t.norm) > 0 {
		s = t.normalize(s)
	}
	t.normAdded.split(s, 0, func(piece []byte, off int, id int32) {
		if e.err != nil {
			return
		}
		if id >= 0 {
			e.out = append(e.out, id)
			return
		}
		e.pre(0, piece, atStart && off == 0)
	})
}

// pre runs pre-tokenizer steps i... on piece, then the model.
func (e *hfEncoder) pre(i int, piece []byte, atStart bool) {
	if e.err != nil || len(piece) == 0 {
		return
	}
	t := e.t
	if i == len(t.pre) {
		e.out, e.err = t.model.encode(e.out, piece)
		return
	}
	switch p := &t.pre[i]; p.kind {
	case "split":
		for q := 0; q < len(piece); {
			end := p.pattern.match(piece, q)
			e.pre(i+1, piece[q:end], atStart && q == 0)
			q = end
		}
	case "digits":
		for q := 0; q < len(piece); {
			end := digitsEnd(piece, q, p.individual)
			e.pre(i+1, piece[q:end], atStart && q == 0)
			q = end
		}
	case "bytelevel":
		if p.prefixSpace && piece[0] != ' ' {
			piece = append([]byte{' '}, piece...)
		}
		if !p.useRegex {
			e.pre(i+1, piece, atStart)
			return
		}
		for q := 0; q < len(piece); {
			end := pretokenEnd(piece, q)
			e.pre(i+1, piece[q:end], atStart && q == 0)
			q = end
		}
	case "metaspace":
		piece = bytes.ReplaceAll(piece, []byte{' '}, []byte(p.repl))
		if !bytes.HasPrefix(piece, []byte(p.repl)) && (p.scheme == "always" || p.scheme == "first" && atStart) {
			piece = append([]byte(p.repl), piece...)
		}
		e.pre(i+1, piece, atStart)
	}
}

// Decode returns the text of ids through the file's decoder, without
// the reference implementations' clean-up of spaces before punctuation,
// so that decoding what Encode gave returns the text. Bytes that do not
// form valid UTF-8 (a token may hold part of a character) are kept as
// bytes, where the reference implementations write U+FFFD. Added tokens
// decode as their text; an id that is not a token decodes as U+FFFD.
func (t *HF) Decode(ids []int32) string {
	toks := make([]string, len(ids))
	added := make([]bool, len(ids))
	for i, id := range ids {
		if id < 0 || int(id) >= t.size || !t.has[id] {
			toks[i], added[i] = string(utf8.RuneError), true
			continue
		}
		toks[i], added[i] = t.tokens[id], t.added[id]
	}
	if len(t.dec) == 0 {
		return strings.Join(toks, " ") // as the reference implementations do
	}
	for _, d := range t.dec {
		toks, added = d.apply(toks, added)
	}
	return joinStrings(toks)
}

func joinStrings(s []string) string {
	n := 0
	for _, x := range s {
		n += len(x)
	}
	b := make([]byte, 0, n)
	for _, x := range s {
		b = append(b, x...)
	}
	return string(b)
}

// apply runs one decoder step; added marks the tokens that the ByteLevel
// step leaves as they are.
func (d *hfDec) apply(toks []string, added []bool) ([]string, []bool) {
	switch d.kind {
	case "ByteLevel":
		// The bytes that GPT-2's alphabet stands for; a token with a
		// character outside it (an added token) as its own text.
		var out []byte
		for i, tok := range toks {
			if !added[i] {
				if b, ok := unmapBytes(tok); ok {
					out = append(out, b...)
					continue
				}
			}
			out = append(out, tok...)
		}
		return []string{string(out)}, []bool{false}
	case "Replace":
		for i := range toks {
			toks[i] = replaceAll(toks[i], d.pattern, d.with)
		}
	case "ByteFallback":
		var out []string
		var outAdded []bool
		var pending []byte
		flush := func() {
			if len(pending) > 0 {
				out, outAdded = append(out, string(pending)), append(outAdded, false)
				pending = pending[:0]
			}
		}
		for i, tok := range toks {
			if b, ok := byteToken(tok); ok {
				pending = append(pending, b)
				continue
			}
			flush()
			out, outAdded = append(out, tok), append(outAdded, added[i])
		}
		flush()
		return out, outAdded
	case "Fuse":
		return []string{joinStrings(toks)}, []bool{false}
	case "Strip":
		for i, tok := range toks {
			for n := 0; n < d.start && len(tok) > 0; n++ {
				r, w := utf8.DecodeRuneInString(tok)
				if string(r) != d.strip {
					break
				}
				tok = tok[w:]
			}
			for n := 0; n < d.stop && len(tok) > 0; n++ {
				r, w := utf8.DecodeLastRuneInString(tok)
				if string(r) != d.strip {
					break
				}
				tok = tok[:len(tok)-w]
			}
			toks[i] = tok
		}
	case "Metaspace":
		for i := range toks {
			toks[i] = replaceAll(toks[i], d.pattern, " ")
			if i == 0 && d.stripFirstSpace && len(toks[i]) > 0 && toks[i][0] == ' ' {
				toks[i] = toks[i][1:]
			}
		}
	}
	return toks, added
}

func replaceAll(s, old, new string) string {
	if old == "" || !bytes.Contains([]byte(s), []byte(old)) {
		return s
	}
	return string(bytes.ReplaceAll([]byte(s), []byte(old), []byte(new)))
}

// byteToken parses a byte-fallback token, "<0xNN>".
func byteToken(tok string) (byte, bool) {
	if len(tok) != 6 || tok[:3] != "<0x" || tok[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(tok[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

// addedToken is an added token as matched: its text (normalized, for a
// normalized one), its id, and whether it takes the whitespace beside it.
type addedToken struct {
	text           string
	id             int32
	lstrip, rstrip bool
}

// addedMatcher finds added tokens in text: the leftmost match, and of
// those the longest, as the reference implementations do.
type addedMatcher struct {
	byFirst map[byte][]addedToken // longest first
	first   [256]bool
}

func newAddedMatcher(toks []addedToken) *addedMatcher {
	m := &addedMatcher{byFirst: make(map[byte][]addedToken)}
	for _, a := range toks {
		m.byFirst[a.text[0]] = append(m.byFirst[a.text[0]], a)
		m.first[a.text[0]] = true
	}
	for _, l := range m.byFirst {
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].text) > len(l[j].text) })
	}
	return m
}

// at returns the longest added token that s[p:] starts with.
func (m *addedMatcher) at(s []byte, p int) (addedToken, bool) {
	if !m.first[s[p]] {
		return addedToken{}, false
	}
	for _, a := range m.byFirst[s[p]] {
		if bytes.HasPrefix(s[p:], []byte(a.text)) {
			return a, true
		}
	}
	return addedToken{}, false
}

// split calls fn with the stretches of s between added tokens (id -1)
// and with each added token (its id), in order, with each one's offset
// in s. An added token with lstrip or rstrip takes the whitespace
// before or after it; empty stretches are left out.
func (m *addedMatcher) split(s []byte, base int, fn func(piece []byte, off int, id int32)) {
	if len(m.byFirst) == 0 {
		fn(s, base, -1)
		return
	}
	start := 0 // of the stretch not yet given to fn
	for p := 0; p < len(s); p++ {
		a, ok := m.at(s, p)
		if !ok {
			continue
		}
		end := p + len(a.text)
		q := p
		if a.lstrip {
			for q > start {
				r, w := utf8.DecodeLastRune(s[start:q])
				if !unicode.IsSpace(r) {
					break
				}
				q -= w
			}
		}
		if a.rstrip {
			for end < len(s) {
				r, w := utf8.DecodeRune(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
		}
		if q > start {
			fn(s[start:q], base+start, -1)
		}
		fn(s[q:end], base+q, a.id)
		start, p = end, end-1
	}
	if start < len(s) {
		fn(s[start:], base+start, -1)
	}
}

// planSplit works out where SplitPoint may cut, and whether the model
// may cut long words at its junctions.
func (t *HF) planSplit() {
	for _, n := range t.norm {
		switch n.kind {
		case "Prepend":
			t.noSplit = true // every stretch of text is prepended to
		case "Replace":
			if utf8.RuneCountInString(n.text) != 1 {
				t.noSplit = true // a pattern could span the cut
			}
		default:
			f := n.form
			t.normForm = &f
		}
	}
	// The pieces' boundary rules, all of which a cut must satisfy.
	var rules []func(prev, next rune) bool
	for _, p := range t.pre {
		switch p.kind {
		case "split":
			rules = append(rules, p.pattern.safe)
		case "bytelevel":
			t.needSpace = t.needSpace || p.prefixSpace
			if p.useRegex {
				rules = append(rules, safeBoundary)
			}
		case "metaspace":
			t.needSpace = t.needSpace || p.scheme != "never"
			t.spaceRepl = p.repl
		}
	}
	if len(rules) > 0 {
		t.safe = func(prev, next rune) bool {
			for _, r := range rules {
				if !r(prev, next) {
					return false
				}
			}
			return true
		}
		return
	}
	// No pre-tokenizer splits the text: BPE runs on whole stretches of
	// it, which can be cut where no token spans. Not when a merge takes
	// a byte-fallback or unknown token (which stand for characters that
	// no token holds), and not for a byte-level model.
	m := t.model
	if m.byteLevel {
		t.noSplit = true
		return
	}
	special := map[int32]bool{}
	if m.unk >= 0 {
		special[m.unk] = true
	}
	for _, id := range m.fallback {
		if id >= 0 {
			special[id] = true
		}
	}
	for k := range m.pairs {
		if special[int32(uint32(k>>32))] || special[int32(uint32(k))] {
			t.noSplit = true
			return
		}
	}
	m.buildJunctions()
}

// SplitPoint returns the length of the longest prefix of chunk that ends
// where encoding it and the rest apart gives the ids of encoding the
// whole, whatever follows, or 0 when there is none (see the package
// documentation). A tokenizer whose normalizer prepends to every text
// (Llama 2's "▁") has none: its documents are encoded whole.
func (t *HF) SplitPoint(chunk []byte) int { return t.splitPoint(chunk, 0) }

func (t *HF) splitPoint(chunk []byte, min int) int {
	if t.noSplit {
		return 0
	}
	min = max(min-t.maxAdded, 0) // a cut near the end may be allowed now
	for q := len(chunk) - 1; q > min; q-- {
		if !utf8.RuneStart(chunk[q]) {
			continue
		}
		pr, pw := utf8.DecodeLastRune(chunk[:q])
		nr, nw := utf8.DecodeRune(chunk[q:])
		if pr == utf8.RuneError && pw <= 1 || nr == utf8.RuneError && nw <= 1 {
			continue
		}
		if t.cutOK(chunk, q, pr, nr) {
			return q
		}
	}
	return 0
}

// cutOK reports whether chunk may be cut at q, between prev and next.
func (t *HF) cutOK(chunk []byte, q int, prev, next rune) bool {
	if t.needSpace && next != ' ' {
		return false
	}
	if t.strips && (unicode.IsSpace(prev) || unicode.IsSpace(next)) {
		return false
	}
	if t.normForm != nil && !(t.normForm.Properties(chunk[q:]).BoundaryBefore() &&
		t.normForm.Properties(chunk[q-utf8.RuneLen(prev):]).BoundaryAfter()) {
		return false
	}
	if t.safe != nil {
		if !t.safe(prev, next) {
			return false
		}
	} else {
		p, n := prev, next
		if t.spaceRepl != "" {
			r, _ := utf8.DecodeRuneInString(t.spaceRepl)
			if p == ' ' {
				p = r
			}
			if n == ' ' {
				n = r
			}
		}
		if _, ok := t.model.junction[uint64(p)<<32|uint64(n)]; ok {
			return false
		}
	}
	// No added token may span the cut. Near the end of the chunk, one
	// might, with bytes still to come.
	if t.maxAdded > 0 {
		if q+t.maxAdded > len(chunk) {
			return false
		}
		for p := max(q-t.maxAdded+1, 0); p < q; p++ {
			for _, m := range [2]*addedMatcher{t.rawAdded, t.normAdded} {
				for _, a := range m.byFirst[chunk[p]] {
					if p+len(a.text) > q && bytes.HasPrefix(chunk[p:], []byte(a.text)) {
						return false
					}
				}
			}
		}
	}
	return true
}
