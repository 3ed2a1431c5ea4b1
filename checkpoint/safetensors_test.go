package checkpoint

import (
	"bytes"
	"encoding/binary"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// raw builds a file from a header string and data bytes, without padding.
func raw(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func encode(t testing.TB, f *File) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Encode(&buf, f); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return buf.Bytes()
}

// sameFile compares files, treating nil and empty Shape/Data as equal but
// keeping the nil/empty distinction for Metadata.
func sameFile(a, b *File) bool {
	if !reflect.DeepEqual(a.Metadata, b.Metadata) || !slices.Equal(a.Names(), b.Names()) {
		return false
	}
	for name, x := range a.Tensors {
		y := b.Tensors[name]
		if x.DType != y.DType || !slices.Equal(x.Shape, y.Shape) || !bytes.Equal(x.Data, y.Data) {
			return false
		}
	}
	return true
}

func sample() *File {
	return &File{
		Metadata: map[string]string{"format": "pt", "step": "100", "note": `<a & "b">`},
		Tensors: map[string]Tensor{
			"w":      F32Tensor([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}),
			"ids":    I32Tensor([]int{4}, []int32{-1, 0, 1, math.MaxInt32}),
			"scalar": F32Tensor([]int{}, []float32{3.5}),
			"empty":  F32Tensor([]int{0, 3}, nil),
			"f64":    {F64, []int{1}, binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.Pi))},
			"f16":    {F16, []int{2}, []byte{0x00, 0x3c, 0x00, 0xc0}},
			"bf16":   {BF16, []int{1, 1}, []byte{0x80, 0x3f}},
			"i64":    {I64, []int{1}, binary.LittleEndian.AppendUint64(nil, 1<<40)},
			"u16":    {U16, []int{3}, []byte{1, 0, 2, 0, 0xff, 0xff}},
			"u8":     {U8, []int{2, 2, 1}, []byte{1, 2, 3, 4}},
		},
	}
}

