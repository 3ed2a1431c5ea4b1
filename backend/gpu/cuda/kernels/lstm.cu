// The LSTM's gate kernels (backend.LSTMCells): one timestep of a layer,
// after the products. The input's projection of every step (xg = x*W_ih +
// b, [B, T, 4H], batch-major) and the step's recurrent product (rec =
// h_{t-1}*W_hh, [B, 4H]) are cuBLAS's; these kernels apply the gates'
// nonlinearities and the cell update, and their backward pass. Gates are
// H wide each in PyTorch's order i, f, g, o. F32 only; float arithmetic,
// sigmoid(a) = 1/(1 + e^-a) and tanhf.
//
// Each thread owns one (row b, unit j) and reads or writes the four gates
// of that unit: elementwise, no reduction, so the bits do not depend on
// the grid. Launch: 1-D blocks of 256 threads, grid min(ceil(B*H/256), 8
// per SM), grid-stride loop over B*H.

__device__ __forceinline__ float lstm_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// fleet_lstm_cell_f32: step `step` of B sequences of T steps. With a =
// xg[b, step] + rec[b] (rec null: 0, the first step from a zero state),
// act[b] = (sigmoid(a_i), sigmoid(a_f), tanh(a_g), sigmoid(a_o)),
// c = f*cprev + i*g (cprev null: 0), h = o*tanh(c), out[b, step] = h.
// Traffic: per unit, 4 reads of xg and of rec, 1 of cprev; 4 writes of
// act, 1 each of c, h and out: 10 floats read, 7 written.
extern "C" __global__ void fleet_lstm_cell_f32(float *__restrict__ act, float *__restrict__ c, float *__restrict__ h, float *__restrict__ out,
	const float *__restrict__ xg, const float *__restrict__ rec, const float *__restrict__ cprev, int B, int T, int H, int step) {
	FLEET_FOR_EACH(e, (long long)B * H) {
		long long b = e / H, j = e % H;
		long long xo = (b * T + step) * 4LL * H + j, ro = b * 4LL * H + j;
		float a[4];
#pragma unroll
		for (int k = 0; k < 4; k++) {
			a[k] = xg[xo + k * H];
			if (rec) {
				a[k] += rec[ro + k * H];
			}
		}
		float i = lstm_sigmoid(a[0]), f = lstm_sigmoid(a[1]), g = tanhf(a[2]), o = lstm_sigmoid(a[3]);
		float cp = cprev ? cprev[e] : 0.0f;
		float cv = f * cp + i * g;
		float hv = o * tanhf(cv);
		act[ro] = i;
		act[ro + H] = f;
		act[ro + 2 * H] = g;
		act[ro + 3 * H] = o;
		c[e] = cv;
		h[e] = hv;
		out[(b * T + step) * (long long)H + j] = hv;
	}
}

// fleet_lstm_cell_backward_f32: step `step`'s backward pass. With
// d = dout[b, step] + dh[b] (dh null: none), tc = tanh(c) and
// dct = d*o*(1 - tc^2) + dc (dc null: none), the pre-activations'
// gradient da = (dct*g*i(1-i), dct*cprev*f(1-f), dct*i*(1-g^2),
// d*tc*o(1-o)) goes to dgate [B, 4H] and to dxg[b, step], and
// dcprev = dct*f. dcprev may be dc: each thread reads its element before
// it writes it. Traffic: per unit, 4 reads of act, 1 each of c, cprev,
// dout, dh, dc; 8 writes of the gates' gradient, 1 of dcprev: 9 floats
// read, 9 written.
extern "C" __global__ void fleet_lstm_cell_backward_f32(float *__restrict__ dgate, float *__restrict__ dxg, float *dcprev,
	const float *__restrict__ dout, const float *__restrict__ dh, const float *dc, const float *__restrict__ act,
	const float *__restrict__ c, const float *__restrict__ cprev, int B, int T, int H, int step) {
	FLEET_FOR_EACH(e, (long long)B * H) {
		long long b = e / H, j = e % H;
		long long xo = (b * T + step) * 4LL * H + j, ro = b * 4LL * H + j;
		float i = act[ro], f = act[ro + H], g = act[ro + 2 * H], o = act[ro + 3 * H];
		float tc = tanhf(c[e]);
		float d = dout[(b * T + step) * (long long)H + j];
		if (dh) {
			d += dh[e];
		}
		float dct = d * o * (1.0f - tc * tc);
		if (dc) {
			dct += dc[e];
		}
		float cp = cprev ? cprev[e] : 0.0f;
		float da[4] = {dct * g * i * (1.0f - i), dct * cp * f * (1.0f - f), dct * i * (1.0f - g * g), d * tc * o * (1.0f - o)};
#pragma unroll
		for (int k = 0; k < 4; k++) {
			dgate[ro + k * H] = da[k];
			dxg[xo + k * H] = da[k];
		}
		dcprev[e] = dct * f;
	}
}
