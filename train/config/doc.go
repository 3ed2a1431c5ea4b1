// Package config holds a training run's settings and their rules, below
// the training loop: the Config that fleet train's flags and config.json
// fill, the flag table that declares those flags once (Flags), the batch
// plan (PlanBatch), where the run computes (Placement), the precision of
// its products (Precision), and Resolve, which turns a Config into the
// typed Plan the loop reads. The rules around a run's settings are here
// too: the CPU's bf16 product (SettleCPUBF16), an elastic restart's
// accumulation (KeepGlobalBatch), where a run writes and the files it
// writes there (DecideOut, MakeOut, NewestRun), and config.json's
// RunConfig, with the settings that a resume and the ranks of a job
// compare (RunConfig.Settings, ResumeCheck, SettingsDiff) and the
// identities of data and tokenizers by content.
//
// A setting is read as a string in one place only: Resolve parses the
// device and pipeline lists, the precision and the batch, and everything
// after it asks the Plan. So nothing above this package compares a
// precision by its name; the two questions the trainer asks of a device's
// kind (does it compute on the CPU, is it one of CUDA's numbered GPUs) are
// the registry's (backend.Device's OnCPU and IsCUDA).
//
// Errors name settings by their Config field in braces ({BatchSize}), as
// package setting says; the command renders them as the flags the table
// declares.
package config
