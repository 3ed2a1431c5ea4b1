package tokenizer

import "github.com/fleetml/fleet/data"

// splitter is a tokenizer with split points of its own (HF); the others
// use SplitPoint.
type splitter interface {
	splitPoint(chunk []byte, min int) int
}

// SplitPointOf returns the split rule of t for data.PrepareConfig's
// Boundary and for EncodeReader: t's own for a tokenizer.json (HF.SplitPoint),
// SplitPoint for the others.
func SplitPointOf(t data.Tokenizer) func(chunk []byte) int {
	if s, ok := t.(splitter); ok {
		return func(chunk []byte) int { return s.splitPoint(chunk, 0) }
	}
	return SplitPoint
}

// splitFunc is SplitPointOf with splitReader's lower bound.
func splitFunc(t data.Tokenizer) func(chunk []byte, min int) int {
	if s, ok := t.(splitter); ok {
		return s.splitPoint
	}
	return splitPoint
}
