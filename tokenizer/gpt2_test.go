package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The GPT-2 tests need GPT-2's vocabulary, which is not in the repository:
// FLEET_GPT2_VOCAB names r50k_base.tiktoken or a folder with encoder.json
// and vocab.bpe, or several of these separated by the path list separator
// (":"), and each is tested. .ci/run points it at the tiktoken file of a
// Go module.
const vocabEnv = "FLEET_GPT2_VOCAB"

// r50kSHA256 is the SHA-256 of OpenAI's r50k_base.tiktoken.
const r50kSHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"

var gpt2Cache struct {
	sync.Mutex
	m map[string]*BPE
}

// gpt2Vocabs returns GPT-2 opened from each path in FLEET_GPT2_VOCAB, or
// skips.
func gpt2Vocabs(tb testing.TB) []*BPE {
	tb.Helper()
	env := os.Getenv(vocabEnv)
	if env == "" {
		tb.Skipf("%s is not set: it names GPT-2's vocabulary (r50k_base.tiktoken, or a folder with encoder.json and vocab.bpe), which is not in the repository", vocabEnv)
	}
	gpt2Cache.Lock()
	defer gpt2Cache.Unlock()
	if gpt2Cache.m == nil {
		gpt2Cache.m = make(map[string]*BPE)
	}
	var out []*BPE
	for _, p := range filepath.SplitList(env) {
		if p == "" {
			continue
		}
		t, ok := gpt2Cache.m[p]
		if !ok {
			var err error
			if t, err = OpenGPT2(p); err != nil {
				tb.Fatalf("%s: %v", vocabEnv, err)
			}
			gpt2Cache.m[p] = t
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		tb.Skipf("%s names no path", vocabEnv)
	}
	return out
}

func readIDs(tb testing.TB, path string) []int32 {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var ids []int32
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		ids = append(ids, int32(n))
	}
	return ids
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestGPT2Fixtures holds the encoder to the ids of independent references
// (GPT-2's encoder.py algorithm with Python's regex, and tiktoken), made by
// scripts/gpt2_fixture.sh.
func TestGPT2Fixtures(t *testing.T) {
	sample, err := os.ReadFile("../testdata/gpt2_sample.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := readIDs(t, "../testdata/gpt2_sample_ids.txt")
	cb, err := os.ReadFile("../testdata/gpt2_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	}
	if err := json.Unmarshal(cb, &cases); err != nil {
		t.Fatal(err)
	}
	for _, g := range gpt2Vocabs(t) {
		t.Run(filepath.Base(strings.TrimPrefix(g.Spec(), "gpt2:")), func(t *testing.T) {
			got := g.encode(sample)
			if i := firstDiff(got, want); i < len(got) || len(got) != len(want) {
				t.Errorf("sample: %d ids, want %d; first difference at id %d: got %v, want %v",
					len(got), len(want), i, got[i:min(i+8, len(got))], want[i:min(i+8, len(want))])
			}
			for _, c := range cases {
				got := g.encode([]byte(c.Text))
				if firstDiff(got, c.IDs) != len(got) || len(got) != len(c.IDs) {
					t.Errorf("Encode(%q) = %v, want %v", c.Text, got, c.IDs)
				}
			}
			if back := g.Decode(want); back != string(sample) {
				t.Errorf("Decode(sample ids) does not give the sample back")
			}
		})
	}
}

func TestGPT2Vocab(t *testing.T) {
	gs := gpt2Vocabs(t)
	for _, g := range gs {
		if g.Size() != 50257 {
			t.Errorf("%s: Size %d, want 50257", g.Spec(), g.Size())
		}
		if id, ok := g.EOT(); !ok || id != 50256 {
			t.Errorf("%s: EOT %d %v, want 50256", g.Spec(), id, ok)
		}
		if got := g.encode([]byte("Hello world")); len(got) != 2 || got[0] != 15496 || got[1] != 995 {
			t.Errorf("%s: Hello world = %v, want [15496 995]", g.Spec(), got)
		}
		if b := g.Decode([]int32{50256}); b != EndOfText {
			t.Errorf("%s: Decode(50256) = %q", g.Spec(), b)
		}
		if b := g.Decode([]int32{50257}); b != "\uFFFD" {
			t.Errorf("%s: Decode(50257) = %q, want U+FFFD", g.Spec(), b)
		}
		if p := strings.TrimPrefix(g.Spec(), "gpt2:"); !isDir(p) {
			b, err := os.ReadFile(p)
			if err == nil {
				sum := sha256.Sum256(b)
				if hex.EncodeToString(sum[:]) != r50kSHA256 {
					t.Logf("%s is not OpenAI's r50k_base.tiktoken (SHA-256 differs)", p)
				}
			}
		}
	}
	// Both forms of the vocabulary give the same merges: the merges
	// recovered from the tiktoken ranks are vocab.bpe's.
	for _, g := range gs[1:] {
		a, b := gs[0].Merges(), g.Merges()
		if len(a) != len(b) {
			t.Fatalf("%s has %d merges, %s %d", gs[0].Spec(), len(a), g.Spec(), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("merge %d: %s has %v, %s %v", i, gs[0].Spec(), a[i], g.Spec(), b[i])
			}
		}
	}
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// tinyShakespeare returns the tinyshakespeare text from shared/data
// beside the repository, or skips.
func tinyShakespeare(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile("../../shared/data/tinyshakespeare.txt")
	if err != nil {
		tb.Skipf("tinyshakespeare: %v", err)
	}
	return b
}

// nanoGPT's shakespeare recipe reports 338,025 GPT-2 tokens (301,966 +
// 36,059) for tinyshakespeare.
func TestGPT2TinyShakespeare(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	for _, g := range gpt2Vocabs(t) {
		text := tinyShakespeare(t)
		ids := g.encode(text)
		if len(ids) != 338025 {
			t.Errorf("%s: %d tokens, want 338025", g.Spec(), len(ids))
		}
		var streamed []int32
		err := EncodeReader(g, &chunkReader{b: text, sizes: []int{1 << 16, 7, 300000}}, func(part []int32) error {
			streamed = append(streamed, part...)
			return nil
		})
		if err != nil || firstDiff(streamed, ids) != len(ids) || len(streamed) != len(ids) {
			t.Errorf("%s: EncodeReader differs from Encode (err %v)", g.Spec(), err)
		}
	}
}

func FuzzGPT2RoundTrip(f *testing.F) {
	f.Add([]byte("Hello, world! It's 2024.\r\n\t\u00a0\u3000\u0085\v  end  "))
	f.Add([]byte("\xff\xfe\xc3 invalid"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, g := range gpt2Vocabs(t) {
			ids := g.encode(b)
			if back := g.Decode(ids); back != string(b) {
				t.Fatalf("%s: round trip of %q gives %q", g.Spec(), b, back)
			}
		}
	})
}

// BenchmarkGPT2Encode is GPT-2 encode throughput on tinyshakespeare.
func BenchmarkGPT2Encode(b *testing.B) {
	g := gpt2Vocabs(b)[0]
	text := tinyShakespeare(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		g.encode(text)
	}
}

// BenchmarkGPT2EncodeCold encodes with an empty pre-token cache each time.
func BenchmarkGPT2EncodeCold(b *testing.B) {
	g := gpt2Vocabs(b)[0]
	text := tinyShakespeare(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		c := &wordCache{m: make(map[string][]int32)}
		var out []int32
		for p := 0; p < len(text); {
			e := pretokenEnd(text, p)
			out = g.encodeWord(c, out, text[p:e])
			p = e
		}
	}
}

// BenchmarkGPT2Open is loading the vocabulary.
func BenchmarkGPT2Open(b *testing.B) {
	p := strings.TrimPrefix(gpt2Vocabs(b)[0].Spec(), "gpt2:")
	for b.Loop() {
		if _, err := OpenGPT2(p); err != nil {
			b.Fatal(err)
		}
	}
}
