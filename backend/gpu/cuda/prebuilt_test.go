package cuda

import (
	"testing"

	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/cuda/nvrtc"
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/backend/gpu/kcache"
)

// TestPrebuiltKernels: a kernel file's image in the prebuilt folder
// ($FLEET_KERNEL_PREBUILT) is loaded without compiling; one the driver
// will not load is compiled instead. On the simulated H100, whose
// NVRTC's images its driver alone loads.
func TestPrebuiltKernels(t *testing.T) {
	var file cudakernels.File
	for _, f := range cudakernels.Files() {
		if f.Name == "elementwise.cu" {
			file = f
		}
	}
	src := cudakernels.NVRTCSource(file)
	open := func() (*driverGPU, *kcache.Cache) {
		g, err := openSimulated(sim.Specs[1])
		if err != nil {
			t.Fatal(err)
		}
		c, err := kcache.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		g.prebuilt = c
		return g, c
	}
	key := func(g *driverGPU) string { return kcache.PrebuiltKey(src, g.arch, nvrtc.KernelOptions) }

	// An image this driver cannot load: compiled here instead.
	g, c := open()
	if err := c.Put(key(g), []byte("\x7fELF not a cubin\x00")); err != nil {
		t.Fatal(err)
	}
	if fn, err := g.function("fleet_fill_f32"); err != nil || fn == 0 {
		t.Fatalf("with a bad prebuilt image: %v, %v", fn, err)
	}

	// A loadable image: taken, and NVRTC (removed) never asked.
	img, _, err := g.nv.Compile(src, file.Name, g.target, nvrtc.KernelOptions...)
	if err != nil {
		t.Fatal(err)
	}
	g2, c2 := open()
	g2.sim = g.sim // the image is the first device's: load it there
	g2.d, g2.nv = g.d, nil
	if err := c2.Put(key(g2), img); err != nil {
		t.Fatal(err)
	}
	fn, err := g2.function("fleet_binary_f32")
	if err != nil || fn == 0 || g2.fns["fleet_fill_f32"] == 0 {
		t.Fatalf("from the prebuilt image: %v, %v (bound %v)", fn, err, g2.fns)
	}
}
