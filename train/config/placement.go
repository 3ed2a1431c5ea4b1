package config

import (
	"strings"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/pipeline"
	"github.com/fleetml/fleet/tensor"
)

// Placement is where a run computes, resolved once from Config.Device and
// Config.Pipeline: the run's device (its batches, and the whole model
// without a pipeline) and, with a pipeline, the stages' devices in order.
type Placement struct {
	Device tensor.Device
	Stages []tensor.Device
	// Replicas are --replicas' devices, Device first.
	Replicas []tensor.Device
}

// Place resolves c.Device ("auto" picks cuda:0 when it works, else the
// CPU; the device must open) and parses c.Pipeline: the placement alone,
// for a caller that needs the device before a run resolves (fleet bench).
// Resolve places a run itself, with the devices its validation parsed.
// The stages' devices are opened by Resolve (Placement.Open), after a
// data-parallel process has moved to its own (ForLocalRank), so no
// process opens another's GPUs.
func (c Config) Place() (Placement, error) {
	pl, err := c.placeDevice()
	if err != nil || c.Pipeline == "" {
		return pl, err
	}
	if pl.Stages, err = parseDevices("Pipeline", c.Pipeline); err != nil {
		return Placement{}, err
	}
	return pl, nil
}

// placeDevice resolves c.Device into a Placement without stages.
func (c Config) placeDevice() (Placement, error) {
	dev, err := backend.Resolve(c.Device)
	if err != nil {
		return Placement{}, setting.Errorf("{Device} %s: %w", c.Device, err)
	}
	return Placement{Device: dev}, nil
}

// onHost reports whether any of the run's products run on the CPU: its
// device's, or a pipeline stage's.
func (p Placement) onHost() bool {
	if len(p.Stages) == 0 {
		return p.Device.OnCPU()
	}
	for _, d := range p.Stages {
		if d.OnCPU() {
			return true
		}
	}
	return false
}

// Open opens the stages' and the replicas' devices, saying which fails.
func (p Placement) Open() error {
	for _, d := range p.Stages {
		if _, err := backend.Get(d); err != nil {
			return setting.Errorf("{Pipeline}: %w", err)
		}
	}
	for _, d := range p.Replicas {
		if _, err := backend.Get(d); err != nil {
			return setting.Errorf("{Replicas}: %w", err)
		}
	}
	return nil
}

// ForLocalRank is the placement of local rank k of a node's data-parallel
// processes, each of which needs GPUs of its own: a CUDA device the user
// did not number (auto or cuda) becomes cuda:k, and a pipeline of n CUDA
// devices moves to the k-th set of n (cuda:0,cuda:1 is cuda:2,cuda:3 on
// local rank 1). CPU devices, which the processes share, stay.
func (p Placement) ForLocalRank(k int, numbered bool) Placement {
	if p.Device.IsCUDA() && !numbered {
		p.Device.Index = k
	}
	cuda := len(p.Stages) > 0
	for _, d := range p.Stages {
		cuda = cuda && d.IsCUDA()
	}
	if cuda && k > 0 {
		stages := make([]tensor.Device, len(p.Stages))
		for i, d := range p.Stages {
			stages[i] = tensor.Device{Kind: d.Kind, Index: d.Index + k*len(p.Stages)}
		}
		p.Stages = stages
	}
	return p
}

// Record writes the placement into c's Device and Pipeline, as config.json
// records them.
func (p Placement) Record(c *Config) {
	c.Device = p.Device.String()
	if len(p.Stages) > 0 {
		names := make([]string, len(p.Stages))
		for i, d := range p.Stages {
			names[i] = d.String()
		}
		c.Pipeline = strings.Join(names, ",")
	}
	if len(p.Replicas) > 0 {
		names := make([]string, len(p.Replicas))
		for i, d := range p.Replicas {
			names[i] = d.String()
		}
		c.Replicas = strings.Join(names, ",")
	}
}

// numbered reports whether a --device value names its device's number
// (cuda:1), which a node's processes then keep (ForLocalRank).
func numbered(device string) bool { return strings.Contains(device, ":") }

