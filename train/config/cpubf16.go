package config

import (
	"fmt"
	"io"

	fcpu "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/internal/setting"
)

// CPUBF16Auto reports whether CPUBF16 leaves the CPU's BF16 product to the
// run (auto, or ""): a resume's recorded product, else rank 0's choice.
func (c Config) CPUBF16Auto() bool { return orDefault(c.CPUBF16, "auto") == "auto" }

// SettleCPUBF16 decides which BF16 product the CPU runs in a bf16 run on
// the CPU (Config.CPUBF16), sets it in the backend with set (the CPU
// backend's fcpu.SetBF16Product, which refuses a product that this CPU
// lacks or that failed its self-check; tests stand in a CPU without
// AVX512-BF16), and writes it into cfg, so that config.json and every
// checkpoint record it. Under auto a resume takes the checkpoint's
// recorded product (was: the checkpoint's run, nil for a new run), and a
// new run rank 0's (plan: timed once, so that the ranks of a job agree);
// a product given by name is taken as it is (on a resume, a different
// one than the checkpoint's is then a changed setting: see ResumeCheck).
// One this CPU cannot run is refused, naming it.
func SettleCPUBF16(cfg *Config, plan OutPlan, resumeDir string, was *RunConfig, set func(product string) error, log io.Writer) error {
	want, how := orDefault(cfg.CPUBF16, "auto"), "given"
	if want == "auto" && was != nil && orDefault(was.Train.CPUBF16, "auto") != "auto" {
		want, how = was.Train.CPUBF16, "the checkpoint's"
	}
	if want == "auto" {
		if plan.CPUBF16 == "" && plan.CPUBF16How != "" {
			return setting.Errorf("{CPUBF16} auto: rank 0 found no bf16 product for the job: %s", plan.CPUBF16How)
		}
		if plan.CPUBF16 == "" {
			return setting.Errorf("{CPUBF16} auto: rank 0 runs no bf16 product on the CPU, so it chose none for the job; name one with {CPUBF16}")
		}
		want, how = plan.CPUBF16, plan.CPUBF16How
		if cfg.Rank != 0 {
			how = "rank 0's: " + how
		}
	}
	if err := set(want); err != nil {
		if how == "the checkpoint's" {
			return setting.Errorf("{Resume}: checkpoint %s was trained with the CPU's bf16 product %q: %w; "+
				"resume on a CPU that has it, or add {AllowChanges} and {CPUBF16} widen to continue with the other product", resumeDir, want, err)
		}
		return setting.Errorf("{CPUBF16} %s: %w", want, err)
	}
	cfg.CPUBF16 = want
	fmt.Fprintf(log, "precision: the CPU's bf16 products: %s (%s; %s)\n", want, fcpu.BF16ProductWhat(want), how)
	return nil
}
