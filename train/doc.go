// Package train is fleet's training loop: data (text, prepared shards or
// token files, opened by what --data names), batches drawn ahead by a
// data.Loader and double-buffered onto the device, forward and backward
// over micro-batches with gradient accumulation (to a token budget with
// TokensPerStep), products in fp32, bf16 or fp16 (with dynamic loss
// scaling, whose skipped steps move neither the weights, the optimizer
// nor the schedule), gradient-norm clipping, the AdamW step on nanoGPT's learning-rate schedule, periodic evaluation,
// the time each step waits for data, and the run's files (config,
// tokenizer, metrics, weights, summary), every one written atomically.
package train
