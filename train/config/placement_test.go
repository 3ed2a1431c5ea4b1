package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/fleetml/fleet/tensor"
)

func TestPlace(t *testing.T) {
	c := Default()
	c.Device, c.Pipeline = "cpu", "cpu:0, cpu:3"
	pl, err := c.Place()
	if err != nil {
		t.Fatal(err)
	}
	want := Placement{Device: tensor.CPU, Stages: []tensor.Device{tensor.CPU, {Kind: "cpu", Index: 3}}}
	if !reflect.DeepEqual(pl, want) {
		t.Fatalf("Place = %+v, want %+v", pl, want)
	}
	for _, tc := range []struct{ dev, pipe, want string }{
		{"tpu", "", "Device tpu"},
		{"cpu", "cpu:1,cpu:1", "names cpu:1 twice"},
		{"cpu", "cpu:1,gpu:2", "Pipeline cpu:1,gpu:2"},
	} {
		c.Device, c.Pipeline = tc.dev, tc.pipe
		if _, err := c.Place(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--device %s --pipeline %s: %v, want an error naming %q", tc.dev, tc.pipe, err, tc.want)
		}
	}
}

func TestForLocalRank(t *testing.T) {
	cuda := func(i int) tensor.Device { return tensor.Device{Kind: "cuda", Index: i} }
	cpu1 := tensor.Device{Kind: "cpu", Index: 1}
	for _, tc := range []struct {
		in       Placement
		k        int
		numbered bool
		want     Placement
		record   [2]string
	}{
		{Placement{Device: cuda(0)}, 3, false, Placement{Device: cuda(3)}, [2]string{"cuda:3", ""}},
		{Placement{Device: cuda(1)}, 3, true, Placement{Device: cuda(1)}, [2]string{"cuda:1", ""}},
		{Placement{Device: tensor.CPU}, 2, false, Placement{Device: tensor.CPU}, [2]string{"cpu", ""}},
		{Placement{Device: cuda(0), Stages: []tensor.Device{cuda(0), cuda(1)}}, 1, true,
			Placement{Device: cuda(0), Stages: []tensor.Device{cuda(2), cuda(3)}}, [2]string{"cuda:0", "cuda:2,cuda:3"}},
		{Placement{Device: tensor.CPU, Stages: []tensor.Device{tensor.CPU, cpu1}}, 1, false,
			Placement{Device: tensor.CPU, Stages: []tensor.Device{tensor.CPU, cpu1}}, [2]string{"cpu", "cpu,cpu:1"}},
	} {
		got := tc.in.ForLocalRank(tc.k, tc.numbered)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v.ForLocalRank(%d, %v) = %+v, want %+v", tc.in, tc.k, tc.numbered, got, tc.want)
		}
		var c Config
		got.Record(&c)
		if c.Device != tc.record[0] || c.Pipeline != tc.record[1] {
			t.Errorf("Record(%+v) = %q, %q; want %q, %q", got, c.Device, c.Pipeline, tc.record[0], tc.record[1])
		}
	}
}

// TestResolvePipeline: Resolve places the pipeline that its validation
// parsed, as Place does, and records it; a pipeline Validate refuses is
// refused before the device is resolved.
func TestResolvePipeline(t *testing.T) {
	c := Default()
	c.Device, c.Pipeline = "cpu", "cpu:0, cpu:1"
	want, err := c.Place()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Resolve(c)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Place, want) || p.Config.Pipeline != "cpu,cpu:1" {
		t.Errorf("Resolve placed %+v (%q), want %+v", p.Place, p.Config.Pipeline, want)
	}
	c.Device, c.Pipeline = "tpu", "cpu:1,cpu:1"
	if _, err := Resolve(c); err == nil || !strings.Contains(err.Error(), "names cpu:1 twice") {
		t.Errorf("Resolve of a pipeline naming a device twice: %v", err)
	}
}
