package launch

import (
	"strconv"
	"strings"
)

// EnvVisibleDevices is the CUDA driver's list of the GPUs a process may
// use, which renumbers them from 0.
const EnvVisibleDevices = "CUDA_VISIBLE_DEVICES"

// PhysicalGPU maps a CUDA device ordinal to the index of the same GPU
// among all the machine's GPUs (NVML's numbering, which ignores
// CUDA_VISIBLE_DEVICES), given visible, the variable's value: with a list
// of indices there, ordinal i is the list's i-th entry. An empty value, a
// list of UUIDs, or an ordinal past the list maps to itself.
func PhysicalGPU(ordinal int, visible string) int {
	if visible == "" {
		return ordinal
	}
	list := strings.Split(visible, ",")
	if ordinal < len(list) {
		if n, err := strconv.Atoi(strings.TrimSpace(list[ordinal])); err == nil && n >= 0 {
			return n
		}
	}
	return ordinal
}
