package config

// CPUBF16Auto reports whether CPUBF16 leaves the CPU's BF16 product to the
// run (auto, or ""): a resume's recorded product, else rank 0's choice.
func (c Config) CPUBF16Auto() bool { return orDefault(c.CPUBF16, "auto") == "auto" }
