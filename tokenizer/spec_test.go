package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/data"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		spec       string
		kind, path string
	}{
		{"char", "char", ""},
		{"char:tokenizer.json", "char", "tokenizer.json"},
		{"bpe:/a/b.json", "bpe", "/a/b.json"},
		{"gpt2:dir/", "gpt2", "dir/"},
		{"gpt2:C:\\vocab", "gpt2", "C:\\vocab"},
		{"none", "none", ""},
	} {
		s, err := ParseSpec(c.spec)
		if err != nil || s.Kind != c.kind || s.Path != c.path {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %s %q", c.spec, s, err, c.kind, c.path)
			continue
		}
		if s.String() != c.spec {
			t.Errorf("ParseSpec(%q).String() = %q", c.spec, s.String())
		}
	}
	for _, c := range []struct{ spec, want string }{
		{"", `unknown tokenizer ""`},
		{"char:", `"char:" needs a file`},
		{"bpe", `"bpe" needs a file`},
		{"none:5", `unknown tokenizer "none:5"`},
		{"sentencepiece:m.model", `unknown tokenizer "sentencepiece:m.model"`},
	} {
		if _, err := ParseSpec(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSpec(%q): error %v, want %q", c.spec, err, c.want)
		}
	}
}

func TestSpecPaths(t *testing.T) {
	dir := t.TempDir()
	s := Spec{Kind: "bpe", Path: "tok.json"}
	if got := s.In(dir).String(); got != "bpe:"+filepath.Join(dir, "tok.json") {
		t.Errorf("In = %s", got)
	}
	if got := s.In("").String(); got != "bpe:tok.json" {
		t.Errorf(`In("") = %s`, got)
	}
	abs := Spec{Kind: "gpt2", Path: filepath.Join(dir, "v")}
	if abs.In("elsewhere") != abs || abs.Abs() != abs {
		t.Errorf("an absolute path moved: %v %v", abs.In("elsewhere"), abs.Abs())
	}
	if (Spec{Kind: "char"}).In(dir).Abs() != (Spec{Kind: "char"}) {
		t.Errorf("a bare char gained a path")
	}
	t.Chdir(dir)
	if got := AbsSpec("bpe:tok.json"); got != "bpe:"+filepath.Join(dir, "tok.json") {
		t.Errorf("AbsSpec = %s", got)
	}
	for _, spec := range []string{"char", "none", "x:y", ""} {
		if got := AbsSpec(spec); got != spec {
			t.Errorf("AbsSpec(%q) = %q", spec, got)
		}
	}
}

