package main

import (
	"flag"
	"fmt"
	"io"

	fcpu "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/backend/gpu/cuda"
	"github.com/fleetml/fleet/backend/gpu/opencl"
)

// doctorCmd reports what fleet found of NVIDIA's driver, libraries and
// devices, and fails unless training on the GPU will work. It also lists
// the OpenCL devices, and the CPU's bf16 products, each "checked" (it
// matched its portable twin here) or why it is not offered.
func doctorCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fleet doctor\n\nReports the NVIDIA driver, libraries and devices fleet finds, runs a kernel\nand a matrix product on cuda:0, and exits 0 only if training on the GPU will work.\nIt also lists the OpenCL platforms and devices it finds, and the CPU's bf16\nproducts: each checked against its portable twin, or why it is not offered.")
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	err := cuda.Doctor(stdout)
	fmt.Fprintln(stdout)
	opencl.Doctor(stdout)
	fmt.Fprintln(stdout)
	cpuDoctor(stdout)
	if err != nil {
		return fmt.Errorf("no usable GPU: %w", err)
	}
	return nil
}

// cpuDoctor lists the CPU's bf16 products (--cpu-bf16), running their
// self-checks, and the one --cpu-bf16 auto would run here.
func cpuDoctor(w io.Writer) {
	fmt.Fprintf(w, "CPU: %s\n  bf16 products (--cpu-bf16):\n", fcpu.Model())
	for _, p := range fcpu.BF16Products() {
		fmt.Fprintf(w, "    %-6s %-42s %s\n", p.Name, p.What, p.State)
	}
	kind, how := fcpu.BF16Product()
	if kind == "" {
		kind = "none"
	}
	fmt.Fprintf(w, "  auto runs: %s (%s)\n", kind, how)
}
