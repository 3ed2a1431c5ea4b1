package emu

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"
)

// DType is the element type of a Buffer.
type DType int

const (
	F32 DType = iota // float
	U16              // unsigned short: bf16 and fp16 bit patterns
	I32              // int
	U32              // unsigned int
	I64              // long long
	U8               // unsigned char
)

var dtypeInfo = [...]struct {
	name  string
	ctype string
	size  int
	// canary is one element of the guard pattern: a signalling NaN for
	// the float types, so an out-of-bounds read poisons a result.
	canary uint64
}{
	F32: {"F32", "float", 4, 0x7fbadbad},
	U16: {"U16", "unsigned short", 2, 0x7fba}, // NaN as bf16 and as fp16
	I32: {"I32", "int", 4, 0x7fbadbad},
	U32: {"U32", "unsigned int", 4, 0x7fbadbad},
	I64: {"I64", "long long", 8, 0x7ff4badbadbadbad},
	U8:  {"U8", "unsigned char", 1, 0xba},
}

func (d DType) String() string {
	if d < 0 || int(d) >= len(dtypeInfo) {
		return fmt.Sprintf("DType(%d)", int(d))
	}
	return dtypeInfo[d].name
}

// Size is the size of one element in bytes.
func (d DType) Size() int { return dtypeInfo[d].size }

// CType is the C type of one element, as a kernel's pointer parameter
// declares it.
func (d DType) CType() string { return dtypeInfo[d].ctype }

// guardBytes of canary lie before each buffer's data, and at least as many
// after it (to the end of a page).
const guardBytes = 4096

// patterns[d] is the canary pattern of d, long enough for any guard.
var patterns = func() [len(dtypeInfo)][]byte {
	var p [len(dtypeInfo)][]byte
	for d, info := range dtypeInfo {
		b := make([]byte, 2*guardBytes+8)
		for i := 0; i+info.size <= len(b); i += info.size {
			var e [8]byte
			binary.LittleEndian.PutUint64(e[:], info.canary)
			copy(b[i:], e[:info.size])
		}
		p[d] = b
	}
	return p
}()

// Buffer is memory a kernel can reach, standing in for device memory. Its
// data lies in its own memory mapping, between guard regions that hold a
// canary pattern: Launch reports a kernel that changed a guard (an
// out-of-bounds write), and an out-of-bounds read of a float buffer reads a
// NaN, which poisons the result. The memory never moves; it is unmapped by
// Free or once the Buffer is unreachable.
type Buffer struct {
	dtype   DType
	n       int
	mem     []byte // guard, data, guard
	cleanup runtime.Cleanup
	freed   bool
}

func newBuffer(d DType, n int) *Buffer {
	if n < 0 {
		panic(fmt.Sprintf("emu: buffer of %d elements", n))
	}
	size := n * d.Size()
	back := (size+pageSize-1)/pageSize*pageSize - size + guardBytes
	mem, err := mapMemory(guardBytes + size + back)
	if err != nil {
		panic(fmt.Sprintf("emu: map %d bytes: %v", guardBytes+size+back, err))
	}
	b := &Buffer{dtype: d, n: n, mem: mem}
	b.cleanup = runtime.AddCleanup(b, unmapMemory, mem)
	b.restoreGuards()
	return b
}

const pageSize = 4096

func (b *Buffer) bytes() []byte {
	if b.freed {
		panic("emu: use of a freed buffer")
	}
	return b.mem[guardBytes : guardBytes+b.n*b.dtype.Size()]
}

// addr is the address of the data, for a kernel's pointer parameter.
func (b *Buffer) addr() uintptr { return uintptr(unsafe.Pointer(&b.mem[guardBytes])) }

func (b *Buffer) restoreGuards() {
	p := patterns[b.dtype]
	copy(b.mem[:guardBytes], p)
	end := guardBytes + b.n*b.dtype.Size()
	copy(b.mem[end:], p)
}

// checkGuards returns the offset in bytes from the start of the data of the
// changed guard byte nearest the data, and whether one changed.
func (b *Buffer) checkGuards() (offset int, changed bool) {
	p := patterns[b.dtype]
	front := b.mem[:guardBytes]
	if !bytes.Equal(front, p[:guardBytes]) {
		for k := guardBytes - 1; k >= 0; k-- {
			if front[k] != p[k] {
				return k - guardBytes, true
			}
		}
	}
	end := guardBytes + b.n*b.dtype.Size()
	back := b.mem[end:]
	if !bytes.Equal(back, p[:len(back)]) {
		for k := range back {
			if back[k] != p[k] {
				return end + k - guardBytes, true
			}
		}
	}
	return 0, false
}

