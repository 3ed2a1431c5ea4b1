package sim

import (
	"strconv"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// NVRTC is the stand-in for libnvrtc: it "compiles" a program by keeping
// its source, under an id that its image names, so that the driver
// stand-in can read the kernels' parameters from it when it loads the
// image.
func (d *Device) NVRTC() *libs.Lib {
	set32 := func(p uintptr, v int32) { *(*int32)(ptr(p)) = v }
	set64 := func(p uintptr, v uint64) { *(*uint64)(ptr(p)) = v }
	image := func(prog uintptr) string { return imagePrefix + strconv.FormatUint(uint64(prog), 10) + "\x00" }
	ok := func(a []uintptr) uintptr { return 0 }
	archs := []int32{70, 75, 80, 86, 89, 90}
	size := func(a []uintptr) uintptr { // (prog, size*)
		set64(a[1], uint64(len(image(a[0]))))
		return 0
	}
	get := func(a []uintptr) uintptr { // (prog, buf)
		img := image(a[0])
		copy(unsafe.Slice((*byte)(ptr(a[1])), len(img)), img)
		return 0
	}
	funcs := map[string]libs.GoFunc{
		"nvrtcVersion": func(a []uintptr) uintptr { set32(a[0], 12); set32(a[1], 8); return 0 },
		"nvrtcGetErrorString": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.cstring("NVRTC_ERROR " + strconv.Itoa(int(int32(a[0]))))
		},
		// nvrtcCreateProgram(prog*, src, name, numHeaders, headers, includeNames)
		"nvrtcCreateProgram": func(a []uintptr) uintptr {
			src := goString(a[1])
			d.mu.Lock()
			h := d.newHandle()
			d.programs[h] = src
			d.mu.Unlock()
			*(*uintptr)(ptr(a[0])) = h
			return 0
		},
		"nvrtcDestroyProgram": func(a []uintptr) uintptr {
			d.mu.Lock()
			delete(d.programs, *(*uintptr)(ptr(a[0])))
			d.mu.Unlock()
			return 0
		},
		"nvrtcCompileProgram": func(a []uintptr) uintptr {
			d.mu.Lock()
			defer d.mu.Unlock()
			src, found := d.programs[a[0]]
			if !found {
				return 5 // NVRTC_ERROR_INVALID_PROGRAM
			}
			d.images[a[0]] = src
			return 0
		},
		"nvrtcGetProgramLogSize": func(a []uintptr) uintptr { set64(a[1], 1); return 0 },
		"nvrtcGetProgramLog":     func(a []uintptr) uintptr { *(*byte)(ptr(a[1])) = 0; return 0 },
		"nvrtcGetCUBINSize":      size,
		"nvrtcGetCUBIN":          get,
		"nvrtcGetPTXSize":        size,
		"nvrtcGetPTX":            get,
		"nvrtcGetNumSupportedArchs": func(a []uintptr) uintptr {
			set32(a[0], int32(len(archs)))
			return 0
		},
		"nvrtcGetSupportedArchs": func(a []uintptr) uintptr {
			copy(unsafe.Slice((*int32)(ptr(a[0])), len(archs)), archs)
			return 0
		},
		"nvrtcAddNameExpression": ok,
	}
	return libs.Virtual("nvrtc", "libnvrtc.so.12 (simulated)", funcs)
}
