package kernels

// BiasRows sets c = beta*c + bias broadcast over rows, for c rows×cols and
// bias cols (all F32); beta 0 overwrites c. It is MatMul's bias epilogue.
func BiasRows[B comparable](l Launcher[B], c, bias B, beta float32, rows, cols int) error {
	if err := checkInt("bias_rows", cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return elementwise(l, "fleet_bias_rows_f32", rows*cols, *new(Args[B]).Buf(c, bias).Float(beta).Long(int64(rows)).Int(int32(cols)))
}
