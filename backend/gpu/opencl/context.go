package opencl

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// Context is an OpenCL context on one device with two in-order command
// queues, both timing their commands (profiling): one for the compute
// work, which every method here uses unless it says otherwise, and one
// for uploads that overlap it (Upload, ordered against the first by
// events). Its methods are not safe for concurrent use.
type Context struct {
	a                  *api
	Device             Device
	ctx, queue, upload uintptr
	// global and local are a launch's work sizes, passed by address.
	global, local [3]uintptr
}

// Open makes a context and its two queues on d.
func Open(d Device) (*Context, error) {
	a, err := load()
	if err != nil {
		return nil, err
	}
	var code int32
	id := d.id
	ctx, err := a.createContext.Call(0, 1, uintptr(unsafe.Pointer(&id)), 0, 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateContext", uintptr(code), err); err != nil {
		return nil, err
	}
	var qs [2]uintptr
	for i := range qs {
		qs[i], err = a.createCommandQueue.Call(ctx, d.id, clQueueProfilingEnable, uintptr(unsafe.Pointer(&code)))
		if err := check("clCreateCommandQueue", uintptr(code), err); err != nil {
			if i == 1 {
				a.releaseCommandQueue.Call(qs[0])
			}
			a.releaseContext.Call(ctx)
			return nil, err
		}
	}
	return &Context{a: a, Device: d, ctx: ctx, queue: qs[0], upload: qs[1]}, nil
}

// Close finishes the queues' work and releases them and the context.
func (c *Context) Close() error {
	err := c.Finish()
	for _, q := range []uintptr{c.queue, c.upload} {
		r, e := c.a.releaseCommandQueue.Call(q)
		if err == nil {
			err = check("clReleaseCommandQueue", r, e)
		}
	}
	var r uintptr
	var e error
	r, e = c.a.releaseContext.Call(c.ctx)
	if err == nil {
		err = check("clReleaseContext", r, e)
	}
	return err
}

// Finish waits until both queues' work is done. Both are flushed first:
// each may wait on the other's events.
func (c *Context) Finish() error {
	if err := c.Flush(); err != nil {
		return err
	}
	for _, q := range []uintptr{c.queue, c.upload} {
		r, err := c.a.finish.Call(q)
		if err := check("clFinish", r, err); err != nil {
			return err
		}
	}
	return nil
}

// Buffer is device memory of a context.
type Buffer struct {
	c     *Context
	mem   uintptr
	Bytes int
}

// Alloc allocates bytes of device memory (read and write).
func (c *Context) Alloc(bytes int) (*Buffer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("opencl: a buffer of %d bytes", bytes)
	}
	var code int32
	m, err := c.a.createBuffer.Call(c.ctx, clMemReadWrite, uintptr(bytes), 0, uintptr(unsafe.Pointer(&code)))
	if err := check("clCreateBuffer", uintptr(code), err); err != nil {
		return nil, err
	}
	return &Buffer{c: c, mem: m, Bytes: bytes}, nil
}

// Free releases the buffer.
func (b *Buffer) Free() error {
	r, err := b.c.a.releaseMemObject.Call(b.mem)
	return check("clReleaseMemObject", r, err)
}

// Write copies src to the buffer's start, and returns when it is done.
func (b *Buffer) Write(src []byte) error { return b.c.WriteAt(b, 0, src) }

// Read copies the buffer's first len(dst) bytes into dst, after the work
// queued before it, and returns when it is done.
func (b *Buffer) Read(dst []byte) error { return b.c.ReadAt(dst, b, 0) }

// Program is OpenCL C built for a context's device.
type Program struct {
	c    *Context
	prog uintptr
}

// Build compiles src with the device's compiler (options as
// clBuildProgram takes them). A failed build's error carries the
// compiler's log.
func (c *Context) Build(src, options string) (*Program, error) {
	cs := libs.CString(src)
	ptrs := []uintptr{uintptr(unsafe.Pointer(&cs[0]))}
	lens := []uintptr{uintptr(len(src))}
	var code int32
	p, err := c.a.createProgramWithSource.Call(c.ctx, 1, uintptr(unsafe.Pointer(&ptrs[0])), uintptr(unsafe.Pointer(&lens[0])), uintptr(unsafe.Pointer(&code)))
	runtime.KeepAlive(cs)
	if err := check("clCreateProgramWithSource", uintptr(code), err); err != nil {
		return nil, err
	}
	opts := libs.CString(options)
	id := c.Device.id
	r, err := c.a.buildProgram.Call(p, 1, uintptr(unsafe.Pointer(&id)), uintptr(unsafe.Pointer(&opts[0])), 0, 0)
	if err := check("clBuildProgram", r, err); err != nil {
		if e, ok := err.(*Error); ok {
			e.Log, _ = buildLog(c.a, p, c.Device.id)
		}
		c.a.releaseProgram.Call(p)
		return nil, err
	}
	return &Program{c: c, prog: p}, nil
}

