package checkpoint

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"unicode/utf8"

	"github.com/fleetml/fleet/internal/atomicfile"
)

// DType is a safetensors element type, spelled as in the file header.
type DType string

// The supported element types.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	U16  DType = "U16"
	U8   DType = "U8"
)

// Size returns the number of bytes per element, or 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16, U16:
		return 2
	case U8:
		return 1
	}
	return 0
}

const (
	maxHeaderSize = 100_000_000 // same limit as the reference implementation
	metadataKey   = "__metadata__"
)

// Tensor is one named array in a safetensors file.
type Tensor struct {
	DType DType
	Shape []int  // empty for a scalar
	Data  []byte // little-endian raw bytes, len == numel*DType.Size()
}

// byteSize returns product(shape)*size, failing on negative dims or overflow.
func byteSize(shape []int, size int) (int, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		}
	}
	if slices.Contains(shape, 0) {
		return 0, nil
	}
	n := size
	for _, d := range shape {
		if n > math.MaxInt/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// check reports whether t's dtype, shape and data length agree.
func (t Tensor) check() error {
	size := t.DType.Size()
	if size == 0 {
		return fmt.Errorf("unknown dtype %q", t.DType)
	}
	n, err := byteSize(t.Shape, size)
	if err != nil {
		return err
	}
	if n != len(t.Data) {
		return fmt.Errorf("%s shape %v needs %d bytes, data has %d", t.DType, t.Shape, n, len(t.Data))
	}
	return nil
}

func mustNumel(fn string, shape []int, n int) {
	if want, err := byteSize(shape, 1); err != nil || want != n {
		panic(fmt.Sprintf("checkpoint.%s: %d values do not fit shape %v", fn, n, shape))
	}
}

// F32Tensor returns an F32 tensor holding v. It panics if len(v) is not the
// product of shape.
func F32Tensor(shape []int, v []float32) Tensor {
	mustNumel("F32Tensor", shape, len(v))
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
	}
	return Tensor{F32, slices.Clone(shape), data}
}

// BF16Tensor returns a BF16 tensor holding v rounded to bfloat16 (to
// nearest even; NaN stays NaN). It panics if len(v) is not the product of
// shape.
func BF16Tensor(shape []int, v []float32) Tensor {
	mustNumel("BF16Tensor", shape, len(v))
	data := make([]byte, 2*len(v))
	for i, x := range v {
		b := math.Float32bits(x)
		var h uint16
		if x != x {
			h = uint16(b>>16) | 0x40 // a quiet NaN
		} else {
			h = uint16((b + 0x7fff + (b>>16)&1) >> 16)
		}
		binary.LittleEndian.PutUint16(data[2*i:], h)
	}
	return Tensor{BF16, slices.Clone(shape), data}
}

// I32Tensor returns an I32 tensor holding v. It panics if len(v) is not the
// product of shape.
func I32Tensor(shape []int, v []int32) Tensor {
	mustNumel("I32Tensor", shape, len(v))
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(x))
	}
	return Tensor{I32, slices.Clone(shape), data}
}

var le = binary.LittleEndian

// Float32s decodes an F32, F64, BF16 or F16 tensor into float32 values
// (F64 values are rounded). Integer dtypes are an error.
func (t Tensor) Float32s() ([]float32, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	d := t.Data
	out := make([]float32, len(d)/t.DType.Size())
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(d[4*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(le.Uint64(d[8*i:])))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(le.Uint16(d[2*i:])) << 16)
		}
	case F16:
		for i := range out {
			out[i] = f16ToF32(le.Uint16(d[2*i:]))
		}
	default:
		return nil, fmt.Errorf("cannot decode %s tensor as floats", t.DType)
	}
	return out, nil
}

// Float64s decodes an F64, F32, BF16 or F16 tensor into float64 values.
// Integer dtypes are an error.
func (t Tensor) Float64s() ([]float64, error) {
	if t.DType == F64 {
		if err := t.check(); err != nil {
			return nil, err
		}
		out := make([]float64, len(t.Data)/8)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(t.Data[8*i:]))
		}
		return out, nil
	}
	f, err := t.Float32s() // exact for every other float dtype
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = float64(x)
	}
	return out, nil
}

