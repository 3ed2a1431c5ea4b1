// Elementwise kernels over n elements, for F32 and BF16 storage (suffix
// _f32, _bf16), as elementwise.cu: BF16 values are widened to float,
// computed on in float and rounded to nearest even on store. Each
// work-item handles elements i, i+stride, ... (a grid-stride loop), so any
// grid covers any n. Launch: 1-D work-groups of 256, any grid.

//@for S in f32 bf16 f16 i32
// fleet_fill_$S: dst[i] = v, rounded to the storage type (truncated toward
// zero for i32).
__kernel void fleet_fill_$S(BUF(t_$S, dst), float v, long n) {
	AT(t_$S, dst);
	FLEET_FOR_EACH(i, n) {
		st_$S(dst, i, v);
	}
}
//@end

//@for S in f32 bf16
// fleet_binary_$S: dst[i] = a[i] op b[i]; op is 0 add, 1 sub, 2 mul, 3 div
// (backend.BinaryOp). dst may alias a or b.
__kernel void fleet_binary_$S(BUF(t_$S, dst), BUF(t_$S, a), BUF(t_$S, b), int op, long n) {
	AT(t_$S, dst);
	AT(t_$S, a);
	AT(t_$S, b);
	FLEET_FOR_EACH(i, n) {
		float x = ld_$S(a, i), y = ld_$S(b, i), r;
		switch (op) {
		case 0: r = x + y; break;
		case 1: r = x - y; break;
		case 2: r = x * y; break;
		default: r = x / y; break;
		}
		st_$S(dst, i, r);
	}
}

// fleet_dropout_add_$S: dst[i] = x[i] + y[i]*f(i), or y[i]*f(i) where x
// is null, with f(i) the mask's factor (backend.DropoutAdd). The product
// is rounded before the sum. dst may alias x or y.
__kernel void fleet_dropout_add_$S(BUF(t_$S, dst), BUF(t_$S, x), BUF(t_$S, y), long seed, long offset, int site,
	uint threshold, float scale, long n, BUF(int, seedBase)) {
	AT(t_$S, dst);
	AT(t_$S, x);
	AT(t_$S, y);
	AT(int, seedBase);
	ulong s = fleet_dropout_seed(seed, seedBase);
	FLEET_FOR_EACH(i, n) {
		float v = ld_$S(y, i) * fleet_dropout_factor(s, offset, site, threshold, scale, i);
		if (x != 0) {
			v = ld_$S(x, i) + v;
		}
		st_$S(dst, i, v);
	}
}

// fleet_axpy_$S: dst[i] += alpha * x[i] (dst is read and written).
__kernel void fleet_axpy_$S(BUF(t_$S, dst), BUF(t_$S, x), float alpha, long n) {
	AT(t_$S, dst);
	AT(t_$S, x);
	FLEET_FOR_EACH(i, n) {
		st_$S(dst, i, ld_$S(dst, i) + alpha * ld_$S(x, i));
	}
}

// fleet_scale_$S: dst[i] = alpha * src[i]; dst may alias src.
__kernel void fleet_scale_$S(BUF(t_$S, dst), BUF(t_$S, src), float alpha, long n) {
	AT(t_$S, dst);
	AT(t_$S, src);
	FLEET_FOR_EACH(i, n) {
		st_$S(dst, i, alpha * ld_$S(src, i));
	}
}

// fleet_unary_$S: dst[i] = op(src[i]); op is 0 neg, 1 exp, 2 log, 3 tanh,
// 4 sqrt (backend.UnaryOp). dst may alias src.
__kernel void fleet_unary_$S(BUF(t_$S, dst), BUF(t_$S, src), int op, long n) {
	AT(t_$S, dst);
	AT(t_$S, src);
	FLEET_FOR_EACH(i, n) {
		float x = ld_$S(src, i);
		switch (op) {
		case 0: x = -x; break;
		case 1: x = exp(x); break;
		case 2: x = log(x); break;
		case 3: x = tanh(x); break;
		default: x = sqrt(x); break;
		}
		st_$S(dst, i, x);
	}
}
//@end