// buildLog reads a program's build log for a device.
func buildLog(a *api, p, dev uintptr) (string, error) {
	var size uintptr
	r, err := a.getProgramBuildInfo.Call(p, dev, clProgramBuildLog, 0, 0, uintptr(unsafe.Pointer(&size)))
	if err := check("clGetProgramBuildInfo", r, err); err != nil || size == 0 {
		return "", err
	}
	b := make([]byte, size)
	r, err = a.getProgramBuildInfo.Call(p, dev, clProgramBuildLog, size, uintptr(unsafe.Pointer(&b[0])), 0)
	if err := check("clGetProgramBuildInfo", r, err); err != nil {
		return "", err
	}
	return string(b[:len(b)-1]), nil
}

// Release releases the program (its kernels keep it alive while they
// exist).
func (p *Program) Release() error {
	r, err := p.c.a.releaseProgram.Call(p.prog)
	return check("clReleaseProgram", r, err)
}

// Kernel is one kernel of a built program. Its methods are not safe for
// concurrent use.
type Kernel struct {
	c    *Context
	Name string
	k    uintptr
	// arg holds an argument's value while clSetKernelArg copies it: a
	// field, not a local, so that setting an argument allocates nothing.
	arg uint64
}

// Kernel looks up the kernel called name.
func (p *Program) Kernel(name string) (*Kernel, error) {
	cn := libs.CString(name)
	var code int32
	k, err := p.c.a.createKernel.Call(p.prog, uintptr(unsafe.Pointer(&cn[0])), uintptr(unsafe.Pointer(&code)))
	runtime.KeepAlive(cn)
	if err := check("clCreateKernel", uintptr(code), err); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", name, err)
	}
	return &Kernel{c: p.c, Name: name, k: k}, nil
}

// Release releases the kernel.
func (k *Kernel) Release() error {
	r, err := k.c.a.releaseKernel.Call(k.k)
	return check("clReleaseKernel", r, err)
}

// SetArgs sets the kernel's arguments in order: *Buffer (a global
// pointer), int32, uint32, int64 or float32.
func (k *Kernel) SetArgs(args ...any) error {
	for i, v := range args {
		var err error
		switch v := v.(type) {
		case *Buffer:
			err = k.SetArgBuffer(i, v)
		case int32:
			err = k.SetArgBytes(i, uint64(uint32(v)), 4)
		case uint32:
			err = k.SetArgBytes(i, uint64(v), 4)
		case int64:
			err = k.SetArgBytes(i, uint64(v), 8)
		case float32:
			err = k.SetArgBytes(i, uint64(math.Float32bits(v)), 4)
		default:
			return fmt.Errorf("opencl: kernel %s argument %d: a %T", k.Name, i, v)
		}
		if err != nil {
			return fmt.Errorf("kernel %s argument %d: %w", k.Name, i, err)
		}
	}
	return nil
}

// Launch queues k over global work-items in work-groups of local (0: the
// implementation chooses). Global need not be a multiple of local: it is
// rounded up, and the kernel must check its index against its size.
func (c *Context) Launch(k *Kernel, global, local int) error {
	if global <= 0 {
		return fmt.Errorf("opencl: kernel %s over %d work-items", k.Name, global)
	}
	if local > 0 {
		global = (global + local - 1) / local * local
	}
	c.global, c.local = [3]uintptr{uintptr(global)}, [3]uintptr{uintptr(local)}
	return c.enqueue(k, 1, local > 0)
}

// LaunchGrid queues k over grid work-groups of block work-items each, in
// three dimensions, as CUDA launches a grid of blocks.
func (c *Context) LaunchGrid(k *Kernel, grid, block [3]int) error {
	for i := range 3 {
		if grid[i] < 1 || block[i] < 1 {
			return fmt.Errorf("opencl: kernel %s over a grid %v of blocks %v", k.Name, grid, block)
		}
		c.global[i], c.local[i] = uintptr(grid[i]*block[i]), uintptr(block[i])
	}
	return c.enqueue(k, 3, true)
}

// enqueue queues k over the first dims sizes of c.global, in work-groups
// of c.local's where local is set (else the implementation's choice).
// The sizes are fields of the context, so a launch allocates nothing.
func (c *Context) enqueue(k *Kernel, dims int, local bool) error {
	l := uintptr(0)
	if local {
		l = uintptr(unsafe.Pointer(&c.local[0]))
	}
	r, err := c.a.enqueueNDRangeKernel.Fast(c.queue, k.k, uintptr(dims), 0, uintptr(unsafe.Pointer(&c.global[0])), l, 0, 0, 0)
	runtime.KeepAlive(c)
	if err := check("clEnqueueNDRangeKernel", r, err); err != nil {
		return fmt.Errorf("kernel %s: %w", k.Name, err)
	}
	return nil
}
