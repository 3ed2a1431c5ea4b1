// The bias of a matrix product, as bias.cu (CLBlast has no epilogues).

//@for S in f32 bf16
// fleet_bias_rows_$S: c[i*cols+j] = beta*c[i*cols+j] + bias[j] for
// rows×cols, c and bias both of the suffix's type, arithmetic in float;
// beta == 0 overwrites c without reading it. Launch: 1-D grid-stride over
// rows×cols elements, work-groups of 256.
__kernel void fleet_bias_rows_$S(BUF(t_$S, c), BUF(t_$S, bias), float beta, long rows, int cols) {
	AT(t_$S, c);
	AT(t_$S, bias);
	long n = rows * cols;
	FLEET_FOR_EACH(i, n) {
		float b = ld_$S(bias, i % cols);
		st_$S(c, i, beta == 0.0f ? b : beta * ld_$S(c, i) + b);
	}
}
//@end
