package train

import (
	fcpu "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/train/config"
)

// Config is a training run's settings: package config declares them, with
// their flags and rules. Run takes one.
type Config = config.Config

// Default is the configuration of fleet train with no flags (config.Default).
func Default() Config { return config.Default() }

// setBF16Product sets the CPU backend's BF16 product for
// config.SettleCPUBF16; tests stand in a CPU without AVX512-BF16.
var setBF16Product = fcpu.SetBF16Product