// TestOpenPaths: a relative path is relative to Options.Dir (or the
// working directory), and what Open returns has the absolute spec.
func TestOpenPaths(t *testing.T) {
	dir := t.TempDir()
	bpe, err := TrainBPEText(265, []byte("the cat sat on the mat, the cat sat"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bpe.Save(filepath.Join(dir, "tok.json")); err != nil {
		t.Fatal(err)
	}
	if err := data.SaveChar(filepath.Join(dir, "chars.json"), data.NewChar("abc")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ spec, want string }{
		{"bpe:tok.json", "bpe:" + filepath.Join(dir, "tok.json")},
		{"char:chars.json", "char:" + filepath.Join(dir, "chars.json")},
	} {
		tok, err := Open(c.spec, Options{Dir: dir})
		if err != nil || tok.Spec() != c.want {
			t.Errorf("Open(%q) in %s: %v, spec %v", c.spec, dir, err, tok)
		}
	}
	if _, err := Open("bpe:tok.json", Options{}); err == nil || !strings.Contains(err.Error(), "tok.json: no such file") {
		t.Errorf("Open of a relative path outside its folder: %v", err)
	}
	t.Chdir(dir)
	tok, err := Open("bpe:tok.json", Options{})
	if err != nil || tok.Spec() != "bpe:"+filepath.Join(dir, "tok.json") {
		t.Errorf("Open of a relative path: %v, %v", tok, err)
	}
	if got, want := mustEncode(t, tok, []byte("the cat")), mustEncode(t, bpe, []byte("the cat")); firstDiff(got, want) != len(want) || len(got) != len(want) {
		t.Errorf("the opened BPE encodes %v, want %v", got, want)
	}
}

func TestOpenContext(t *testing.T) {
	built := data.NewChar("hello")
	tok, err := Open("char", Options{Chars: func() (*data.Char, error) { return built, nil }})
	if err != nil || tok != data.Tokenizer(built) {
		t.Errorf(`Open("char") with Chars: %v, %v`, tok, err)
	}
	if _, err := Open("char", Options{}); err == nil || !strings.Contains(err.Error(), `"char" needs a file`) {
		t.Errorf(`Open("char") without Chars: %v`, err)
	}
	tok, err = Open("none", Options{VocabSize: 7})
	if err != nil || tok != data.Tokenizer(Raw(7)) {
		t.Errorf(`Open("none"): %v, %v`, tok, err)
	}
}

func TestRaw(t *testing.T) {
	var tok data.Tokenizer = Raw(50)
	if _, err := tok.Encode("x"); err == nil || !strings.Contains(err.Error(), "raw token ids") {
		t.Errorf("Encode: %v", err)
	}
	if got := tok.Decode([]int32{3, 49, 0}); got != "3 49 0" {
		t.Errorf("Decode = %q", got)
	}
	if _, ok := tok.EOT(); ok || tok.Size() != 50 || tok.Spec() != "none" {
		t.Errorf("EOT %v, Size %d, Spec %q", ok, tok.Size(), tok.Spec())
	}
}

// TestRecord: a run's tokenizer.json is written as fleet always wrote it
// (older runs load), and opens the tokenizer again.
func TestRecord(t *testing.T) {
	dir := t.TempDir()
	bpe, err := TrainBPEText(265, []byte("the cat sat on the mat, the cat sat"))
	if err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "tok.json")
	if err := bpe.Save(tokFile); err != nil {
		t.Fatal(err)
	}
	chars := data.NewChar("hello world\n")
	for _, c := range []struct {
		name  string
		tok   data.Tokenizer
		vocab int
		file  string
	}{
		{"char", chars, 64, `{"type":"char","chars":"\n dehlorw"}` + "\n"},
		{"spec", bpe, 320, "{\n  \"type\": \"spec\",\n  \"spec\": \"bpe:" + tokFile + "\",\n  \"vocab_size\": 320\n}\n"},
		{"none", Raw(64), 64, "{\n  \"type\": \"none\",\n  \"vocab_size\": 64\n}\n"},
	} {
		path := filepath.Join(dir, c.name+".json")
		if err := SaveRecord(path, c.tok, c.vocab); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != c.file {
			t.Errorf("%s: wrote %q, want %q", c.name, b, c.file)
		}
		back, err := LoadRecord(path)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if back.Size() != c.tok.Size() || back.Decode([]int32{0, 1, 2}) != c.tok.Decode([]int32{0, 1, 2}) {
			t.Errorf("%s: loaded %T of %d ids, want %T of %d", c.name, back, back.Size(), c.tok, c.tok.Size())
		}
		if _, ok := back.(*data.Char); ok != (c.name == "char") {
			t.Errorf("%s: loaded a %T", c.name, back)
		}
	}
	unsaved, err := TrainBPEText(258, []byte("ab ab"))
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveRecord(filepath.Join(dir, "x.json"), unsaved, 258); err == nil {
		t.Errorf("a BPE that was never saved was recorded")
	}
	writeFile := func(name, text string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o644)
		return p
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.json"), "missing.json: no such file"},
		{writeFile("bad.json", "{"), "load tokenizer " + filepath.Join(dir, "bad.json")},
		{writeFile("other.json", `{"type":"sentencepiece"}`), `unknown type "sentencepiece"`},
		{writeFile("gone.json", `{"type":"spec","spec":"bpe:`+filepath.Join(dir, "gone")+`","vocab_size":9}`), "gone.json: the run's tokenizer: bpe tokenizer"},
	} {
		if _, err := LoadRecord(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadRecord(%s): %v, want %q", c.path, err, c.want)
		}
	}
}
