package emu

import (
	"fmt"
	"strings"

	"github.com/fleetml/fleet/backend/gpu/cuda/kernels"
)

// Param is one parameter of a kernel, as declared in its source.
type Param = kernels.Param

// kernelSig is a parsed `extern "C" __global__ void name(params)`.
type kernelSig = kernels.Signature

// parseKernels finds every extern "C" __global__ kernel in src with its
// parameters.
func parseKernels(src string) ([]kernelSig, error) { return kernels.ParseSignatures(src) }

// launchSymbol is the name of the generated launcher for kernel.
func launchSymbol(kernel string) string { return "fleet_emu_launch_" + kernel }

// wrappers returns the C++ that follows the kernel source: per kernel, a body
// that unpacks args the way cuLaunchKernel's kernelParams are laid out
// (args[i] points at the i-th argument), a check that the parsed parameter
// types are the compiler's, and the exported launcher.
func wrappers(sigs []kernelSig) string {
	var b strings.Builder
	for _, s := range sigs {
		var call, types []string
		for i, p := range s.Params {
			call = append(call, fmt.Sprintf("*(%s *)a[%d]", p.Type, i))
			types = append(types, p.Type)
		}
		fmt.Fprintf(&b, "static void fleet_emu_body_%s(void **a) {\n\t(void)a;\n\t%s(%s);\n}\n", s.Name, s.Name, strings.Join(call, ", "))
		fmt.Fprintf(&b, "static_assert(std::is_same_v<fleet_emu::params_t<decltype(%s)>, void(%s)>, \"emu parsed the parameters of %s wrong\");\n",
			s.Name, strings.Join(types, ", "), s.Name)
		fmt.Fprintf(&b, "extern \"C\" int %s(const fleet_emu::Launch *l, void **a) {\n\treturn fleet_emu::launch(l, a, fleet_emu_body_%s, %q);\n}\n\n",
			launchSymbol(s.Name), s.Name, s.Name)
	}
	return b.String()
}
