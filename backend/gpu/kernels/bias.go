package kernels

import "github.com/fleetml/fleet/backend"

// BiasRows sets c = beta*c + bias broadcast over rows, for c rows×cols and
// bias cols, both F32 or both BF16 (dt); beta 0 overwrites c. It is
// MatMul's bias epilogue.
func BiasRows[B comparable](l Launcher[B], dt backend.DType, c, bias B, beta float32, rows, cols int) error {
	k, err := kernel("bias_rows", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("bias_rows", cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return elementwise(l, k, rows*cols, *new(Args[B]).Buf(c, bias).Float(beta).Long(int64(rows)).Int(int32(cols)))
}
