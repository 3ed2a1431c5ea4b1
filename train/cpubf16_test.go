package train

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	fcpu "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/train/config"
)

// TestCPUBF16Recorded: a bf16 run on the CPU records the BF16 product it
// ran in config.json and its checkpoints; a resume under auto runs the
// checkpoint's, whatever this process would choose, and so ends bit for
// bit where the uninterrupted run does; a resume that names the other
// product is a changed setting, refused without --allow-changes; and a
// checkpoint whose product this CPU lacks is refused, naming it.
func TestCPUBF16Recorded(t *testing.T) {
	base := ddpConfig(t, 21)
	base.Precision, base.MaxIters, base.LRDecayIters, base.CkptInterval = "bf16", 10, 10, 5
	hasDot := fcpu.SetBF16Product(fcpu.BF16ProductDot) == nil
	defer fcpu.SetBF16Product(fcpu.BF16ProductWiden)
	// An fp32 run runs no bf16 product on the CPU and records none, even
	// where one was named, so that none binds its resumes.
	fp32 := base
	fp32.Precision, fp32.CPUBF16, fp32.MaxIters, fp32.Out = "fp32", fcpu.BF16ProductWiden, 2, filepath.Join(t.TempDir(), "fp32")
	runSingleIn(t, fp32)
	if b, err := os.ReadFile(filepath.Join(fp32.Out, ConfigFile)); err != nil || strings.Contains(string(b), `"cpu_bf16"`) {
		t.Errorf("an fp32 run's config.json records a bf16 product (%v):\n%s", err, b)
	}
	for _, kind := range []string{fcpu.BF16ProductWiden, fcpu.BF16ProductDot} {
		t.Run(kind, func(t *testing.T) {
			if kind == fcpu.BF16ProductDot && !hasDot {
				cfg := base
				cfg.CPUBF16, cfg.Out = kind, filepath.Join(t.TempDir(), "out")
				if _, err := Run(cfg, new(strings.Builder)); err == nil || !strings.Contains(err.Error(), "AVX512-BF16") {
					t.Fatalf("--cpu-bf16 dot on a CPU without AVX512-BF16: %v", err)
				}
				t.Skip("this CPU has no AVX512-BF16: the dot products are refused, as they should be")
			}
			other := fcpu.BF16ProductDot
			if kind == fcpu.BF16ProductDot {
				other = fcpu.BF16ProductWiden
			}
			cfg := base
			cfg.CPUBF16 = kind
			whole := runSingle(t, cfg)

			first := cfg
			first.Out, first.MaxIters = filepath.Join(t.TempDir(), "first"), 5
			runSingleIn(t, first)
			var rc config.RunConfig
			b, err := os.ReadFile(filepath.Join(first.Out, ConfigFile))
			if err == nil {
				err = json.Unmarshal(b, &rc)
			}
			if err != nil || rc.Train.CPUBF16 != kind {
				t.Fatalf("config.json records the product %q (%v), want %q", rc.Train.CPUBF16, err, kind)
			}

			// This process would run the other product now; auto takes the
			// checkpoint's.
			if hasDot {
				if err := fcpu.SetBF16Product(other); err != nil {
					t.Fatal(err)
				}
			}
			next := first
			next.Out, next.MaxIters, next.Resume, next.CPUBF16 = filepath.Join(t.TempDir(), "next"), 10, true, "auto"
			if err := copyDir(first.Out, next.Out); err != nil {
				t.Fatal(err)
			}
			var log strings.Builder
			res, err := Run(next, &log)
			if err != nil {
				t.Fatalf("resume: %v\n%s", err, log.String())
			}
			if want := "the CPU's bf16 products: " + kind; !strings.Contains(log.String(), want) || !strings.Contains(log.String(), "the checkpoint's") {
				t.Errorf("the resume's log does not say it runs the checkpoint's product (%q):\n%s", want, log.String())
			}
			path := filepath.Join(t.TempDir(), "w.safetensors")
			if err := res.Model.SaveWeights(path, nil); err != nil {
				t.Fatal(err)
			}
			resumed := loadFile(t, path)
			if name := sameBits(resumed, whole); name != "" {
				t.Errorf("resumed with the checkpoint's product, %s differs from the uninterrupted run's (%.3g)", name, maxDiff(t, resumed, whole))
			}

			if hasDot { // the products differ, so the check above can see a wrong one
				o := cfg
				o.CPUBF16 = other
				if name := sameBits(runSingle(t, o), whole); name == "" {
					t.Errorf("the %s and %s products trained to the same bits: the test cannot tell them apart", kind, other)
				}
			}
			if hasDot { // naming the other product changes a setting
				again := next
				again.Out, again.CPUBF16 = filepath.Join(t.TempDir(), "again"), other
				if err := copyDir(first.Out, again.Out); err != nil {
					t.Fatal(err)
				}
				_, err := Run(again, new(strings.Builder))
				if err == nil || !strings.Contains(err.Error(), "CPUBF16") || !strings.Contains(err.Error(), kind) || !strings.Contains(err.Error(), other) {
					t.Errorf("a resume naming the other product: %v", err)
				}
			}
			if kind != fcpu.BF16ProductDot {
				return
			}
			// A CPU without AVX512-BF16 cannot continue a run of dot products.
			defer func(f func(string) error) { setBF16Product = f }(setBF16Product)
			setBF16Product = func(k string) error {
				if k == fcpu.BF16ProductDot {
					return errors.New("cpu: the bf16 product \"dot\" needs AVX512-BF16 (VDPBF16PS), which this CPU lacks")
				}
				return fcpu.SetBF16Product(k)
			}
			lacking := next
			lacking.Out = filepath.Join(t.TempDir(), "lacking")
			if err := copyDir(first.Out, lacking.Out); err != nil {
				t.Fatal(err)
			}
			_, err = Run(lacking, new(strings.Builder))
			if err == nil || !strings.Contains(err.Error(), `trained with the CPU's bf16 product "dot"`) || !strings.Contains(err.Error(), "AVX512-BF16") {
				t.Errorf("a dot checkpoint on a CPU without AVX512-BF16: %v", err)
			}
		})
	}
}

// loadFile loads a weights file, failing the test where it cannot.
func loadFile(t *testing.T, path string) *checkpoint.File {
	t.Helper()
	f, err := checkpoint.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestCPUBF16AMXRefused: --cpu-bf16 amx on a CPU that does not offer the
// AMX product is refused before training, saying why. Where AMX is
// offered it skips (TestAMXRunMatchesTwin runs it there).
func TestCPUBF16AMXRefused(t *testing.T) {
	if fcpu.SetBF16Product(fcpu.BF16ProductAMX) == nil {
		fcpu.SetBF16Product(fcpu.BF16ProductWiden)
		t.Skip("this CPU offers the AMX product")
	}
	defer fcpu.SetBF16Product(fcpu.BF16ProductWiden)
	cfg := ddpConfig(t, 5)
	cfg.Precision, cfg.CPUBF16, cfg.MaxIters = "bf16", fcpu.BF16ProductAMX, 2
	_, err := Run(cfg, new(strings.Builder))
	if err == nil || !strings.Contains(err.Error(), ` amx: cpu: the bf16 product "amx" is not offered on this CPU: `) {
		t.Fatalf("--cpu-bf16 amx without AMX: %v", err)
	}
	t.Log(err)
}
