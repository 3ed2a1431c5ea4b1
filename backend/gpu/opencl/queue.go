package opencl

import (
	"fmt"
	"runtime"
	"unsafe"
)

// OpenCL's constants for queues, events and mapped memory.
const (
	clQueueProfilingEnable = 1 << 1
	clMemAllocHostPtr      = 1 << 4
	clMapRead              = 1 << 0
	clMapWrite             = 1 << 1
	clProfilingCommandEnd  = 0x1283
	clKernelNumArgs        = 0x1191
)

// Event is a point in a queue's work: a marker, or a command's end.
type Event struct {
	c  *Context
	ev uintptr
}

// Wait blocks until the event's work is done.
func (e Event) Wait() error {
	ev := e.ev
	r, err := e.c.a.waitForEvents.Call(1, uintptr(unsafe.Pointer(&ev)))
	return check("clWaitForEvents", r, err)
}

// Release frees the event.
func (e Event) Release() error {
	r, err := e.c.a.releaseEvent.Call(e.ev)
	return check("clReleaseEvent", r, err)
}

// End is the device's clock, in nanoseconds, when the event's command
// ended (the queues time their commands); the event must be done.
func (e Event) End() (uint64, error) {
	var t uint64
	r, err := e.c.a.getEventProfilingInfo.Call(e.ev, clProfilingCommandEnd, 8, uintptr(unsafe.Pointer(&t)), 0)
	return t, check("clGetEventProfilingInfo", r, err)
}

// Marker returns an event that completes when the compute queue's work
// queued so far is done.
func (c *Context) Marker() (Event, error) {
	var ev uintptr
	r, err := c.a.enqueueMarkerWithWaitList.Call(c.queue, 0, 0, uintptr(unsafe.Pointer(&ev)))
	if err := check("clEnqueueMarkerWithWaitList", r, err); err != nil {
		return Event{}, err
	}
	return Event{c: c, ev: ev}, nil
}

// After makes the compute queue's later work wait for e (on the device:
// the host does not wait).
func (c *Context) After(e Event) error {
	return c.barrier(c.queue, e)
}

func (c *Context) barrier(q uintptr, e Event) error {
	ev := e.ev
	r, err := c.a.enqueueBarrierWithWaitList.Call(q, 1, uintptr(unsafe.Pointer(&ev)), 0)
	return check("clEnqueueBarrierWithWaitList", r, err)
}

// Flush sends the queues' commands to the device without waiting.
func (c *Context) Flush() error {
	if err := c.flush(c.queue); err != nil {
		return err
	}
	return c.flush(c.upload)
}

// flush sends queue q's commands to the device without waiting.
func (c *Context) flush(q uintptr) error {
	r, err := c.a.flush.Fast(q)
	return check("clFlush", r, err)
}

// WriteAt copies src into b from byte off on, in the compute queue's
// order, and returns when it is done.
func (c *Context) WriteAt(b *Buffer, off int, src []byte) error {
	if off < 0 || off+len(src) > b.Bytes {
		return fmt.Errorf("opencl: writing %d bytes at %d of a buffer of %d", len(src), off, b.Bytes)
	}
	if len(src) == 0 {
		return nil
	}
	r, err := c.a.enqueueWriteBuffer.Call(c.queue, b.mem, 1, uintptr(off), uintptr(len(src)), uintptr(unsafe.Pointer(&src[0])), 0, 0, 0)
	return check("clEnqueueWriteBuffer", r, err)
}

// ReadAt copies len(dst) bytes of b from byte off on into dst, after the
// compute queue's work queued so far, and returns when it is done.
func (c *Context) ReadAt(dst []byte, b *Buffer, off int) error {
	if off < 0 || off+len(dst) > b.Bytes {
		return fmt.Errorf("opencl: reading %d bytes at %d of a buffer of %d", len(dst), off, b.Bytes)
	}
	if len(dst) == 0 {
		return nil
	}
	r, err := c.a.enqueueReadBuffer.Call(c.queue, b.mem, 1, uintptr(off), uintptr(len(dst)), uintptr(unsafe.Pointer(&dst[0])), 0, 0, 0)
	return check("clEnqueueReadBuffer", r, err)
}

// CopyBuffer queues a copy of bytes from src at byte sOff to dst at byte
// dOff on the compute queue.
func (c *Context) CopyBuffer(dst *Buffer, dOff int, src *Buffer, sOff, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if dOff < 0 || sOff < 0 || dOff+bytes > dst.Bytes || sOff+bytes > src.Bytes {
		return fmt.Errorf("opencl: copying %d bytes from %d of %d to %d of %d", bytes, sOff, src.Bytes, dOff, dst.Bytes)
	}
	r, err := c.a.enqueueCopyBuffer.Fast(c.queue, src.mem, dst.mem, uintptr(sOff), uintptr(dOff), uintptr(bytes), 0, 0, 0)
	return check("clEnqueueCopyBuffer", r, err)
}

