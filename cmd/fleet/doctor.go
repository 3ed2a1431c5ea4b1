package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/fleetml/fleet/backend/gpu/cuda"
	"github.com/fleetml/fleet/backend/gpu/opencl"
)

// doctorCmd reports what fleet found of NVIDIA's driver, libraries and
// devices, and fails unless training on the GPU will work.
func doctorCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: fleet doctor\n\nReports the NVIDIA driver, libraries and devices fleet finds, runs a kernel\nand a matrix product on cuda:0, and exits 0 only if training on the GPU will work.\nIt also lists the OpenCL platforms and devices it finds.")
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	err := cuda.Doctor(stdout)
	fmt.Fprintln(stdout)
	opencl.Doctor(stdout)
	if err != nil {
		return fmt.Errorf("no usable GPU: %w", err)
	}
	return nil
}
