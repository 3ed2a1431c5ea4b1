package kernels

// SetChunkRows sets the rows per partial sum of SumRows and
// LayerNormBackward (chunkRows and lnChunkRows), so that tests reach several chunks with few rows, and
// returns a function that restores it.
func SetChunkRows(n int) (restore func()) {
	old, oldLN := chunkRows, lnChunkRows
	chunkRows, lnChunkRows = n, n
	return func() { chunkRows, lnChunkRows = old, oldLN }
}