// UploadAsync queues a copy of src, host memory from AllocHost that must
// not change until the returned event is done, into dst at byte off, on
// the upload queue after the compute queue's work queued so far (dst may
// be memory that work still reads), and returns at once. The compute
// queue's work that reads dst must wait for the event (After).
func (c *Context) UploadAsync(dst *Buffer, off int, src []byte) (Event, error) {
	if off < 0 || off+len(src) > dst.Bytes || len(src) == 0 {
		return Event{}, fmt.Errorf("opencl: uploading %d bytes at %d of a buffer of %d", len(src), off, dst.Bytes)
	}
	m, err := c.Marker()
	if err != nil {
		return Event{}, err
	}
	// Another queue waits on the marker: its own queue must be flushed
	// (clFlush's rule), or a driver that holds commands back until a
	// flush could wait for ever.
	if err := c.flush(c.queue); err != nil {
		m.Release()
		return Event{}, err
	}
	err = c.barrier(c.upload, m)
	m.Release()
	if err != nil {
		return Event{}, err
	}
	var ev uintptr
	r, err := c.a.enqueueWriteBuffer.Call(c.upload, dst.mem, 0, uintptr(off), uintptr(len(src)), uintptr(unsafe.Pointer(&src[0])), 0, 0, uintptr(unsafe.Pointer(&ev)))
	if err := check("clEnqueueWriteBuffer", r, err); err != nil {
		return Event{}, err
	}
	if err := c.flush(c.upload); err != nil {
		return Event{}, err
	}
	return Event{c: c, ev: ev}, nil
}

// HostBuffer is host memory the device can read directly
// (CL_MEM_ALLOC_HOST_PTR), mapped for the host: the platform's nearest
// thing to page-locked memory, for UploadAsync.
type HostBuffer struct {
	b     *Buffer
	Bytes []byte
}

// AllocHost allocates bytes of mapped host memory.
func (c *Context) AllocHost(bytes int) (*HostBuffer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("opencl: host memory of %d bytes", bytes)
	}
	var code int32
	m, err := c.a.createBuffer.Call(c.ctx, clMemReadWrite|clMemAllocHostPtr, uintptr(bytes), 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateBuffer", uintptr(code), err); err != nil {
		return nil, err
	}
	b := &Buffer{c: c, mem: m, Bytes: bytes}
	p, err := c.a.enqueueMapBuffer.Call(c.queue, m, 1, clMapRead|clMapWrite, 0, uintptr(bytes), 0, 0, 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clEnqueueMapBuffer", uintptr(code), err); err != nil {
		b.Free()
		return nil, err
	}
	// p is memory the OpenCL library owns, outside Go's heap.
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	return &HostBuffer{b: b, Bytes: unsafe.Slice((*byte)(ptr), bytes)}, nil
}

// Free unmaps and releases the memory, once the queues' work (an upload
// that may still read it) is done; Bytes must not be used after.
func (h *HostBuffer) Free() error {
	c := h.b.c
	if err := c.Finish(); err != nil {
		return err
	}
	r, err := c.a.enqueueUnmapMemObject.Call(c.queue, h.b.mem, uintptr(unsafe.Pointer(&h.Bytes[0])), 0, 0, 0)
	if err := check("clEnqueueUnmapMemObject", r, err); err != nil {
		return err
	}
	if err := c.Finish(); err != nil {
		return err
	}
	h.Bytes = nil
	return h.b.Free()
}

// NumArgs is the number of the kernel's parameters.
func (k *Kernel) NumArgs() (int, error) {
	var n uint32
	r, err := k.c.a.getKernelInfo.Call(k.k, clKernelNumArgs, 4, uintptr(unsafe.Pointer(&n)), 0)
	return int(n), check("clGetKernelInfo", r, err)
}

// SetArgBuffer sets argument i to b's memory, or to a null pointer where b
// is nil.
func (k *Kernel) SetArgBuffer(i int, b *Buffer) error {
	var m uintptr
	if b != nil {
		m = b.mem
	}
	return k.SetArgBytes(i, uint64(m), int(unsafe.Sizeof(m)))
}

// SetArgBytes sets argument i to a scalar given by its bytes (4 or 8,
// little-endian: the low bytes of v).
func (k *Kernel) SetArgBytes(i int, v uint64, size int) error {
	k.arg = v
	r, err := k.c.a.setKernelArg.Fast(k.k, uintptr(i), uintptr(size), uintptr(unsafe.Pointer(&k.arg)))
	runtime.KeepAlive(k)
	return check("clSetKernelArg", r, err)
}

// SetArgLocal sets argument i, a __local pointer, to bytes of local
// memory.
func (k *Kernel) SetArgLocal(i, bytes int) error {
	r, err := k.c.a.setKernelArg.Fast(k.k, uintptr(i), uintptr(bytes), 0)
	return check("clSetKernelArg", r, err)
}
