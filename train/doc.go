// Package train is fleet's training loop: data windows, forward and
// backward over micro-batches with gradient accumulation, gradient-norm
// clipping, the AdamW step on nanoGPT's learning-rate schedule, periodic
// evaluation, and the run's files (config, tokenizer, metrics, weights,
// summary), every one written atomically.
package train
