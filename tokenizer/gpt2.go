package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"unicode/utf8"
)

// OpenGPT2 opens GPT-2's tokenizer from path: either a tiktoken rank file
// (r50k_base.tiktoken) or a folder holding GPT-2's encoder.json and
// vocab.bpe. Nothing is downloaded: the user supplies the files.
func OpenGPT2(path string) (*BPE, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("gpt2 tokenizer: %w", err)
	}
	var t *BPE
	if info.IsDir() {
		t, err = loadEncoderJSON(filepath.Join(path, "encoder.json"), filepath.Join(path, "vocab.bpe"))
	} else {
		var b []byte
		if b, err = os.ReadFile(path); err == nil {
			t, err = parseTiktoken(b)
		}
		if err != nil {
			err = fmt.Errorf("gpt2 tokenizer %s: %w", path, err)
		}
	}
	if err != nil {
		return nil, err
	}
	t.kind, t.spec = "gpt2", "gpt2:"+path
	return t, nil
}

// parseTiktoken reads a tiktoken rank file: one "BASE64 RANK" line per
// token, ranks 0 to n-1, each token's bytes distinct. The rank is the
// token's id, and <|endoftext|> is id n, as in GPT-2 (n = 50256). The
// merges are recovered from the ranks: the token of rank r is what BPE
// with the tokens of lower rank makes of its bytes, and must come out as
// two tokens, which are then its merge.
func parseTiktoken(b []byte) (*BPE, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	var tokens [][]byte
	index := make(map[string]int32)
	line := 0
	for len(b) > 0 {
		line++
		var l []byte
		l, b, _ = bytes.Cut(b, []byte{'\n'})
		l = bytes.TrimSuffix(l, []byte{'\r'})
		if len(l) == 0 {
			continue
		}
		tok64, rankText, ok := bytes.Cut(l, []byte{' '})
		if !ok || len(tok64) == 0 {
			return nil, fmt.Errorf("line %d: want \"BASE64 RANK\", got %q", line, clip(l))
		}
		tok, err := base64.StdEncoding.DecodeString(string(tok64))
		if err != nil {
			return nil, fmt.Errorf("line %d: bad base64 %q: %v", line, clip(tok64), err)
		}
		if len(tok) == 0 {
			return nil, fmt.Errorf("line %d: empty token", line)
		}
		rank, err := strconv.ParseUint(string(rankText), 10, 31)
		if err != nil {
			return nil, fmt.Errorf("line %d: bad rank %q", line, clip(rankText))
		}
		if rank >= MaxVocab {
			return nil, fmt.Errorf("line %d: rank %d makes the vocabulary larger than %d (token ids are stored as uint16)", line, rank, MaxVocab)
		}
		for int(rank) >= len(tokens) {
			tokens = append(tokens, nil)
		}
		if tokens[rank] != nil {
			return nil, fmt.Errorf("line %d: rank %d given twice (%q and %q)", line, rank, tokens[rank], tok)
		}
		if r, dup := index[string(tok)]; dup {
			return nil, fmt.Errorf("line %d: token %q given twice (ranks %d and %d)", line, tok, r, rank)
		}
		tokens[rank] = tok
		index[string(tok)] = int32(rank)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	for r, tok := range tokens {
		if tok == nil {
			return nil, fmt.Errorf("rank %d is missing (ranks go up to %d)", r, len(tokens)-1)
		}
	}
	if len(tokens)+1 > MaxVocab {
		return nil, fmt.Errorf("%d tokens and <|endoftext|> are more than %d (token ids are stored as uint16)", len(tokens), MaxVocab)
	}
	var byteID [256]int32
	for i := range byteID {
		id, ok := index[string([]byte{byte(i)})]
		if !ok {
			return nil, fmt.Errorf("byte %#02x has no token of its own", i)
		}
		byteID[i] = id
	}
	// Recover the merges in rank order. cut holds the offsets where the
	// parts of tok start, and len(tok) at the end.
	var merges []Merge
	var cut []int
	for r, tok := range tokens {
		if len(tok) == 1 {
			continue
		}
		cut = cut[:0]
		for i := 0; i <= len(tok); i++ {
			cut = append(cut, i)
		}
		for len(cut) > 3 {
			best, bi := int32(r), -1
			for i := 0; i+2 < len(cut); i++ {
				if pr, ok := index[string(tok[cut[i]:cut[i+2]])]; ok && pr < best {
					best, bi = pr, i
				}
			}
			if bi < 0 {
				break
			}
			cut = append(cut[:bi+1], cut[bi+2:]...)
		}
		if len(cut) != 3 {
			return nil, fmt.Errorf("token %q (rank %d) is not made by merging two tokens of lower rank: the ranks are not a BPE vocabulary", tok, r)
		}
		a, aok := index[string(tok[:cut[1]])]
		b, bok := index[string(tok[cut[1]:])]
		if !aok || !bok {
			return nil, fmt.Errorf("token %q (rank %d) is not made by merging two tokens of lower rank: the ranks are not a BPE vocabulary", tok, r)
		}
		merges = append(merges, Merge{A: a, B: b, ID: int32(r)})
	}
	eot := int32(len(tokens))
	tokens = append(tokens, []byte(EndOfText))
	t, err := newBPE("gpt2", tokens, byteID, merges, eot)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// clip shortens b for an error message.
func clip(b []byte) []byte {
	if len(b) > 40 {
		return append(b[:40:40], "..."...)
	}
	return b
}

// byteUnicode is GPT-2's bytes_to_unicode: the printable Latin-1
// characters stand for themselves, the other bytes for U+0100 onward, so
// that every token is a printable string in encoder.json and vocab.bpe.
var byteUnicode, unicodeByte = func() (enc [256]rune, dec map[rune]byte) {
	dec = make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if '!' <= b && b <= '~' || '¡' <= b && b <= '¬' || '®' <= b && b <= 'ÿ' {
			enc[b] = rune(b)
		} else {
			enc[b] = rune(256 + n)
			n++
		}
		dec[enc[b]] = byte(b)
	}
	return enc, dec
}()

// unmapBytes turns an encoder.json or vocab.bpe string back into bytes.
func unmapBytes(s string) ([]byte, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		b, ok := unicodeByte[r]
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// loadEncoderJSON reads GPT-2's encoder.json (token string -> id, bytes
// written as by bytes_to_unicode, "<|endoftext|>" the special token) and
// vocab.bpe (a "#version" line, then one merge "A B" per line in rank
// order).
func loadEncoderJSON(encPath, bpePath string) (*BPE, error) {
	eb, err := os.ReadFile(encPath)
	if err != nil {
		return nil, fmt.Errorf("gpt2 tokenizer: %w", err)
	}
	if len(bytes.TrimSpace(eb)) == 0 {
		return nil, fmt.Errorf("gpt2 tokenizer %s: empty file", encPath)
	}
	var enc map[string]int64
	if err := json.Unmarshal(eb, &enc); err != nil {
		return nil, fmt.Errorf("gpt2 tokenizer %s: %w", encPath, err)
	}
	if len(enc) == 0 {
		return nil, fmt.Errorf("gpt2 tokenizer %s: no tokens", encPath)
	}
	if len(enc) > MaxVocab {
		return nil, fmt.Errorf("gpt2 tokenizer %s: %d tokens are more than %d (token ids are stored as uint16)", encPath, len(enc), MaxVocab)
	}
	tokens := make([][]byte, len(enc))
	index := make(map[string]int32, len(enc))
	eot := int32(-1)
	for s, id := range enc {
		if id < 0 || id >= int64(len(enc)) {
			return nil, fmt.Errorf("gpt2 tokenizer %s: token %q has id %d, outside 0 to %d", encPath, s, id, len(enc)-1)
		}
		if tokens[id] != nil {
			return nil, fmt.Errorf("gpt2 tokenizer %s: id %d given twice", encPath, id)
		}
		if s == EndOfText {
			eot = int32(id)
			tokens[id] = []byte(EndOfText)
			continue
		}
		b, ok := unmapBytes(s)
		if !ok || len(b) == 0 {
			return nil, fmt.Errorf("gpt2 tokenizer %s: token %q (id %d) is not in GPT-2's byte alphabet", encPath, s, id)
		}
		tokens[id] = b
		index[string(b)] = int32(id)
	}
	var byteID [256]int32
	for i := range byteID {
		id, ok := index[string([]byte{byte(i)})]
		if !ok {
			return nil, fmt.Errorf("gpt2 tokenizer %s: byte %#02x (%q) has no token of its own", encPath, i, string(byteUnicode[i]))
		}
		byteID[i] = id
	}

	f, err := os.Open(bpePath)
	if err != nil {
		return nil, fmt.Errorf("gpt2 tokenizer: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var merges []Merge
	line := 0
	for sc.Scan() {
		line++
		l := bytes.TrimSuffix(sc.Bytes(), []byte{'\r'})
		if line == 1 && bytes.HasPrefix(l, []byte("#version")) || len(l) == 0 {
			continue
		}
		a, b, ok := bytes.Cut(l, []byte{' '})
		if !ok || len(a) == 0 || len(b) == 0 || bytes.IndexByte(b, ' ') >= 0 || !utf8.Valid(l) {
			return nil, fmt.Errorf("gpt2 tokenizer %s: line %d: want two tokens separated by a space, got %q", bpePath, line, clip(l))
		}
		ab, aok := unmapBytes(string(a))
		bb, bok := unmapBytes(string(b))
		if !aok || !bok {
			return nil, fmt.Errorf("gpt2 tokenizer %s: line %d: %q is not in GPT-2's byte alphabet", bpePath, line, clip(l))
		}
		ia, aok := index[string(ab)]
		ib, bok := index[string(bb)]
		im, mok := index[string(ab)+string(bb)]
		switch {
		case !aok:
			return nil, fmt.Errorf("gpt2 tokenizer %s: line %d: %q is not in %s", bpePath, line, a, filepath.Base(encPath))
		case !bok:
			return nil, fmt.Errorf("gpt2 tokenizer %s: line %d: %q is not in %s", bpePath, line, b, filepath.Base(encPath))
		case !mok:
			return nil, fmt.Errorf("gpt2 tokenizer %s: line %d: the merge %q is not in %s", bpePath, line, string(a)+string(b), filepath.Base(encPath))
		}
		merges = append(merges, Merge{A: ia, B: ib, ID: im})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("gpt2 tokenizer %s: %w", bpePath, err)
	}
	if line == 0 {
		return nil, fmt.Errorf("gpt2 tokenizer %s: empty file", bpePath)
	}
	t, err := newBPE("gpt2", tokens, byteID, merges, eot)
	if err != nil {
		return nil, fmt.Errorf("gpt2 tokenizer %s and %s: %w", encPath, filepath.Base(bpePath), err)
	}
	return t, nil
}