// Free unmaps the buffer now. Using it afterwards panics.
func (b *Buffer) Free() {
	if b.freed {
		return
	}
	b.cleanup.Stop()
	unmapMemory(b.mem)
	b.freed = true
	b.mem = nil
}

// Len is the number of elements.
func (b *Buffer) Len() int { return b.n }

// DType is the element type.
func (b *Buffer) DType() DType { return b.dtype }

func (b *Buffer) String() string { return fmt.Sprintf("%v[%d]", b.dtype, b.n) }

func newFrom[T any](d DType, v []T) *Buffer {
	b := newBuffer(d, len(v))
	write(b, d, v)
	return b
}

func read[T any](b *Buffer, d DType) []T {
	if b.dtype != d {
		panic(fmt.Sprintf("emu: reading %v buffer as %v", b.dtype, d))
	}
	out := make([]T, b.n)
	if b.n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), b.n*d.Size()), b.bytes())
	}
	runtime.KeepAlive(b)
	return out
}

func write[T any](b *Buffer, d DType, v []T) {
	if b.dtype != d {
		panic(fmt.Sprintf("emu: writing %v to a %v buffer", d, b.dtype))
	}
	if len(v) != b.n {
		panic(fmt.Sprintf("emu: writing %d elements to a buffer of %d", len(v), b.n))
	}
	if b.n > 0 {
		copy(b.bytes(), unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), b.n*d.Size()))
	}
}

// NewF32 returns a float buffer holding a copy of v.
func NewF32(v []float32) *Buffer { return newFrom(F32, v) }

// NewU16 returns an unsigned short buffer (bf16 or fp16 bits) holding a copy of v.
func NewU16(v []uint16) *Buffer { return newFrom(U16, v) }

// NewI32 returns an int buffer holding a copy of v.
func NewI32(v []int32) *Buffer { return newFrom(I32, v) }

// NewU32 returns an unsigned int buffer holding a copy of v.
func NewU32(v []uint32) *Buffer { return newFrom(U32, v) }

// NewI64 returns a long long buffer holding a copy of v.
func NewI64(v []int64) *Buffer { return newFrom(I64, v) }

// NewU8 returns an unsigned char buffer holding a copy of v.
func NewU8(v []uint8) *Buffer { return newFrom(U8, v) }

// Zeros returns a buffer of n zero elements.
func Zeros(d DType, n int) *Buffer {
	b := newBuffer(d, n)
	clear(b.bytes())
	return b
}

// Poison returns a buffer of n elements that all hold the canary (a NaN for
// F32 and U16). Use it for outputs a kernel must write in full: an element
// it skips still holds the canary and fails the comparison.
func Poison(d DType, n int) *Buffer {
	b := newBuffer(d, n)
	copy(b.bytes(), patterns[d])
	for off := len(patterns[d]) / d.Size() * d.Size(); off < len(b.bytes()); off *= 2 {
		copy(b.bytes()[off:], b.bytes()[:off])
	}
	return b
}

// F32 returns a copy of the contents of a float buffer.
func (b *Buffer) F32() []float32 { return read[float32](b, F32) }

// U16 returns a copy of the contents of an unsigned short buffer.
func (b *Buffer) U16() []uint16 { return read[uint16](b, U16) }

// I32 returns a copy of the contents of an int buffer.
func (b *Buffer) I32() []int32 { return read[int32](b, I32) }

// U32 returns a copy of the contents of an unsigned int buffer.
func (b *Buffer) U32() []uint32 { return read[uint32](b, U32) }

// I64 returns a copy of the contents of a long long buffer.
func (b *Buffer) I64() []int64 { return read[int64](b, I64) }

// U8 returns a copy of the contents of an unsigned char buffer.
func (b *Buffer) U8() []uint8 { return read[uint8](b, U8) }

// SetF32 overwrites a float buffer with v, of its length.
func (b *Buffer) SetF32(v []float32) { write(b, F32, v) }

// SetU16 overwrites an unsigned short buffer with v, of its length.
func (b *Buffer) SetU16(v []uint16) { write(b, U16, v) }

// SetI32 overwrites an int buffer with v, of its length.
func (b *Buffer) SetI32(v []int32) { write(b, I32, v) }

// SetU32 overwrites an unsigned int buffer with v, of its length.
func (b *Buffer) SetU32(v []uint32) { write(b, U32, v) }

// SetI64 overwrites a long long buffer with v, of its length.
func (b *Buffer) SetI64(v []int64) { write(b, I64, v) }

// SetU8 overwrites an unsigned char buffer with v, of its length.
func (b *Buffer) SetU8(v []uint8) { write(b, U8, v) }
