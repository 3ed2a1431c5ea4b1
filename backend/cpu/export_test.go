package cpu

// AMXPortable runs the AMX product with its portable kernel, the twin of
// the assembly, until restore is called (for the external tests).
func AMXPortable() (restore func()) {
	k := amxKernel
	amxKernel = amxKernelGo
	return func() { amxKernel = k }
}

// AMXOffered reports whether the AMX product passed its self-check here,
// and if not, why.
func AMXOffered() (bool, string) { return amxProduct.offered(), amxProduct.status() }