// Int32s decodes an I32, I64, U16 or U8 tensor into int32 values. I64 values
// outside the int32 range are an error, as are float dtypes.
func (t Tensor) Int32s() ([]int32, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	d := t.Data
	out := make([]int32, len(d)/t.DType.Size())
	switch t.DType {
	case I32:
		for i := range out {
			out[i] = int32(le.Uint32(d[4*i:]))
		}
	case I64:
		for i := range out {
			v := int64(le.Uint64(d[8*i:]))
			if v != int64(int32(v)) {
				return nil, fmt.Errorf("I64 element %d = %d is out of int32 range", i, v)
			}
			out[i] = int32(v)
		}
	case U16:
		for i := range out {
			out[i] = int32(le.Uint16(d[2*i:]))
		}
	case U8:
		for i := range out {
			out[i] = int32(d[i])
		}
	default:
		return nil, fmt.Errorf("cannot decode %s tensor as int32", t.DType)
	}
	return out, nil
}

// f16ToF32 converts IEEE 754 half-precision bits to float32 (exactly).
func f16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0: // zero or subnormal: mant * 2^-24
		return math.Float32frombits(sign | math.Float32bits(float32(mant)/(1<<24)))
	case 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// File is the contents of a safetensors file.
type File struct {
	Metadata map[string]string // the "__metadata__" entry; may be nil
	Tensors  map[string]Tensor
}

// Names returns the tensor names in sorted order.
func (f *File) Names() []string { return slices.Sorted(maps.Keys(f.Tensors)) }

// Encode writes f in safetensors format. Tensor data is laid out in sorted
// name order, the header JSON has its keys in sorted order, and the header is
// padded with spaces to a multiple of 8 bytes. A nil Metadata is omitted; a
// non-nil empty one is written as {}.
func Encode(w io.Writer, f *File) error {
	header, err := encodeHeader(f)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	bw := bufio.NewWriter(w)
	bw.Write(le.AppendUint64(nil, uint64(len(header))))
	bw.Write(header)
	for _, name := range f.Names() {
		bw.Write(f.Tensors[name].Data)
	}
	return bw.Flush() // bufio.Writer keeps the first write error
}

func encodeHeader(f *File) ([]byte, error) {
	if f == nil {
		return nil, errors.New("nil File")
	}
	type entry struct {
		DType   DType  `json:"dtype"`
		Shape   []int  `json:"shape"`
		Offsets [2]int `json:"data_offsets"`
	}
	hdr := make(map[string]any, len(f.Tensors)+1)
	if f.Metadata != nil {
		for k, v := range f.Metadata {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return nil, fmt.Errorf("metadata %q: invalid UTF-8", k)
			}
		}
		hdr[metadataKey] = f.Metadata
	}
	off := 0
	for _, name := range f.Names() {
		t := f.Tensors[name]
		switch {
		case name == metadataKey:
			return nil, fmt.Errorf("tensor name %q is reserved", name)
		case !utf8.ValidString(name):
			return nil, fmt.Errorf("tensor name %q is not valid UTF-8", name)
		}
		if err := t.check(); err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{} // a scalar's shape is [], never null
		}
		hdr[name] = entry{t.DType, shape, [2]int{off, off + len(t.Data)}}
		off += len(t.Data)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(hdr); err != nil { // maps encode with sorted keys
		return nil, err
	}
	buf.Truncate(buf.Len() - 1) // Encode's trailing newline
	for buf.Len()%8 != 0 {
		buf.WriteByte(' ')
	}
	return buf.Bytes(), nil
}

// Save writes f to path atomically.
func Save(path string, f *File) error {
	return atomicfile.Write(path, func(w io.Writer) error { return Encode(w, f) })
}

// Load reads and decodes the safetensors file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		var f *File
		if f, err = Decode(data); err == nil {
			return f, nil
		}
	}
	return nil, fmt.Errorf("load %s: %w", path, err)
}

// Decode parses and validates a safetensors file. The returned tensors' Data
// slices alias data (capacity-limited, so appending to one cannot clobber
// another); copy them if data will be reused.
func Decode(data []byte) (*File, error) {
	f, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	return f, nil
}

func decode(data []byte) (*File, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("file is %d bytes, shorter than the 8-byte header length", len(data))
	}
	n := le.Uint64(data)
	if n > maxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the %d-byte limit", n, maxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file", n, len(data))
	}
	fields, err := parseHeader(data[8 : 8+n])
	if err != nil {
		return nil, err
	}
	body := data[8+n:]
	type span struct {
		name       string
		begin, end int
	}
	var spans []span
	f := &File{Tensors: make(map[string]Tensor, len(fields))}
	for _, fl := range fields {
		if fl.key == metadataKey {
			if f.Metadata, err = parseMetadata(fl.raw); err != nil {
				return nil, err
			}
			continue
		}
		t, begin, end, err := parseTensor(fl.raw, len(body))
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", fl.key, err)
		}
		t.Data = body[begin:end:end]
		f.Tensors[fl.key] = t
		spans = append(spans, span{fl.key, begin, end})
	}
	// The tensors must tile the data section: sorted by offset, each one
	// starts where the previous one ended.
	slices.SortFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end))
	})
	pos, prev := 0, ""
	for _, s := range spans {
		switch {
		case s.begin < pos:
			return nil, fmt.Errorf("tensor %q (data bytes %d-%d) overlaps tensor %q (ending at %d)", s.name, s.begin, s.end, prev, pos)
		case s.begin > pos:
			return nil, fmt.Errorf("gap of %d unused bytes at data offset %d, before tensor %q", s.begin-pos, pos, s.name)
		}
		pos, prev = s.end, s.name
	}
	if pos != len(body) {
		return nil, fmt.Errorf("%d unused bytes at the end of the data section", len(body)-pos)
	}
	return f, nil
}

