package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/tensor"
)

// withHeader rewrites the JSON header of a safetensors file with edit,
// keeping the data section.
func withHeader(t *testing.T, file []byte, edit func(h map[string]map[string]any)) []byte {
	t.Helper()
	n := binary.LittleEndian.Uint64(file)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(file[8:8+n], &raw); err != nil {
		t.Fatal(err)
	}
	h := map[string]map[string]any{}
	for k, v := range raw {
		var m map[string]any
		json.Unmarshal(v, &m)
		h[k] = m
	}
	edit(h)
	hb, _ := json.Marshal(h)
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(hb)))
	out = append(out, hb...)
	return append(out, file[8+n:]...)
}

// TestBadWeightFiles checks that each kind of bad weights file gives an
// error naming the file and, where there is one, the tensor.
func TestBadWeightFiles(t *testing.T) {
	good, err := os.ReadFile(hfTiny)
	if err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.Load(hfTiny)
	if err != nil {
		t.Fatal(err)
	}
	missing := &checkpoint.File{Tensors: map[string]checkpoint.Tensor{}}
	for k, v := range f.Tensors {
		if k != "h.1.mlp.c_fc.weight" {
			missing.Tensors[k] = v
		}
	}
	var missingBytes bytes.Buffer
	checkpoint.Encode(&missingBytes, missing)
	wrongLen := bytes.Clone(good)
	binary.LittleEndian.PutUint64(wrongLen, uint64(len(good)))
	dir := t.TempDir()
	cases := []struct {
		name  string
		data  []byte
		wants []string
	}{
		{"truncated", good[:len(good)-100], []string{"wte.weight", "run past the end"}},
		{"header length", wrongLen, []string{"header length", "runs past the end"}},
		{"offsets out of range", withHeader(t, good, func(h map[string]map[string]any) {
			h["wpe.weight"]["data_offsets"] = []int{0, 1 << 40}
		}), []string{"wpe.weight", "data_offsets"}},
		{"dtype mismatch", withHeader(t, good, func(h map[string]map[string]any) {
			h["wpe.weight"]["dtype"] = "I32"
		}), []string{"transformer.wpe.weight", "dtype I32"}},
		{"missing tensor", missingBytes.Bytes(), []string{"missing tensor transformer.h.1.mlp.c_fc.weight"}},
	}
	for _, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors")
		if err := os.WriteFile(path, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadGPT2(path, 2, tensor.CPU)
		if err == nil {
			t.Errorf("%s: loaded", c.name)
			continue
		}
		for _, w := range append(c.wants, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
	}
	// A shape that does not match the config.
	m, _ := New(Config{VocabSize: 50, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 32, Bias: true}, tensor.CPU, 1)
	err = m.LoadWeights(hfTiny)
	for _, w := range []string{hfTiny, "transformer.wpe.weight", "[16 32]", "[8 32]"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("shape mismatch: error %v does not mention %q", err, w)
		}
	}
}
