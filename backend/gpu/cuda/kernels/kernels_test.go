package kernels

import (
	"strings"
	"testing"
)

func TestFilesAndKernels(t *testing.T) {
	fs := Files()
	if len(fs) == 0 {
		t.Fatal("no kernel files embedded")
	}
	seen := map[string]string{}
	for _, f := range fs {
		if strings.Contains(f.Source, "#include") {
			t.Errorf("%s includes a header; kernels include none", f.Name)
		}
		ks := Kernels(f.Source)
		if len(ks) == 0 {
			t.Errorf("%s declares no extern \"C\" __global__ kernel", f.Name)
		}
		if n := strings.Count(f.Source, "__global__"); n != len(ks) {
			t.Errorf("%s: %d __global__ but %d extern \"C\" kernels; every kernel must be extern \"C\"", f.Name, n, len(ks))
		}
		for _, k := range ks {
			if !strings.HasPrefix(k, "fleet_") {
				t.Errorf("%s: kernel %s lacks the fleet_ prefix", f.Name, k)
			}
			if prev, dup := seen[k]; dup {
				t.Errorf("kernel %s in both %s and %s", k, prev, f.Name)
			}
			seen[k] = f.Name
		}
	}
	if !strings.Contains(NVRTCSource(fs[0]), "FLEET_NVRTC") {
		t.Error("NVRTC source lacks its prelude")
	}
}
