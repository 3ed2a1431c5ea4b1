package tokenizer

import (
	"fmt"
	"os"
)

// TrainBPE trains a byte-level BPE of vocabSize ids on the files inputs,
// each a document. The vocabulary is the 256 bytes, vocabSize-257 merges
// and <|endoftext|> (the last id), so vocabSize must be 257 to MaxVocab.
// The result is a pure function of the inputs' bytes and vocabSize.
func TrainBPE(inputs []string, vocabSize int) (*BPE, error) {
	if err := checkVocabSize(vocabSize); err != nil {
		return nil, err
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("train bpe: no input files")
	}
	var c wordCounter
	for _, path := range inputs {
		if err := c.addFile(path); err != nil {
			return nil, fmt.Errorf("train bpe: %w", err)
		}
	}
	return c.train(vocabSize)
}

// addFile counts the words of a file, read in chunks.
func (c *wordCounter) addFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	n := int64(0)
	err = splitReader(f, splitPoint, func(text []byte, _ int64) error {
		c.add(text)
		n += int64(len(text))
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if n == 0 {
		return fmt.Errorf("%s is empty", path)
	}
	return nil
}

// TrainBPEText is TrainBPE on documents held in memory.
func TrainBPEText(vocabSize int, docs ...[]byte) (*BPE, error) {
	if err := checkVocabSize(vocabSize); err != nil {
		return nil, err
	}
	var c wordCounter
	for i, d := range docs {
		if len(d) == 0 {
			return nil, fmt.Errorf("train bpe: document %d is empty", i)
		}
		c.add(d)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("train bpe: no documents")
	}
	return c.train(vocabSize)
}

func checkVocabSize(n int) error {
	if n < 257 || n > MaxVocab {
		return fmt.Errorf("train bpe: vocab size %d is out of range: it must be 257 (the 256 bytes and <|endoftext|>) to %d (token ids are stored as uint16)", n, MaxVocab)
	}
	return nil
}

// wordCounter counts the distinct pre-tokens ("words") of the training
// text.
type wordCounter struct {
	index map[string]int32
	words []string
	count []int64
}

func (c *wordCounter) add(text []byte) {
	if c.index == nil {
		c.index = make(map[string]int32)
	}
	pretokenize(text, func(w []byte) {
		if i, ok := c.index[string(w)]; ok {
			c.count[i]++
			return
		}
		c.index[string(w)] = int32(len(c.words))
		c.words = append(c.words, string(w))
		c.count = append(c.count, 1)
	})
}

// trainKey is a pair's key while training: a<<16 | b (ids fit 16 bits,
// MaxVocab), half the size of the encoder's pairKey.
func trainKey(a, b int32) uint32 { return uint32(a)<<16 | uint32(b) }

// train runs BPE training: repeatedly merge the adjacent pair of tokens
// that occurs most often in the words (weighted by their counts; a pair
// that overlaps itself, as in "aaa", counts each time), breaking ties by
// the smaller first id, then the smaller second id. Pair counts are kept
// up to date incrementally: a merge only revisits the words that hold the
// merged pair, found through an index from each pair to its words.
func (c *wordCounter) train(vocabSize int) (*BPE, error) {
	nMerges := vocabSize - 257
	type word struct {
		syms []int32
		n    int64
	}
	words := make([]word, len(c.words))
	pairCount := make(map[uint32]int64)
	where := make(map[uint32][]int32) // words where the pair may occur
	for i, w := range c.words {
		syms := make([]int32, len(w))
		for j := range len(w) {
			syms[j] = int32(w[j])
		}
		words[i] = word{syms, c.count[i]}
		for j := 0; j+1 < len(syms); j++ {
			k := trainKey(syms[j], syms[j+1])
			pairCount[k] += c.count[i]
			if l := where[k]; len(l) == 0 || l[len(l)-1] != int32(i) {
				where[k] = append(l, int32(i))
			}
		}
	}
	h := make(countHeap, 0, len(pairCount))
	for k, n := range pairCount {
		h = append(h, countItem{n, k})
	}
	h.init()

	merges := make([][2]int32, 0, nMerges)
	seen := make([]int32, len(words)) // the merge that last visited each word, +1
	changed := make(map[uint32]bool)
	for len(merges) < nMerges {
		if len(h) == 0 {
			return nil, fmt.Errorf("train bpe: the text has no more pairs to merge after %d merges: a vocabulary of %d is the most it supports, not %d", len(merges), 257+len(merges), vocabSize)
		}
		top := h.pop()
		if n := pairCount[top.key]; n != top.n {
			if n > 0 {
				h.push(countItem{n, top.key})
			}
			continue
		}
		a, b := int32(top.key>>16), int32(top.key&0xffff)
		id := int32(256 + len(merges))
		merges = append(merges, [2]int32{a, b})
		stamp := int32(len(merges))
		clear(changed)
		for _, wi := range where[top.key] {
			if seen[wi] == stamp {
				continue
			}
			seen[wi] = stamp
			w := &words[wi]
			s := w.syms
			has := false
			for j := 0; j+1 < len(s); j++ {
				if s[j] == a && s[j+1] == b {
					has = true
					break
				}
			}
			if !has {
				continue
			}
			for j := 0; j+1 < len(s); j++ {
				k := trainKey(s[j], s[j+1])
				if pairCount[k] -= w.n; pairCount[k] == 0 {
					delete(pairCount, k)
				}
			}
			out := s[:0]
			for j := 0; j < len(s); j++ {
				if j+1 < len(s) && s[j] == a && s[j+1] == b {
					out = append(out, id)
					j++
				} else {
					out = append(out, s[j])
				}
			}
			w.syms = out
			for j := 0; j+1 < len(out); j++ {
				k := trainKey(out[j], out[j+1])
				pairCount[k] += w.n
				if out[j] == id || out[j+1] == id {
					changed[k] = true
					if l := where[k]; len(l) == 0 || l[len(l)-1] != wi {
						where[k] = append(l, wi)
					}
				}
			}
		}
		delete(where, top.key)
		for k := range changed {
			if n := pairCount[k]; n > 0 {
				h.push(countItem{n, k})
			}
		}
	}
	return newTrainedBPE(merges)
}

type countItem struct {
	n   int64
	key uint32
}

// countHeap is a max-heap of pairs by count, then by smaller key (first
// id, then second id).
type countHeap []countItem

func (h countHeap) less(i, j int) bool {
	return h[i].n > h[j].n || h[i].n == h[j].n && h[i].key < h[j].key
}

func (h countHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *countHeap) push(x countItem) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *countHeap) pop() countItem {
	s := *h
	x := s[0]
	s[0] = s[len(s)-1]
	*h = s[:len(s)-1]
	h.down(0)
	return x
}

func (h countHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
