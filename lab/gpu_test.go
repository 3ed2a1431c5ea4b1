package lab

import (
	"io"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/cpu"
)

// fakeGPU is the CPU backend dressed as a GPU: a name, a peak table and
// pinned uploads, so that the GPU branches of the experiments run here.
type fakeGPU struct{ *cpu.CPU }

func (fakeGPU) Name() string { return "Fake GPU" }

func (fakeGPU) PeakTFLOPs(dt backend.DType) (float64, bool) {
	if dt == backend.BF16 {
		return 2, true
	}
	return 1, true
}

func (fakeGPU) PinnedAlloc(n int) ([]byte, error) { return make([]byte, n), nil }
func (fakeGPU) PinnedFree([]byte) error           { return nil }
func (g fakeGPU) UploadAsync(dst backend.Ref, src []byte) backend.Upload {
	g.Upload(dst, src)
	return backend.DoneUpload{}
}

var fakeDev = backend.Device{Kind: "fake"}

func TestGPUBranches(t *testing.T) {
	if testing.Short() {
		t.Skip("times matrix products")
	}
	be := fakeGPU{cpu.New(fakeDev)}
	o := Options{Quick: true, Log: io.Discard}
	c, err := hostToDevice(fakeDev, be, o)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Applicable || len(c.Points) != 2 || !strings.Contains(c.Summary, "pinned") {
		t.Fatalf("copies: %+v", c)
	}
	for _, p := range c.Points {
		if !(p.PageableGBs > 0 && p.PinnedGBs > 0) {
			t.Errorf("copy of %d bytes: %+v", p.Bytes, p)
		}
	}
	o.MaxBytes = 1 << 20
	v, err := vectorAdd(fakeDev, be, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Points) != 3 || v.LLCBytes != 0 {
		t.Errorf("vector add up to 1 MiB on a GPU: %+v", v)
	}
	if deviceName(be) != "Fake GPU" {
		t.Errorf("device name %q", deviceName(be))
	}
	if src, measure := utilMeter(fakeDev, be); !strings.HasPrefix(src, "not measured") {
		t.Logf("utilisation: %s", src) // a machine with NVML
	} else if u, err := measure(func() error { return nil }); u != -1 || err != nil {
		t.Errorf("unmeasured utilisation %v, %v", u, err)
	}
}
