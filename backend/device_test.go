package backend

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// registerKinds registers, once, the GPU kinds the tests parse (the
// drivers that register them sit above this package).
var registerKinds = sync.OnceFunc(func() {
	open := func(int) (Backend, error) { return nil, errors.New("a test's kind") }
	Register("cuda", open)
	Register("opencl", open)
})

func TestParseDevice(t *testing.T) {
	registerKinds()
	cases := []struct {
		in   string
		want Device
		str  string
	}{
		{"cpu", Device{Kind: "cpu"}, "cpu"},
		{"cpu:0", Device{Kind: "cpu"}, "cpu"},
		{"cpu:1", Device{Kind: "cpu", Index: 1}, "cpu:1"},
		{"cpu:12", Device{Kind: "cpu", Index: 12}, "cpu:12"},
		{"cuda", Device{Kind: "cuda"}, "cuda:0"},
		{"cuda:0", Device{Kind: "cuda"}, "cuda:0"},
		{"cuda:3", Device{Kind: "cuda", Index: 3}, "cuda:3"},
	}
	for _, c := range cases {
		got, err := ParseDevice(c.in)
		if err != nil {
			t.Errorf("ParseDevice(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseDevice(%q) = %#v, want %#v", c.in, got, c.want)
		}
		if s := got.String(); s != c.str {
			t.Errorf("ParseDevice(%q).String() = %q, want %q", c.in, s, c.str)
		}
		// String is canonical: parsing it again gives the same device.
		again, err := ParseDevice(got.String())
		if err != nil || again != got {
			t.Errorf("ParseDevice(%q) = %v, %v; want %v", got.String(), again, err, got)
		}
	}
	if CPU.String() != "cpu" {
		t.Errorf("CPU.String() = %q", CPU.String())
	}
}

func TestParseDeviceErrors(t *testing.T) {
	registerKinds()
	cases := []struct{ in, msg string }{
		{"gpu", "unknown device"},
		{"", "unknown device"},
		{"CPU", "unknown device"},
		{"gpu:0", "unknown device"},
		{" cpu", "unknown device"},
		{"cuda:-1", "bad device index"},
		{"cuda:x", "bad device index"},
		{"cuda:", "bad device index"},
		{"cpu:1:2", "bad device index"},
		{"cpu: 1", "bad device index"},
		{"cuda:1.0", "bad device index"},
	}
	for _, c := range cases {
		d, err := ParseDevice(c.in)
		if err == nil {
			t.Errorf("ParseDevice(%q) = %v, want an error", c.in, d)
			continue
		}
		if d != (Device{}) {
			t.Errorf("ParseDevice(%q) returned %#v with its error", c.in, d)
		}
		if !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), c.in) {
			t.Errorf("ParseDevice(%q) error %q, want it to mention %q and the input", c.in, err, c.msg)
		}
	}
}

type fakeBackend struct{ Backend }

func TestRegistry(t *testing.T) {
	opens := 0
	Register("fake-test", func(index int) (Backend, error) {
		opens++
		if index == 1 {
			return nil, errors.New("no such fake")
		}
		return &fakeBackend{}, nil
	})
	defer func() {
		if recover() == nil {
			t.Error("registering a kind twice did not panic")
		}
	}()
	found := false
	for _, k := range Kinds() {
		found = found || k == "fake-test"
	}
	if !found {
		t.Errorf("Kinds() = %v, missing fake-test", Kinds())
	}
	d0 := Device{Kind: "fake-test"}
	b1, err := Get(d0)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := Get(d0)
	if b1 != b2 || opens != 1 {
		t.Errorf("Get opened the device %d times (backends %p, %p), want once", opens, b1, b2)
	}
	d1 := Device{Kind: "fake-test", Index: 1}
	_, err1 := Get(d1)
	_, err2 := Get(d1)
	if err1 == nil || err2 == nil || err1.Error() != err2.Error() || opens != 2 {
		t.Errorf("failing open: errors %v, %v after %d opens; want the same error, opened once", err1, err2, opens)
	}
	if !strings.Contains(err1.Error(), "fake-test:1") || !strings.Contains(err1.Error(), "no such fake") {
		t.Errorf("error %q does not name the device and reason", err1)
	}
	if _, err := Get(Device{Kind: "nope"}); err == nil || !strings.Contains(err.Error(), "no backend registered") {
		t.Errorf("Get of an unregistered kind: %v", err)
	}
	Register("fake-test", nil)
}

// TestNamedDevices parses and prints devices of a kind registered with
// names (as the simulated GPUs are: sim:h200).
func TestNamedDevices(t *testing.T) {
	RegisterNamed("testnamed", []string{"alpha", "beta"}, func(int) (Backend, error) { return nil, nil })
	d, err := ParseDevice("testnamed:Beta")
	if err != nil || d != (Device{Kind: "testnamed", Index: 1}) || d.String() != "testnamed:beta" {
		t.Errorf("ParseDevice(testnamed:Beta) = %v (%+v), %v", d, d, err)
	}
	for _, bad := range []string{"testnamed:gamma", "testnamed", "testnamed:1"} {
		if _, err := ParseDevice(bad); err == nil || !strings.Contains(err.Error(), "alpha, beta") {
			t.Errorf("ParseDevice(%q): %v, want an error listing the names", bad, err)
		}
	}
	if _, err := ParseDevice("tpu"); err == nil || !strings.Contains(err.Error(), "testnamed:alpha|beta") {
		t.Errorf("an unknown kind: %v, want the named kinds listed", err)
	}
	if c := Choices(); !strings.HasPrefix(c, "cpu, ") || !strings.Contains(c, "testnamed:alpha|beta") {
		t.Errorf("Choices() = %q, want cpu first and the registered kinds", c)
	}
}

// TestParseDeviceAsksTheRegistry: a kind no driver registered is unknown,
// and a registered one parses, numbered, and is listed.
func TestParseDeviceAsksTheRegistry(t *testing.T) {
	if _, err := ParseDevice("testnumbered:2"); err == nil || !strings.Contains(err.Error(), "unknown device") {
		t.Errorf("an unregistered kind parsed: %v", err)
	}
	Register("testnumbered", func(int) (Backend, error) { return nil, errors.New("a test's kind") })
	if d, err := ParseDevice("testnumbered:2"); err != nil || d != (Device{Kind: "testnumbered", Index: 2}) {
		t.Errorf("ParseDevice(testnumbered:2) = %v, %v", d, err)
	}
	if c := Choices(); !strings.Contains(c, "testnumbered:N") {
		t.Errorf("Choices() = %q, want testnumbered:N", c)
	}
	if _, err := ParseDevice("tpu"); err == nil || !strings.Contains(err.Error(), "testnumbered, testnumbered:N") {
		t.Errorf("an unknown kind: %v, want the numbered kinds listed", err)
	}
}
