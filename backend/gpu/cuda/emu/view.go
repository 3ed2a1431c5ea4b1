package emu

import "fmt"

// View is a position inside a buffer, passed to a kernel's pointer
// parameter as the buffer's address plus a byte offset: what a device
// backend's pointer arithmetic produces. The guards checked after a launch
// are those of the whole buffer. A view of a U8 buffer (raw device memory)
// may be passed for a pointer of any element type.
type View struct {
	buf *Buffer
	off int
}

// At returns the view of b from byte offset off, which must lie within b
// (off == its size is the empty view at the end).
func (b *Buffer) At(off int) View {
	if off < 0 || off > b.n*b.dtype.Size() {
		panic(fmt.Sprintf("emu: view at byte %d of %v", off, b))
	}
	return View{buf: b, off: off}
}

// Bytes returns the buffer's data as bytes. They alias the buffer: writes
// are what a kernel will read, and a launch's writes show up in them.
func (b *Buffer) Bytes() []byte { return b.bytes() }
