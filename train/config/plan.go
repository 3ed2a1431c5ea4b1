package config

// Plan is a Config resolved: its devices opened, its precision and batch
// typed. The training loop reads the Plan; Config keeps the strings
// config.json records.
type Plan struct {
	// Config is the validated configuration, its Device and Pipeline
	// rewritten to the devices placed (Placement.Record) and, where the
	// batch is given, its GradAccum resolved.
	Config    Config
	Place     Placement
	Precision Precision
	// Batch is the batch plan; its Micro is 0 under --batch-size auto
	// until the trainer chooses (WithBatch).
	Batch BatchPlan
}

// Resolve validates c and resolves it into a Plan: the device (auto picks
// cuda:0 when it works, else the CPU) and the pipeline's devices, moved to
// the process's own (Placement.ForLocalRank with c.LocalDevice), the
// precision, and the batch plan. The pipeline's devices are opened too.
// --pipeline is parsed once, by the validation, whose devices are placed.
func Resolve(c Config) (Plan, error) {
	stages, err := c.validate()
	if err != nil {
		return Plan{}, err
	}
	place, err := c.placeDevice()
	if err != nil {
		return Plan{}, err
	}
	place.Stages = stages
	if place.Replicas, err = c.validateReplicas(); err != nil {
		return Plan{}, err
	}
	if len(place.Replicas) > 0 {
		place.Device = place.Replicas[0]
	}
	place = place.ForLocalRank(c.LocalDevice, numbered(c.Device))
	if err := place.Open(); err != nil {
		return Plan{}, err
	}
	place.Record(&c)
	p := Plan{Config: c, Place: place}
	if p.Precision, err = ParsePrecision(c.Precision); err != nil {
		return Plan{}, err // checked by Validate
	}
	if !c.BatchAuto {
		return p.WithBatch(c.BatchSize)
	}
	return p, nil
}

// WithBatch is p with micro-batch b (--batch-size auto's choice, or an
// elastic restart's) and the accumulation its batch plan gives.
func (p Plan) WithBatch(b int) (Plan, error) {
	c, err := p.Config.WithBatch(b)
	if err != nil {
		return p, err
	}
	p.Config = c
	p.Batch, err = c.PlanBatch()
	return p, err
}

// OnCPU reports whether any of the run's products run on the CPU.
func (p Plan) OnCPU() bool { return p.Place.onHost() }