// parseDevices reads --pipeline or --replicas (field): distinct devices
// separated by commas.
func parseDevices(field, s string) ([]tensor.Device, error) {
	var devs []tensor.Device
	seen := map[tensor.Device]bool{}
	for _, name := range strings.Split(s, ",") {
		d, err := backend.ParseDevice(strings.TrimSpace(name))
		if err != nil {
			return nil, setting.Errorf("{"+field+"} %s: %w", s, err)
		}
		if seen[d] {
			return nil, setting.Errorf("{"+field+"} %s names %v twice", s, d)
		}
		seen[d] = true
		devs = append(devs, d)
	}
	return devs, nil
}

// validatePipeline checks the pipeline settings that need no data, and
// returns the stages' devices it parsed (nil without a pipeline).
func (c Config) validatePipeline() ([]tensor.Device, error) {
	if c.Pipeline == "" {
		if c.MicroBatches > 1 || c.PipelineSplit != "" || c.PipelineSchedule != "" {
			return nil, setting.Errorf("{MicroBatches}, {PipelineSplit} and {PipelineSchedule} need {Pipeline}")
		}
		return nil, nil
	}
	devs, err := parseDevices("Pipeline", c.Pipeline)
	if err != nil {
		return nil, err
	}
	m := max(c.MicroBatches, 1)
	switch {
	case c.MicroBatches < 0:
		return nil, setting.Errorf("{MicroBatches} must be positive, got %d", c.MicroBatches)
	case c.BatchAuto:
		return nil, setting.Errorf("{BatchSize} auto cannot be combined with {Pipeline} yet; give a batch size")
	case c.BatchSize%m != 0:
		return nil, setting.Errorf("{BatchSize} %d is not a multiple of {MicroBatches} %d", c.BatchSize, m)
	case c.TensorBoard != "":
		return nil, setting.Errorf("{Pipeline} with {TensorBoard} is not supported yet (its samples run the model on one device)")
	}
	if _, err := pipeline.New(c.PipelineSchedule, len(devs), m); err != nil {
		return nil, setting.Errorf("{PipelineSchedule}: %w", err)
	}
	if c.PipelineSplit != "" {
		if _, err := pipeline.ParseSplit(c.PipelineSplit, len(devs), c.NLayer); err != nil {
			return nil, setting.Errorf("{PipelineSplit} over the {Pipeline} devices: %w", err)
		}
	}
	return devs, nil
}

// validateReplicas checks --replicas and returns its devices (nil
// without it): two or more, not with a pipeline, data parallelism over
// processes, fp16's loss scaling (whose scale lives on the first device)
// or CUDA graphs, each replica at least one row of the micro-batch, and
// the first the run's --device where that is given.
func (c Config) validateReplicas() ([]tensor.Device, error) {
	if c.Replicas == "" {
		return nil, nil
	}
	devs, err := parseDevices("Replicas", c.Replicas)
	if err != nil {
		return nil, err
	}
	p, _ := ParsePrecision(c.Precision)
	switch {
	case len(devs) < 2:
		return nil, setting.Errorf("{Replicas} %s: give two or more devices", c.Replicas)
	case c.Pipeline != "" || c.WorldSize > 1:
		return nil, setting.Errorf("{Replicas} is one process's data parallelism: not with {Pipeline} or a data-parallel job")
	case p.LossScaled():
		return nil, setting.Errorf("{Replicas} with {Precision} fp16 is not supported (the loss scale lives on the first device); use bf16")
	case c.CUDAGraphs || c.Zero == 1 || c.BatchAuto:
		return nil, setting.Errorf("{Replicas} with {CUDAGraphs}, {Zero} 1 or {BatchSize} auto is not supported")
	case c.BatchSize < len(devs):
		return nil, setting.Errorf("{BatchSize} %d is fewer rows than the %d {Replicas}", c.BatchSize, len(devs))
	}
	if c.Device != "" && c.Device != "auto" {
		if d, err := backend.ParseDevice(c.Device); err != nil || d != devs[0] {
			return nil, setting.Errorf("{Device} %s is not the first of {Replicas} %s, which is the run's device: leave {Device} out, or give the first", c.Device, c.Replicas)
		}
	}
	return devs, nil
}
