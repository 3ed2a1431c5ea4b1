package opencl

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/kcache"
	"github.com/fleetml/fleet/backend/gpu/libs"
)

const (
	clProgramBinarySizes = 0x1165
	clProgramBinaries    = 0x1166
)

// BuildCached is Build with the device's binary kept in cache, beside the
// CUDA backend's cubins (kcache): keyed by the source, the device (its
// name and OpenCL version), its platform and driver versions and the
// options, so another device or driver compiles again. A hit is loaded
// with clCreateProgramWithBinary and built without compiling; an entry the
// device refuses is compiled again. hit says which happened. A failure to
// store the binary is not an error: the cache only saves time.
func (c *Context) BuildCached(cache *kcache.Cache, src, options string) (p *Program, hit bool, err error) {
	d := c.Device
	key := kcache.Key(src, "opencl "+d.Name+" "+d.Version, d.PlatformVersion+" / "+d.DriverVersion, []string{options})
	if bin, gerr := cache.Get(key); gerr == nil {
		if p, err := c.buildBinary(bin, options); err == nil {
			return p, true, nil
		}
	}
	p, err = c.Build(src, options)
	if err != nil {
		return nil, false, err
	}
	if bin, berr := p.binary(); berr == nil && len(bin) > 0 {
		_ = cache.Put(key, bin)
	}
	return p, false, nil
}

// binary is the built program's binary for its device.
func (p *Program) binary() ([]byte, error) {
	a := p.c.a
	var size uintptr
	r, err := a.getProgramInfo.Call(p.prog, clProgramBinarySizes, unsafe.Sizeof(size), uintptr(unsafe.Pointer(&size)), 0)
	if err := check("clGetProgramInfo", r, err); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, nil
	}
	bin := make([]byte, size)
	ptrs := []uintptr{uintptr(unsafe.Pointer(&bin[0]))}
	r, err = a.getProgramInfo.Call(p.prog, clProgramBinaries, unsafe.Sizeof(ptrs[0]), uintptr(unsafe.Pointer(&ptrs[0])), 0)
	runtime.KeepAlive(bin)
	if err := check("clGetProgramInfo", r, err); err != nil {
		return nil, err
	}
	return bin, nil
}

// buildBinary makes a program from a binary the device made before and
// builds it.
func (c *Context) buildBinary(bin []byte, options string) (*Program, error) {
	if len(bin) == 0 {
		return nil, fmt.Errorf("opencl: an empty binary")
	}
	a := c.a
	id := c.Device.id
	lens := []uintptr{uintptr(len(bin))}
	ptrs := []uintptr{uintptr(unsafe.Pointer(&bin[0]))}
	var status, code int32
	p, err := a.createProgramWithBinary.Call(c.ctx, 1, uintptr(unsafe.Pointer(&id)), uintptr(unsafe.Pointer(&lens[0])),
		uintptr(unsafe.Pointer(&ptrs[0])), uintptr(unsafe.Pointer(&status)), uintptr(unsafe.Pointer(&code)))
	runtime.KeepAlive(bin)
	if err := check("clCreateProgramWithBinary", uintptr(code), err); err != nil {
		return nil, err
	}
	if err := check("clCreateProgramWithBinary (binary status)", uintptr(status), nil); err != nil {
		a.releaseProgram.Call(p)
		return nil, err
	}
	opts := libs.CString(options)
	r, err := a.buildProgram.Call(p, 1, uintptr(unsafe.Pointer(&id)), uintptr(unsafe.Pointer(&opts[0])), 0, 0)
	if err := check("clBuildProgram", r, err); err != nil {
		a.releaseProgram.Call(p)
		return nil, err
	}
	return &Program{c: c, prog: p}, nil
}
