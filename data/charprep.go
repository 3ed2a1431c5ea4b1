package data

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"unicode/utf8"
)

// CharVocab builds the character tokenizer of the inputs (files and
// folders, as Prepare reads them) by streaming through them once: the
// vocabulary is the sorted distinct characters, as NewChar makes it from
// the concatenated text. Progress, if set, is called with the bytes read
// and the total.
func CharVocab(inputs []string, progress func(done, total int64)) (*Char, error) {
	docs, total, err := listInputs(inputs)
	if err != nil {
		return nil, fmt.Errorf("char vocabulary: %w", err)
	}
	var ascii [utf8.RuneSelf]bool
	other := map[rune]bool{}
	buf := make([]byte, 1<<20)
	var done int64
	for _, d := range docs {
		f, err := os.Open(d.path)
		if err != nil {
			return nil, fmt.Errorf("char vocabulary: input %s: %w", d.path, unwrapPath(err))
		}
		carry := 0
		for {
			n, err := io.ReadFull(f, buf[carry:])
			eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
			if err != nil && !eof {
				f.Close()
				return nil, fmt.Errorf("char vocabulary: input %s: %w", d.path, err)
			}
			b := buf[:carry+n]
			q := len(b)
			if !eof {
				q = UTF8Boundary(b)
			}
			for i := 0; i < q; {
				if c := b[i]; c < utf8.RuneSelf {
					ascii[c] = true
					i++
					continue
				}
				r, w := utf8.DecodeRune(b[i:q])
				other[r] = true
				i += w
			}
			carry = copy(buf, b[q:])
			done += int64(n)
			if progress != nil {
				progress(done, total)
			}
			if eof {
				break
			}
		}
		f.Close()
	}
	var chars []rune
	for c, ok := range ascii {
		if ok {
			chars = append(chars, rune(c))
		}
	}
	for r := range other {
		chars = append(chars, r)
	}
	slices.Sort(chars)
	return newCharFrom(chars), nil
}
