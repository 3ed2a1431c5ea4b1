package backend

import (
	"fmt"
	"sort"
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

func (d Device) String() string {
	if d.Kind == "cpu" && d.Index == 0 {
		return "cpu"
	}
	if names := deviceNames(d.Kind); d.Index >= 0 && d.Index < len(names) {
		return d.Kind + ":" + names[d.Index]
	}
	return d.Kind + ":" + strconv.Itoa(d.Index)
}

// ParseDevice parses "cpu", "cpu:N", "cuda" (meaning cuda:0), "cuda:N",
// or KIND:NAME for a kind of named devices ("sim:h200").
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
	if kind != "cpu" && kind != "cuda" && kind != "opencl" {
		return Device{}, fmt.Errorf("unknown device %q (want cpu, cpu:N, cuda, cuda:N, opencl or opencl:N%s)", s, namedKinds())
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

// namedKinds lists the kinds of named devices for a message: ", sim:NAME".
func namedKinds() string {
	namedMu.Lock()
	defer namedMu.Unlock()
	var ks []string
	for k := range named {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		b.WriteString(", " + k + ":" + strings.Join(named[k], "|"))
	}
	return b.String()
}
