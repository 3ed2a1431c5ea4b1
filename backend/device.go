package backend

import (
	"fmt"
	"strconv"
	"strings"
)

// Device names a place where tensors live: "cpu", "cpu:1" (a logical CPU
// device, for pipeline tests), "cuda:0", or a named device such as
// "sim:h200" (a simulated GPU; its Index is the name's, see RegisterNamed).
type Device struct {
	Kind  string
	Index int
}

// CPU is the default host device.
var CPU = Device{Kind: "cpu"}

// OnCPU reports whether d is the CPU backend's: cpu, or a logical cpu:N.
func (d Device) OnCPU() bool { return d.Kind == CPU.Kind }

// IsCUDA reports whether d is one of CUDA's numbered GPUs: one process's
// own device, which NCCL can reduce in and NVML numbers. Code that needs
// more of a device asks its backend what it can do (HostMemory,
// ThreadBudget, ...); these two are the questions the registry answers
// from a device's kind.
func (d Device) IsCUDA() bool { return d.Kind == "cuda" }

func (d Device) String() string {
	if d.Kind == "cpu" && d.Index == 0 {
		return "cpu"
	}
	if names := deviceNames(d.Kind); d.Index >= 0 && d.Index < len(names) {
		return d.Kind + ":" + names[d.Index]
	}
	return d.Kind + ":" + strconv.Itoa(d.Index)
}

// ParseDevice parses a device name: "cpu", "cpu:N" (a logical CPU
// device), or a kind the registry holds: KIND (meaning KIND:0) or KIND:N
// for a kind of numbered devices ("cuda", "cuda:1", "opencl:0"), KIND:NAME
// for a kind of named devices ("sim:h200"). Its error lists the choices
// (Choices).
func ParseDevice(s string) (Device, error) {
	kind, idx, found := strings.Cut(s, ":")
	d := Device{Kind: kind}
	if names := deviceNames(kind); names != nil {
		for i, n := range names {
			if found && strings.EqualFold(idx, n) {
				return Device{Kind: kind, Index: i}, nil
			}
		}
		return Device{}, fmt.Errorf("unknown device %q (want %s:NAME, NAME one of %s)", s, kind, strings.Join(names, ", "))
	}
	if kind != "cpu" && !registered(kind) {
		return Device{}, fmt.Errorf("unknown device %q (want %s)", s, choices(true))
	}
	if found {
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 {
			return Device{}, fmt.Errorf("bad device index in %q", s)
		}
		d.Index = n
	}
	return d, nil
}

// Choices lists, for a --device flag's help, the devices ParseDevice
// takes, from the registry: "cpu, cuda:N, opencl:N, sim:h200|h100|a100"
// where the CUDA, OpenCL and simulated GPUs' drivers are linked in.
func Choices() string { return choices(false) }

// choices lists the registered kinds: cpu first, then each numbered kind
// as KIND:N (with all, as KIND and KIND:N, and cpu:N too), each named
// kind as KIND:NAME|NAME..., in the kinds' order.
func choices(all bool) string {
	out := []string{"cpu"}
	if all {
		out = append(out, "cpu:N")
	}
	for _, k := range Kinds() {
		if k == "cpu" {
			continue
		}
		if names := deviceNames(k); names != nil {
			out = append(out, k+":"+strings.Join(names, "|"))
		} else if all {
			out = append(out, k, k+":N")
		} else {
			out = append(out, k+":N")
		}
	}
	return strings.Join(out, ", ")
}

// Resolve parses a --device value and opens it. "auto" picks cuda:0 when
// a CUDA backend is registered and opens, and the CPU otherwise; any other
// name must open, or the error says why it cannot.
func Resolve(name string) (Device, error) {
	if name == "auto" {
		cuda := Device{Kind: "cuda"}
		if _, err := Get(cuda); err == nil {
			return cuda, nil
		}
		return CPU, nil
	}
	d, err := ParseDevice(name)
	if err != nil {
		return d, err
	}
	if _, err := Get(d); err != nil {
		return d, err
	}
	return d, nil
}
