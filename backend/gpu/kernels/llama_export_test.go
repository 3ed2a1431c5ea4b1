package kernels

// SetRotaryChunkRows sets the rows per partial sum of RotaryBackward's
// QK-norm weight gradients, so that tests reach several chunks with few
// rows, and returns a function that restores it.
func SetRotaryChunkRows(n int) (restore func()) {
	old := rotaryChunkRows
	rotaryChunkRows = n
	return func() { rotaryChunkRows = old }
}
