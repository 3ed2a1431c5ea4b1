package train

import "github.com/fleetml/fleet/train/config"

// Config is a training run's settings: package config declares them, with
// their flags and rules. Run takes one.
type Config = config.Config

// Default is the configuration of fleet train with no flags (config.Default).
func Default() Config { return config.Default() }
