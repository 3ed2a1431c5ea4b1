package cpu

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
)

// Upload implements backend.Backend. On the CPU an upload is a copy.
func (c *CPU) Upload(dst backend.Ref, src []byte) {
	b := dst.S.(*Buffer)
	n := copy(elementBytes(b, dst.Off, len(src), "upload"), src)
	c.copied.Add(int64(n))
}

// Download implements backend.Backend.
func (c *CPU) Download(dst []byte, src backend.Ref) {
	b := src.S.(*Buffer)
	n := copy(dst, elementBytes(b, src.Off, len(dst), "download"))
	c.copied.Add(int64(n))
}

// elementBytes views nbytes of b from element off on as bytes.
func elementBytes(b *Buffer, off, nbytes int, op string) []byte {
	size := b.dt.Size()
	if nbytes%size != 0 || off < 0 || off+nbytes/size > b.Len() {
		panic(fmt.Sprintf("cpu: %s of %d bytes at element %d of a %v buffer of %d", op, nbytes, off, b.dt, b.Len()))
	}
	n := nbytes / size
	switch b.dt {
	case backend.F32:
		return backend.AsBytes(b.F32[off : off+n])
	case backend.BF16, backend.F16:
		return backend.AsBytes(b.U16[off : off+n])
	case backend.I32:
		return backend.AsBytes(b.I32[off : off+n])
	case backend.I64:
		return backend.AsBytes(b.I64[off : off+n])
	}
	panic(fmt.Sprintf("cpu: %s of dtype %v", op, b.dt))
}

// Copy implements backend.Backend.
func (c *CPU) Copy(dst, src backend.Ref, n int) {
	d, s := dst.S.(*Buffer), src.S.(*Buffer)
	if d.dt != s.dt {
		panic(fmt.Sprintf("cpu: copy from %v to %v", s.dt, d.dt))
	}
	switch d.dt {
	case backend.F32:
		copy(d.F32[dst.Off:dst.Off+n], s.F32[src.Off:src.Off+n])
	case backend.BF16, backend.F16:
		copy(d.U16[dst.Off:dst.Off+n], s.U16[src.Off:src.Off+n])
	case backend.I32:
		copy(d.I32[dst.Off:dst.Off+n], s.I32[src.Off:src.Off+n])
	case backend.I64:
		copy(d.I64[dst.Off:dst.Off+n], s.I64[src.Off:src.Off+n])
	}
}

// Cast implements backend.Backend for conversions between F32, BF16 and
// F16 (rounding to nearest even) and between I32 and F32.
func (c *CPU) Cast(dst, src backend.Ref, n int) {
	d, s := dst.S.(*Buffer), src.S.(*Buffer)
	if d.dt == s.dt {
		c.Copy(dst, src, n)
		return
	}
	runChunks(c, &castTasks, n, 1<<14, castTask{d, s, dst.Off, src.Off})
}

// castTask is one Cast call.
type castTask struct {
	d, s           *Buffer
	dstOff, srcOff int
}

var castTasks taskPool[castTask]

func (t *castTask) do(lo, hi int) {
	d, s := t.d, t.s
	if castFast(d, s, t.dstOff, t.srcOff, lo, hi) { // F32↔BF16, vectorized
		return
	}
	for i := lo; i < hi; i++ {
		var v float32
		switch s.dt {
		case backend.F32:
			v = s.F32[t.srcOff+i]
		case backend.BF16:
			v = backend.BF16ToF32(s.U16[t.srcOff+i])
		case backend.F16:
			v = backend.F16ToF32(s.U16[t.srcOff+i])
		case backend.I32:
			v = float32(s.I32[t.srcOff+i])
		default:
			panic(fmt.Sprintf("cpu: cast from %v", s.dt))
		}
		switch d.dt {
		case backend.F32:
			d.F32[t.dstOff+i] = v
		case backend.BF16:
			d.U16[t.dstOff+i] = backend.F32ToBF16(v)
		case backend.F16:
			d.U16[t.dstOff+i] = backend.F32ToF16(v)
		default:
			panic(fmt.Sprintf("cpu: cast to %v", d.dt))
		}
	}
}

// Fill implements backend.Backend.
func (c *CPU) Fill(dst backend.Ref, v float32, n int) {
	b := dst.S.(*Buffer)
	switch b.dt {
	case backend.F32:
		x := b.F32[dst.Off : dst.Off+n]
		if v == 0 {
			clear(x)
			return
		}
		for i := range x {
			x[i] = v
		}
	case backend.I32:
		x := b.I32[dst.Off : dst.Off+n]
		for i := range x {
			x[i] = int32(v)
		}
	case backend.BF16, backend.F16:
		h := backend.F32ToBF16(v)
		if b.dt == backend.F16 {
			h = backend.F32ToF16(v)
		}
		x := b.U16[dst.Off : dst.Off+n]
		for i := range x {
			x[i] = h
		}
	default:
		panic(fmt.Sprintf("cpu: fill of %v", b.dt))
	}
}
