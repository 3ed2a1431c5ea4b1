package kernels

// SetChunkRows sets the rows per partial sum of SumRows and
// LayerNormBackward, so that tests reach several chunks with few rows, and
// returns a function that restores it.
func SetChunkRows(n int) (restore func()) {
	old := chunkRows
	chunkRows = n
	return func() { chunkRows = old }
}
