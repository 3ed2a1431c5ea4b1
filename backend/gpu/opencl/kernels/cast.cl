// Casts between storage types, as cast.cu: fleet_cast_<from>_<to>,
// dst[i] = src[i] converted. Floats narrow with round to nearest even (NaN
// stays a quiet NaN, overflow gives infinity, F16 keeps subnormals) and
// widen exactly, bit for bit as backend.F32ToBF16, F32ToF16, BF16ToF32 and
// F16ToF32; BF16<->F16 goes through F32, I32 converts to the nearest
// float. Launch: 1-D work-groups of 256, any grid.

//@for F in f32 bf16 f16 i32
//@for D in f32 bf16 f16
__kernel void fleet_cast_$F_$D(BUF(t_$D, dst), BUF(t_$F, src), long n) {
	AT(t_$D, dst);
	AT(t_$F, src);
	FLEET_FOR_EACH(i, n) {
		st_$D(dst, i, ld_$F(src, i));
	}
}
//@end
//@end

//@for D in bf16 f16
// fleet_round_$D (OpenCL's own, for products): dst[i] = src[i] rounded to
// $D and widened back, as a product that rounds its F32 operands reads
// them (backend.MatMul.Round).
__kernel void fleet_round_$D(BUF(float, dst), BUF(float, src), long n) {
	AT(float, dst);
	AT(float, src);
	FLEET_FOR_EACH(i, n) {
		t_$D h;
		st_$D(&h, 0, src[i]);
		dst[i] = ld_$D(&h, 0);
	}
}
//@end
