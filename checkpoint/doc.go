// Package checkpoint reads and writes model weights and training state.
//
// Weights use the safetensors format: an 8-byte little-endian header
// length, a JSON header that gives each tensor's dtype, shape and byte range,
// then the raw little-endian tensor bytes. Files written here are
// deterministic (tensor data and header keys in sorted name order, header
// padded with spaces to a multiple of 8 bytes as the reference implementation
// does) and are saved atomically, so a crash never leaves a truncated
// checkpoint under its final name.
//
// Decode treats its input as untrusted: it checks the header size, the JSON,
// every dtype, shape and byte range, and that the tensors tile the data
// section exactly, and reports the first problem as an error rather than
// panicking.
//
// WriteDir, Verify and Latest manage a folder of training checkpoints, one
// directory per step holding its files and a manifest of their SHA-256
// sums, written under a temporary name and renamed into place, with a
// latest pointer replaced atomically last.
package checkpoint