type field struct {
	key string
	raw json.RawMessage
}

// parseHeader splits the header object into its entries, in file order.
func parseHeader(h []byte) ([]field, error) {
	if !utf8.Valid(h) {
		return nil, errors.New("header is not valid UTF-8")
	}
	if !json.Valid(h) {
		var v any
		return nil, fmt.Errorf("header is not valid JSON: %v", json.Unmarshal(h, &v))
	}
	dec := json.NewDecoder(bytes.NewReader(h))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return nil, errors.New("header is not a JSON object")
	}
	var fields []field
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, fmt.Errorf("header: bad key: %v", err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("header entry %q: %w", key, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("duplicate header key %q", key)
		}
		seen[key] = true
		fields = append(fields, field{key, raw})
	}
	return fields, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// parseTensor validates one header entry against a data section of dataLen
// bytes and returns the tensor (without Data) and its byte range.
func parseTensor(raw json.RawMessage, dataLen int) (t Tensor, begin, end int, err error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return t, 0, 0, errors.New("entry is not a JSON object")
	}
	var dtype string
	var shape, offs []int64
	for _, fd := range []struct {
		key string
		dst any
	}{{"dtype", &dtype}, {"shape", &shape}, {"data_offsets", &offs}} {
		v, ok := obj[fd.key]
		if !ok || isNull(v) {
			return t, 0, 0, fmt.Errorf("missing %s", fd.key)
		}
		if s, isInts := fd.dst.(*[]int64); isInts {
			*s, err = ints(v)
		} else {
			err = json.Unmarshal(v, fd.dst)
		}
		if err != nil {
			return t, 0, 0, fmt.Errorf("bad %s: %v", fd.key, err)
		}
	}
	t.DType = DType(dtype)
	size := t.DType.Size()
	if size == 0 {
		return t, 0, 0, fmt.Errorf("unknown dtype %q", dtype)
	}
	t.Shape = make([]int, len(shape))
	for i, d := range shape {
		if d < 0 {
			return t, 0, 0, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		}
		if d > math.MaxInt {
			return t, 0, 0, fmt.Errorf("shape %v is too large", shape)
		}
		t.Shape[i] = int(d)
	}
	n, err := byteSize(t.Shape, size)
	if err != nil {
		return t, 0, 0, err
	}
	if len(offs) != 2 {
		return t, 0, 0, fmt.Errorf("data_offsets %v must be [begin, end]", offs)
	}
	b, e := offs[0], offs[1]
	switch {
	case b < 0 || b > e:
		return t, 0, 0, fmt.Errorf("data_offsets %v: need 0 <= begin <= end", offs)
	case e > int64(dataLen):
		return t, 0, 0, fmt.Errorf("data_offsets %v run past the end of the %d-byte data section", offs, dataLen)
	case e-b != int64(n):
		return t, 0, 0, fmt.Errorf("data_offsets %v span %d bytes, but %s shape %v needs %d", offs, e-b, t.DType, t.Shape, n)
	}
	return t, int(b), int(e), nil
}

// ints decodes a JSON array of integers, rejecting nulls, strings and
// non-integral numbers.
func ints(raw json.RawMessage) ([]int64, error) {
	var ps []*int64
	if err := json.Unmarshal(raw, &ps); err != nil {
		return nil, err
	}
	out := make([]int64, len(ps))
	for i, p := range ps {
		if p == nil {
			return nil, fmt.Errorf("element %d is null", i)
		}
		out[i] = *p
	}
	return out, nil
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object of strings", metadataKey)
	}
	if m == nil { // "__metadata__": null
		return nil, nil
	}
	md := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		var s string
		if isNull(m[k]) || json.Unmarshal(m[k], &s) != nil {
			return nil, fmt.Errorf("%s value for %q is not a string", metadataKey, k)
		}
		md[k] = s
	}
	return md, nil
}
