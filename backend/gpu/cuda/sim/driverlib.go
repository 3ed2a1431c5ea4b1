package sim

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/cuda/driver"
	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/kernels"
	"github.com/fleetml/fleet/backend/gpu/libs"
)

// CUresult codes the stand-ins return.
const (
	cuSuccess       = 0
	cuInvalidValue  = 1
	cuOutOfMemory   = 2
	cuInvalidHandle = 400
	// cuCaptureUnsupported is CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: what
	// the driver says to a host wait while a stream captures.
	cuCaptureUnsupported = 900
	cuNotFound           = 500
)

// imagePrefix starts what the NVRTC stand-in compiles a program to: an
// id the driver stand-in loads the program's source back from.
const imagePrefix = "fleet-sim-image:"

// Driver is the stand-in for libcuda: one device, ordinal 0, of d's model.
func (d *Device) Driver() *libs.Lib {
	set32 := func(p uintptr, v int32) { *(*int32)(ptr(p)) = v }
	set64 := func(p uintptr, v uint64) { *(*uint64)(ptr(p)) = v }
	setPtr := func(p, v uintptr) { *(*uintptr)(ptr(p)) = v }
	ok := func(a []uintptr) uintptr { return cuSuccess }
	attrs := map[driver.Attribute]int32{
		driver.AttrMaxThreadsPerBlock:               1024,
		driver.AttrMaxSharedMemoryPerBlock:          48 << 10,
		driver.AttrWarpSize:                         32,
		driver.AttrClockRate:                        1980000,
		driver.AttrMultiprocessorCount:              int32(d.Spec.SMs),
		driver.AttrCanMapHostMemory:                 1,
		driver.AttrConcurrentKernels:                1,
		driver.AttrL2CacheSize:                      50 << 20,
		driver.AttrMaxThreadsPerMultiprocessor:      2048,
		driver.AttrAsyncEngineCount:                 2,
		driver.AttrUnifiedAddressing:                1,
		driver.AttrComputeCapabilityMajor:           int32(d.Spec.Major),
		driver.AttrComputeCapabilityMinor:           int32(d.Spec.Minor),
		driver.AttrMaxSharedMemoryPerMultiprocessor: 228 << 10,
		driver.AttrMaxRegistersPerMultiprocessor:    64 << 10,
		driver.AttrMaxSharedMemoryPerBlockOptin:     227 << 10,
	}
	isPinned := func(p uintptr, n uintptr) bool {
		for base, b := range d.pinned {
			if p >= base && p+n <= base+uintptr(len(b)) {
				return true
			}
		}
		return false
	}
	sync := func(call string) libs.GoFunc {
		return func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.hostSync(call)
			if d.capture != nil {
				return cuCaptureUnsupported // the host cannot wait on work that is being recorded
			}
			if r := d.failWait; r != 0 {
				d.failWait = 0
				return r
			}
			return cuSuccess
		}
	}
	copyIn := func(name string, async bool) libs.GoFunc {
		return func(a []uintptr) uintptr { // (dst, src, bytes[, stream])
			d.mu.Lock()
			defer d.mu.Unlock()
			d.c.H2DBytes += int64(a[2])
			if !async {
				d.hostSync("cuMemcpyHtoD") // the synchronous call waits for the stream first
			}
			d.copyWork(name, float64(a[2]))
			return cuSuccess
		}
	}
	copyOut := func(name, syncName string, async bool) libs.GoFunc {
		return func(a []uintptr) uintptr { // (dst, src, bytes[, stream])
			d.mu.Lock()
			defer d.mu.Unlock()
			d.c.D2HBytes += int64(a[2])
			if !async || !isPinned(a[0], a[2]) {
				d.hostSync(syncName) // into pageable memory, even the async call waits
			}
			clear(unsafe.Slice((*byte)(ptr(a[0])), a[2])) // the device holds no data
			d.copyWork(name, float64(a[2]))
			return cuSuccess
		}
	}
	onDevice := func(name string, bytesArg int, scale float64) libs.GoFunc {
		return func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			d.work(name, scale*float64(a[bytesArg]), 0, 0, 0)
			return cuSuccess
		}
	}
	funcs := map[string]libs.GoFunc{
		"cuInit":             ok,
		"cuDriverGetVersion": func(a []uintptr) uintptr { set32(a[0], 12080); return cuSuccess },
		"cuDeviceGetCount":   func(a []uintptr) uintptr { set32(a[0], 1); return cuSuccess },
		"cuDeviceGet": func(a []uintptr) uintptr {
			if a[1] != 0 {
				return cuInvalidValue
			}
			set32(a[0], 0)
			return cuSuccess
		},
		"cuDeviceGetName": func(a []uintptr) uintptr {
			name := append([]byte(d.Spec.Desc+" (simulated)"), 0)
			buf := unsafe.Slice((*byte)(ptr(a[0])), a[1])
			n := copy(buf, name)
			buf[min(n, len(buf)-1)] = 0
			return cuSuccess
		},
		"cuDeviceGetAttribute": func(a []uintptr) uintptr {
			set32(a[0], attrs[driver.Attribute(int32(a[1]))])
			return cuSuccess
		},
		"cuDeviceTotalMem_v2": func(a []uintptr) uintptr { set64(a[0], uint64(d.Spec.Memory)); return cuSuccess },
		// The context holds ContextBytes of the device from its first
		// retain to its last release, as a real one does.
		"cuDevicePrimaryCtxRetain": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.contexts == 0 && d.used+ContextBytes > d.Spec.Memory {
				return cuOutOfMemory
			}
			d.contexts++
			setPtr(a[0], 1)
			return cuSuccess
		},
		"cuDevicePrimaryCtxRelease_v2": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.contexts == 0 {
				return cuInvalidValue
			}
			d.contexts--
			return cuSuccess
		},
		"cuCtxSetCurrent":     ok,
		"cuCtxSynchronize":    sync("cuCtxSynchronize"),
		"cuStreamSynchronize": sync("cuStreamSynchronize"),
		"cuEventSynchronize":  sync("cuEventSynchronize"),
		"cuStreamCreate":      func(a []uintptr) uintptr { d.mu.Lock(); setPtr(a[0], d.newHandle()); d.mu.Unlock(); return cuSuccess },
		"cuStreamDestroy_v2":  ok,
		// Stream capture: the work of the capture goes into a graph, which
		// a launch replays, each node counted as the launch it is.
		"cuStreamBeginCapture_v2": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.capture != nil {
				return cuCaptureUnsupported
			}
			d.capture = &[]node{}
			return cuSuccess
		},
		"cuStreamEndCapture": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.capture == nil {
				return cuInvalidValue
			}
			h := d.newHandle()
			d.graphs[h], d.capture = *d.capture, nil
			setPtr(a[1], h)
			return cuSuccess
		},
		"cuGraphInstantiateWithFlags": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			g, ok := d.graphs[a[1]]
			if !ok {
				return cuInvalidHandle
			}
			h := d.newHandle()
			d.execs[h] = g
			setPtr(a[0], h)
			return cuSuccess
		},
		"cuGraphLaunch": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			g, ok := d.execs[a[0]]
			if !ok {
				return cuInvalidHandle
			}
			d.replay(g)
			return cuSuccess
		},
		"cuGraphExecDestroy": func(a []uintptr) uintptr { d.mu.Lock(); delete(d.execs, a[0]); d.mu.Unlock(); return cuSuccess },
		"cuGraphDestroy":     func(a []uintptr) uintptr { d.mu.Lock(); delete(d.graphs, a[0]); d.mu.Unlock(); return cuSuccess },
		"cuStreamWaitEvent": func(a []uintptr) uintptr { // (stream, event, flags)
			d.mu.Lock()
			defer d.mu.Unlock()
			t, ok := d.events[a[1]]
			if !ok {
				return cuInvalidHandle
			}
			d.waitEvent(a[0], t)
			return cuSuccess
		},
		"cuFuncSetAttribute":   ok,
		"cuModuleUnload":       ok,
		"cuEventDestroy_v2":    func(a []uintptr) uintptr { d.mu.Lock(); delete(d.events, a[0]); d.mu.Unlock(); return cuSuccess },
		"cuEventQuery":         ok,
		"cuMemcpyHtoD_v2":      copyIn("memcpyHtoD", false),
		"cuMemcpyHtoDAsync_v2": copyIn("memcpyHtoD", true),
		"cuMemcpyDtoH_v2":      copyOut("memcpyDtoH", "cuMemcpyDtoH", false),
		"cuMemcpyDtoHAsync_v2": copyOut("memcpyDtoH", "cuMemcpyDtoHAsync", true),
		"cuMemcpyDtoD_v2":      onDevice("memcpyDtoD", 2, 2),
		"cuMemcpyDtoDAsync_v2": onDevice("memcpyDtoD", 2, 2),
		"cuMemcpyPeerAsync":    onDevice("memcpyPeer", 4, 2),
		"cuMemsetD32_v2":       onDevice("memset", 2, 4),
		"cuMemsetD32Async":     onDevice("memset", 2, 4),
		"cuMemsetD8_v2":        onDevice("memset", 2, 1),
		"cuMemsetD8Async":      onDevice("memset", 2, 1),
		"cuMemGetInfo_v2": func(a []uintptr) uintptr {
			used := d.Used() + d.contextBytes()
			set64(a[0], uint64(d.Spec.Memory-used))
			set64(a[1], uint64(d.Spec.Memory))
			return cuSuccess
		},
		"cuMemAlloc_v2": func(a []uintptr) uintptr {
			p, ok := d.alloc(uint64(a[1]))
			if !ok {
				return cuOutOfMemory
			}
			set64(a[0], p)
			return cuSuccess
		},
		"cuMemFree_v2": func(a []uintptr) uintptr {
			if !d.free(uint64(a[0])) {
				return cuInvalidValue
			}
			return cuSuccess
		},
		"cuMemHostAlloc": func(a []uintptr) uintptr {
			b := make([]byte, max(a[1], 1))
			p := uintptr(unsafe.Pointer(&b[0]))
			d.mu.Lock()
			d.pinned[p] = b
			d.c.DriverAllocs++
			d.mu.Unlock()
			setPtr(a[0], p)
			return cuSuccess
		},
		"cuMemFreeHost": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			if _, ok := d.pinned[a[0]]; !ok {
				return cuInvalidValue
			}
			delete(d.pinned, a[0])
			return cuSuccess
		},
		"cuEventCreate": func(a []uintptr) uintptr {
			d.mu.Lock()
			h := d.newHandle()
			d.events[h] = 0
			d.mu.Unlock()
			setPtr(a[0], h)
			return cuSuccess
		},
		"cuEventRecord": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			if _, ok := d.events[a[0]]; !ok {
				return cuInvalidHandle
			}
			d.events[a[0]] = d.clock(a[1])
			return cuSuccess
		},
		// The time between two events is the cost model's: the device's
		// estimated busy time between their records.
		"cuEventElapsedTime": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			from, ok1 := d.events[a[1]]
			to, ok2 := d.events[a[2]]
			if !ok1 || !ok2 {
				return cuInvalidHandle
			}
			*(*float32)(ptr(a[0])) = float32((to - from) * 1e3)
			return cuSuccess
		},
		"cuModuleLoadData": func(a []uintptr) uintptr {
			img := goString(a[1])
			id, err := strconv.ParseUint(strings.TrimPrefix(img, imagePrefix), 10, 64)
			d.mu.Lock()
			defer d.mu.Unlock()
			src, found := d.images[uintptr(id)]
			if err != nil || !strings.HasPrefix(img, imagePrefix) || !found {
				return cuInvalidValue
			}
			sigs, perr := cudakernels.ParseSignatures(src)
			if perr != nil {
				return cuInvalidValue
			}
			h := d.newHandle()
			d.modules[h] = sigs
			setPtr(a[0], h)
			return cuSuccess
		},
		"cuModuleGetFunction": func(a []uintptr) uintptr {
			name := goString(a[2])
			d.mu.Lock()
			defer d.mu.Unlock()
			for _, s := range d.modules[a[1]] {
				if s.Name == name {
					f := &function{name: name, params: s.Params, index: map[string]int{}, tensorCore: kernels.TensorCoreKernel(name)}
					for i, p := range s.Params {
						f.index[p.Name] = i
					}
					h := d.newHandle()
					d.funcs[h] = f
					setPtr(a[0], h)
					return cuSuccess
				}
			}
			return cuNotFound
		},
		// cuLaunchKernel(f, grid x, y, z, block x, y, z, shared, stream, params, extra)
		"cuLaunchKernel": func(a []uintptr) uintptr {
			d.mu.Lock()
			f := d.funcs[a[0]]
			d.mu.Unlock()
			if f == nil {
				return cuInvalidHandle
			}
			if len(f.params) > 0 && a[9] == 0 {
				return cuInvalidValue
			}
			d.launch(f, uint32(a[1]), a[9])
			return cuSuccess
		},
	}
	return libs.Virtual("cuda", "libcuda.so.1 (simulated "+d.Spec.Name+")", funcs)
}

// String describes the device for messages.
func (d *Device) String() string {
	return fmt.Sprintf("simulated %s (%.0f GB, %.2f TB/s, %.0f TFLOP/s bf16)", d.Spec.Desc, float64(d.Spec.Memory)/1e9, d.Spec.HBM/1e12, d.Spec.BF16)
}
