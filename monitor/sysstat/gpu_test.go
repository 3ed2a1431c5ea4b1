package sysstat

import (
	"errors"
	"testing"
	"time"

	"github.com/fleetml/fleet/monitor/nvml"
	"github.com/fleetml/fleet/monitor/nvml/nvmltest"
)

// The GPU sampler against the stand-in NVML.
func TestGPUSamplerStandIn(t *testing.T) {
	if !nvmltest.InChild() {
		nvmltest.Run(t, nvmltest.Build(t), "TestGPUSamplerStandIn")
		return
	}
	if _, err := NewGPUSampler(2, time.Millisecond); !nvml.IsCode(err, nvml.ErrorInvalidArgument) {
		t.Errorf("sampler of GPU 2 of 2: %v", err)
	}
	s, err := NewGPUSampler(1, 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	time.Sleep(20 * time.Millisecond)
	st := s.Stop()
	used := uint64(2<<30 | 4321)
	if st.Source != "GPU 1 (Fake GPU 1)" || st.Samples < 2 || st.Errors != 0 {
		t.Fatalf("%+v", st)
	}
	if st.MeanUtil != 38 || st.PeakUtil != 38 || st.MeanUsed != used || st.PeakUsed != used || st.Total != 80<<30 || st.PeakProcCPU != 0 {
		t.Errorf("stats %+v: want util 38%%, used %d of %d", st, used, uint64(80<<30))
	}
	t.Log(st)
}

// The GPU sampler on a real GPU, where there is one.
func TestGPUSampler(t *testing.T) {
	if nvmltest.InChild() {
		t.Skip("the stand-in is tested above")
	}
	s, err := NewGPUSampler(0, 10*time.Millisecond)
	if errors.Is(err, nvml.ErrLibraryNotFound) || nvml.IsCode(err, nvml.ErrorDriverNotLoaded) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	time.Sleep(100 * time.Millisecond)
	st := s.Stop()
	if st.Samples < 3 || st.Errors != 0 || st.Total < 1<<30 || st.PeakUsed == 0 || st.PeakUsed > st.Total || st.PeakUtil > 100 {
		t.Errorf("%+v", st)
	}
	t.Log(st)
}

// BenchmarkGPUSample is the cost of one GPU sample (two NVML calls).
func BenchmarkGPUSample(b *testing.B) {
	src, err := NewGPUSource(0)
	if err != nil {
		b.Skipf("no GPU: %v", err)
	}
	defer src.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := src.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
