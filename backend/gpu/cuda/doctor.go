package cuda

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/cublas"
	"github.com/fleetml/fleet/backend/gpu/cuda/driver"
	"github.com/fleetml/fleet/backend/gpu/cuda/nvrtc"
	"github.com/fleetml/fleet/backend/gpu/libs"
)

// Doctor writes what torch.cuda.is_available() and nvidia-smi -L tell
// together: the driver and CUDA versions, each NVIDIA library with its path
// and version or why it was not found, and each device with its name,
// compute capability, memory and SM count. Then it runs a kernel and a
// matrix product on cuda:0. It returns nil only if training on the GPU
// will work, and otherwise an error that says why not.
func Doctor(w io.Writer) error {
	var problems []error
	d, derr := driver.Open()
	if derr == nil {
		derr = d.Init()
	}
	_, nerr := nvrtc.Open()
	_, berr := cublas.Open()
	for _, l := range libs.All() {
		libs.Open(l) // for the report; the ones training needs are checked below
	}
	if derr == nil {
		v, err := d.DriverVersion()
		if err == nil {
			fmt.Fprintf(w, "driver: supports CUDA %s\n", driver.VersionString(v))
		}
	}
	fmt.Fprintln(w, "libraries:")
	byName := map[string]libs.Library{}
	for _, l := range libs.All() {
		byName[l.Name] = l
	}
	for _, r := range libs.Report() {
		if r.Err != nil {
			fmt.Fprintf(w, "  %-9s not found: %v\n", r.Name, r.Err)
			if l, ok := byName[r.Name]; ok {
				fmt.Fprintf(w, "  %-9s provided by: %s\n", "", libs.InstallHint(l))
			}
			continue
		}
		fmt.Fprintf(w, "  %-9s %s (%s)\n", r.Name, orUnknown(r.Version), r.Lib.Path)
	}
	for _, e := range []struct {
		err  error
		need string
		lib  libs.Library
	}{{derr, "the CUDA driver", libs.CUDA}, {nerr, "NVRTC, to compile kernels", libs.NVRTC}, {berr, "cuBLAS, for matrix products", libs.CUBLAS}} {
		if e.err != nil {
			problems = append(problems, fmt.Errorf("missing %s (provided by: %s): %w", e.need, libs.InstallHint(e.lib), e.err))
		}
	}
	n := 0
	if derr == nil {
		var err error
		if n, err = d.DeviceCount(); err != nil {
			problems = append(problems, err)
		}
		fmt.Fprintf(w, "devices: %d\n", n)
		for i := 0; i < n; i++ {
			info, err := d.DeviceInfo(i)
			if err != nil {
				fmt.Fprintf(w, "  cuda:%d: %v\n", i, err)
				continue
			}
			fmt.Fprintf(w, "  cuda:%d: %s, compute capability %d.%d, %.1f GiB, %d SMs\n",
				i, info.Name, info.Major, info.Minor, float64(info.TotalMem)/(1<<30), info.SMs)
		}
		if n == 0 {
			problems = append(problems, errors.New("the driver sees no GPU"))
		}
	}
	if len(problems) == 0 {
		if err := smoke(); err != nil {
			problems = append(problems, fmt.Errorf("cuda:0 does not work: %w", err))
		} else {
			fmt.Fprintln(w, "check: a kernel and a matrix product ran on cuda:0; training on the GPU will work")
		}
	}
	return errors.Join(problems...)
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}

// smoke runs a fill kernel and a small matrix product on cuda:0 and checks
// the results on the host.
func smoke() (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
				return
			}
			panic(r)
		}
	}()
	b, err := backend.Get(backend.Device{Kind: "cuda"})
	if err != nil {
		return err
	}
	const n = 4
	a, c := b.Alloc(backend.F32, n*n), b.Alloc(backend.F32, n*n)
	defer b.Free(a)
	defer b.Free(c)
	b.Fill(backend.Ref{S: a}, 0.5, n*n)
	b.MatMul(backend.MatMul{Batch: 1, M: n, N: n, K: n, Alpha: 1}, backend.Ref{S: a}, backend.Ref{S: a}, backend.Ref{S: c}, backend.Ref{})
	got := make([]float32, n*n)
	b.Download(backend.AsBytes(got), backend.Ref{S: c})
	for i, v := range got {
		if math.Abs(float64(v)-1) > 1e-6 {
			return fmt.Errorf("a 4×4 product of halves gave %v at %d, want 1", v, i)
		}
	}
	return nil
}