func TestRoundTrip(t *testing.T) {
	files := map[string]*File{
		"sample":         sample(),
		"empty metadata": {Metadata: map[string]string{}, Tensors: map[string]Tensor{"x": I32Tensor(nil, []int32{7})}},
		"no metadata":    {Tensors: map[string]Tensor{"x": {U8, []int{3}, []byte{1, 2, 3}}}},
		"no tensors":     {},
	}
	for name, f := range files {
		t.Run(name, func(t *testing.T) {
			b := encode(t, f)
			if hl := binary.LittleEndian.Uint64(b); hl%8 != 0 {
				t.Errorf("header length %d is not a multiple of 8", hl)
			}
			g, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !sameFile(f, g) {
				t.Fatalf("round trip mismatch:\n got %+v\nwant %+v", g, f)
			}
			if b2 := encode(t, g); !bytes.Equal(b, b2) {
				t.Fatal("re-encoding is not byte-identical")
			}
			path := filepath.Join(t.TempDir(), "m.safetensors")
			if err := Save(path, f); err != nil {
				t.Fatalf("Save: %v", err)
			}
			h, err := Load(path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !sameFile(f, h) {
				t.Fatal("Save/Load mismatch")
			}
		})
	}
	// Empty non-nil metadata survives as {}; nil metadata is omitted.
	if b := encode(t, files["empty metadata"]); !bytes.Contains(b, []byte(`"__metadata__":{}`)) {
		t.Errorf("empty metadata not written as {}: %q", b)
	}
	if b := encode(t, files["no tensors"]); !bytes.Equal(b, raw("{}      ", nil)) {
		t.Errorf("empty file = %q", b)
	}
}

// TestExactBytes pins the format against a hand-computed file.
func TestExactBytes(t *testing.T) {
	f := &File{
		Metadata: map[string]string{"format": "pytorch"},
		Tensors: map[string]Tensor{
			"b": {U8, []int{}, []byte{7}},
			"a": F32Tensor([]int{2}, []float32{1, -2}),
		},
	}
	header := `{"__metadata__":{"format":"pytorch"},` + // 37 bytes
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` + // 53
		`"b":{"dtype":"U8","shape":[],"data_offsets":[8,9]}}` + // 51
		`   ` // padding: 141 -> 144
	want := []byte{144, 0, 0, 0, 0, 0, 0, 0}
	want = append(want, header...)
	want = append(want,
		0x00, 0x00, 0x80, 0x3f, // a[0] = 1.0
		0x00, 0x00, 0x00, 0xc0, // a[1] = -2.0
		0x07, // b = 7
	)
	got := encode(t, f)
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode:\n got %q\nwant %q", got, want)
	}
	g, err := Decode(want)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFile(f, g) {
		t.Fatalf("Decode = %+v", g)
	}
	if a, _ := g.Tensors["a"].Float32s(); !slices.Equal(a, []float32{1, -2}) {
		t.Errorf("a = %v", a)
	}
}

func TestDecodeErrors(t *testing.T) {
	f32 := func(name, offs string) string {
		return `"` + name + `":{"dtype":"F32","shape":[2],"data_offsets":` + offs + `}`
	}
	d8, d12, d16 := make([]byte, 8), make([]byte, 12), make([]byte, 16)
	tests := []struct {
		name string
		data []byte
		want []string // substrings of the error
	}{
		{"short", []byte{1, 2, 3}, []string{"shorter than"}},
		{"header too large", binary.LittleEndian.AppendUint64(nil, 100_000_001), []string{"exceeds"}},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), []string{"header length 100 runs past the end"}},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, math.MaxUint64), []string{"exceeds"}},
		{"empty header", raw("", nil), []string{"not valid JSON"}},
		{"bad json", raw(`{"a":`, nil), []string{"not valid JSON"}},
		{"trailing junk", raw(`{} x`, nil), []string{"not valid JSON"}},
		{"not object", raw(`[1,2]`, nil), []string{"not a JSON object"}},
		{"bad utf8", raw("{\"\xff\":1}", nil), []string{"UTF-8"}},
		{"duplicate", raw(`{`+f32("a", "[0,8]")+`,`+f32("a", "[0,8]")+`}`, d8), []string{"duplicate", `"a"`}},
		{"entry not object", raw(`{"a":5}`, nil), []string{`tensor "a"`, "not a JSON object"}},
		{"entry null", raw(`{"a":null}`, nil), []string{`tensor "a"`, "not a JSON object"}},
		{"missing dtype", raw(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, d8[:4]), []string{`tensor "a"`, "missing dtype"}},
		{"missing shape", raw(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, d8[:4]), []string{`tensor "a"`, "missing shape"}},
		{"null shape", raw(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, d8[:4]), []string{`tensor "a"`, "missing shape"}},
		{"missing offsets", raw(`{"a":{"dtype":"F32","shape":[1]}}`, d8[:4]), []string{`tensor "a"`, "missing data_offsets"}},
		{"dtype not string", raw(`{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, d8[:4]), []string{`tensor "a"`, "bad dtype"}},
		{"unknown dtype", raw(`{"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}}`, d8[:1]), []string{`tensor "a"`, `unknown dtype "F8"`}},
		{"negative dim", raw(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, nil), []string{`tensor "a"`, "negative dimension"}},
		{"fractional dim", raw(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, d8[:1]), []string{`tensor "a"`, "bad shape"}},
		{"string dim", raw(`{"a":{"dtype":"U8","shape":["1"],"data_offsets":[0,1]}}`, d8[:1]), []string{`tensor "a"`, "bad shape"}},
		{"null dim", raw(`{"a":{"dtype":"U8","shape":[null],"data_offsets":[0,0]}}`, nil), []string{`tensor "a"`, "bad shape"}},
		{"numel overflow", raw(`{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, nil), []string{`tensor "a"`, "too large"}},
		{"bytes overflow", raw(`{"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}}`, nil), []string{`tensor "a"`, "too large"}},
		{"one offset", raw(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0]}}`, d8[:1]), []string{`tensor "a"`, "must be [begin, end]"}},
		{"negative offset", raw(`{"a":{"dtype":"U8","shape":[],"data_offsets":[-1,0]}}`, d8[:1]), []string{`tensor "a"`, "begin <= end"}},
		{"begin after end", raw(`{`+f32("a", "[8,0]")+`}`, d8), []string{`tensor "a"`, "begin <= end"}},
		{"end past data", raw(`{`+f32("a", "[4,12]")+`}`, d8), []string{`tensor "a"`, "past the end of the 8-byte data section"}},
		{"size mismatch", raw(`{`+f32("a", "[0,4]")+`}`, d8[:4]), []string{`tensor "a"`, "span 4 bytes", "needs 8"}},
		{"overlap", raw(`{`+f32("a", "[0,8]")+`,`+f32("b", "[4,12]")+`}`, d12), []string{`"b"`, `overlaps tensor "a"`}},
		{"same range", raw(`{`+f32("a", "[0,8]")+`,`+f32("b", "[0,8]")+`}`, d8), []string{`tensor "b"`, `overlaps tensor "a"`}},
		{"gap", raw(`{`+f32("a", "[0,8]")+`,`+f32("b", "[12,20]")+`}`, make([]byte, 20)), []string{"gap of 4", `tensor "b"`}},
		{"leading gap", raw(`{`+f32("a", "[8,16]")+`}`, d16), []string{"gap of 8", "offset 0", `tensor "a"`}},
		{"left over", raw(`{`+f32("a", "[0,8]")+`}`, d12), []string{"4 unused bytes at the end"}},
		{"data without tensors", raw(`{}`, d8), []string{"8 unused bytes"}},
		{"metadata not object", raw(`{"__metadata__":[1]}`, nil), []string{"__metadata__", "not a JSON object"}},
		{"metadata number", raw(`{"__metadata__":{"k":1}}`, nil), []string{"__metadata__", `"k"`, "not a string"}},
		{"metadata null value", raw(`{"__metadata__":{"k":null}}`, nil), []string{`"k"`, "not a string"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode(tc.data)
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", f)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	// Zero-size tensors may sit anywhere in the tiling, unknown entry fields
	// are ignored, and a null __metadata__ means none.
	f, err := Decode(raw(`{"__metadata__":null,"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},`+
		`"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":true},`+
		`"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}`, make([]byte, 6)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata != nil || !slices.Equal(f.Names(), []string{"a", "b", "z"}) {
		t.Fatalf("got %+v", f)
	}
	// Data is capacity-limited: appending to one tensor cannot clobber the next.
	a := f.Tensors["a"]
	_ = append(a.Data, 9)
	if f.Tensors["b"].Data[0] != 0 {
		t.Error("append to a.Data clobbered b.Data")
	}
}

func TestLoadError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.safetensors")
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), "load "+path+": ") {
		t.Errorf("Load missing file: %v", err)
	}
	if err := Save(path, &File{Tensors: map[string]Tensor{"x": {U8, []int{1}, []byte{1}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(path, "x")); err == nil {
		t.Error("Load of bad path succeeded")
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := map[string]*File{
		"nil file":      nil,
		"short data":    {Tensors: map[string]Tensor{"x": {F32, []int{2}, make([]byte, 4)}}},
		"unknown dtype": {Tensors: map[string]Tensor{"x": {"Q4", []int{1}, []byte{1}}}},
		"negative dim":  {Tensors: map[string]Tensor{"x": {U8, []int{-1}, nil}}},
		"reserved name": {Tensors: map[string]Tensor{"__metadata__": {U8, nil, []byte{1}}}},
		"bad utf8 name": {Tensors: map[string]Tensor{"\xff": {U8, nil, []byte{1}}}},
		"bad utf8 meta": {Metadata: map[string]string{"k": "\xff"}},
	}
	for name, f := range tests {
		var buf bytes.Buffer
		if err := Encode(&buf, f); err == nil {
			t.Errorf("%s: Encode succeeded", name)
		} else if buf.Len() != 0 {
			t.Errorf("%s: Encode wrote %d bytes before failing", name, buf.Len())
		}
	}
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := Save(path, tests["short data"]); err == nil {
		t.Error("Save of invalid file succeeded")
	}
	if _, err := Load(path); err == nil {
		t.Error("failed Save left a file behind")
	}
}

func TestHalfFloats(t *testing.T) {
	pow2 := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	inf := float32(math.Inf(1))
	tests := []struct {
		dtype DType
		bits  uint16
		want  float32
	}{
		{BF16, 0x3f80, 1},
		{BF16, 0xc000, -2},
		{BF16, 0x3fc0, 1.5},
		{BF16, 0x0000, 0},
		{BF16, 0x7f80, inf},
		{BF16, 0xff80, -inf},
		{BF16, 0x0001, pow2(-133)}, // smallest bf16 subnormal
		{F16, 0x3c00, 1},
		{F16, 0xc000, -2},
		{F16, 0x3555, 0.333251953125},
		{F16, 0x7bff, 65504}, // largest finite
		{F16, 0x0400, pow2(-14)},
		{F16, 0x0001, pow2(-24)}, // smallest subnormal
		{F16, 0x03ff, 1023 * pow2(-24)},
		{F16, 0x8001, -pow2(-24)},
		{F16, 0x7c00, inf},
		{F16, 0xfc00, -inf},
		{F16, 0x0000, 0},
	}
	for _, tc := range tests {
		tn := Tensor{tc.dtype, []int{1}, binary.LittleEndian.AppendUint16(nil, tc.bits)}
		f32, err := tn.Float32s()
		if err != nil || f32[0] != tc.want {
			t.Errorf("%s %#04x: Float32s = %v, %v; want %v", tc.dtype, tc.bits, f32, err, tc.want)
		}
		f64, err := tn.Float64s()
		if err != nil || f64[0] != float64(tc.want) {
			t.Errorf("%s %#04x: Float64s = %v, %v; want %v", tc.dtype, tc.bits, f64, err, tc.want)
		}
	}
	for _, tc := range []struct {
		dtype DType
		bits  uint16
	}{{F16, 0x8000}, {BF16, 0x8000}} {
		v, _ := Tensor{tc.dtype, nil, binary.LittleEndian.AppendUint16(nil, tc.bits)}.Float32s()
		if v[0] != 0 || !math.Signbit(float64(v[0])) {
			t.Errorf("%s %#04x = %v, want -0", tc.dtype, tc.bits, v[0])
		}
	}
	for _, bits := range []uint16{0x7e00, 0x7c01, 0xfe00} {
		v, _ := Tensor{F16, nil, binary.LittleEndian.AppendUint16(nil, bits)}.Float32s()
		if !math.IsNaN(float64(v[0])) {
			t.Errorf("F16 %#04x = %v, want NaN", bits, v[0])
		}
	}
}

func TestConversions(t *testing.T) {
	f := sample()
	if v, err := f.Tensors["w"].Float64s(); err != nil || !slices.Equal(v, []float64{1, 2, 3, 4, 5, 6}) {
		t.Errorf("w Float64s = %v, %v", v, err)
	}
	if v, err := f.Tensors["f64"].Float64s(); err != nil || v[0] != math.Pi {
		t.Errorf("f64 Float64s = %v, %v", v, err)
	}
	if v, err := f.Tensors["f64"].Float32s(); err != nil || v[0] != float32(math.Pi) {
		t.Errorf("f64 Float32s = %v, %v", v, err)
	}
	if v, err := f.Tensors["ids"].Int32s(); err != nil || !slices.Equal(v, []int32{-1, 0, 1, math.MaxInt32}) {
		t.Errorf("ids Int32s = %v, %v", v, err)
	}
	if v, err := f.Tensors["u16"].Int32s(); err != nil || !slices.Equal(v, []int32{1, 2, 65535}) {
		t.Errorf("u16 Int32s = %v, %v", v, err)
	}
	if v, err := f.Tensors["u8"].Int32s(); err != nil || !slices.Equal(v, []int32{1, 2, 3, 4}) {
		t.Errorf("u8 Int32s = %v, %v", v, err)
	}
	if v, err := f.Tensors["empty"].Float32s(); err != nil || len(v) != 0 {
		t.Errorf("empty Float32s = %v, %v", v, err)
	}
	var i64 []byte
	for _, v := range []int64{math.MinInt32, 5, math.MaxInt32} {
		i64 = binary.LittleEndian.AppendUint64(i64, uint64(v))
	}
	if v, err := (Tensor{I64, []int{3}, i64}).Int32s(); err != nil || !slices.Equal(v, []int32{math.MinInt32, 5, math.MaxInt32}) {
		t.Errorf("I64 Int32s = %v, %v", v, err)
	}
	if _, err := f.Tensors["i64"].Int32s(); err == nil || !strings.Contains(err.Error(), "out of int32 range") {
		t.Errorf("out-of-range I64: %v", err)
	}
	for _, bad := range []struct {
		name string
		fn   func() error
	}{
		{"Float32s on I32", func() error { _, err := f.Tensors["ids"].Float32s(); return err }},
		{"Float64s on U8", func() error { _, err := f.Tensors["u8"].Float64s(); return err }},
		{"Int32s on F32", func() error { _, err := f.Tensors["w"].Int32s(); return err }},
		{"Float32s short data", func() error { _, err := Tensor{F32, []int{2}, make([]byte, 7)}.Float32s(); return err }},
		{"Float64s short data", func() error { _, err := Tensor{F64, []int{2}, make([]byte, 8)}.Float64s(); return err }},
		{"Int32s unknown dtype", func() error { _, err := Tensor{"X", nil, nil}.Int32s(); return err }},
	} {
		if bad.fn() == nil {
			t.Errorf("%s: no error", bad.name)
		}
	}
}

func TestConstructorsPanic(t *testing.T) {
	for name, fn := range map[string]func(){
		"F32 too few":    func() { F32Tensor([]int{2, 2}, []float32{1, 2, 3}) },
		"F32 scalar":     func() { F32Tensor(nil, nil) },
		"I32 too many":   func() { I32Tensor([]int{1}, []int32{1, 2}) },
		"I32 negative":   func() { I32Tensor([]int{-1}, nil) },
		"I32 zero shape": func() { I32Tensor([]int{0}, []int32{1}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			fn()
		}()
	}
	// The tensor does not alias the caller's shape.
	shape := []int{2}
	tn := F32Tensor(shape, []float32{1, 2})
	shape[0] = 9
	if tn.Shape[0] != 2 {
		t.Error("F32Tensor aliases shape")
	}
}

func TestDTypeSize(t *testing.T) {
	for d, want := range map[DType]int{F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, U16: 2, U8: 1, "F8": 0, "": 0} {
		if got := d.Size(); got != want {
			t.Errorf("%q.Size() = %d, want %d", d, got, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(encode(f, sample()))
	f.Add(encode(f, &File{}))
	f.Add(raw(`{"a":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]},"__metadata__":{"k":"v"}}`, make([]byte, 4)))
	f.Add(raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Decode(data)
		if err != nil {
			return
		}
		// Anything Decode accepts must re-encode, and that encoding must be a
		// fixed point.
		b := encode(t, file)
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !sameFile(file, again) {
			t.Fatal("re-decode differs")
		}
		if !bytes.Equal(b, encode(t, again)) {
			t.Fatal("encoding is not stable")
		}
		for _, tn := range file.Tensors {
			tn.Float32s()
			tn.Float64s()
			tn.Int32s()
		}
	})
}

func TestBF16Tensor(t *testing.T) {
	in := []float32{1, -2.5, 3.14159265, 1e-20, 65504, float32(math.Inf(1)), 1.00390625, 1.01171875}
	got, err := BF16Tensor([]int{len(in)}, in).Float32s()
	if err != nil {
		t.Fatal(err)
	}
	// 1.00390625 is halfway between 1 and 1.0078125: to even, 1;
	// 1.01171875 is halfway between 1.0078125 and 1.015625: to even, 1.015625
	// (the values are PyTorch's .bfloat16()).
	want := []float32{1, -2.5, 3.140625, 1.0005577e-20, 65536, float32(math.Inf(1)), 1, 1.015625}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("BF16(%v) = %v, want %v", in[i], got[i], want[i])
		}
	}
}
