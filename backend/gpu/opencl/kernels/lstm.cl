// The LSTM's gate kernels (backend.LSTMCells), lstm.cu's twins: one
// timestep of a layer after the products (xg = x*W_ih + b [B, T, 4H],
// batch-major; rec = h_{t-1}*W_hh [B, 4H]), and its backward pass. Gates
// are H wide each in PyTorch's order i, f, g, o. F32 only; float
// arithmetic, sigmoid(a) = 1/(1 + e^-a) and tanh. Each work-item owns one
// (row b, unit j): elementwise, no reduction. Traffic: forward 10 floats
// read and 7 written a unit; backward 9 and 9. Launch: 1-D work-groups of
// 256, grid-stride over B*H.

inline float lstm_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// fleet_lstm_cell_f32: with a = xg[b, step] + rec[b] (rec null: 0),
// act = (sigmoid(a_i), sigmoid(a_f), tanh(a_g), sigmoid(a_o)),
// c = f*cprev + i*g (cprev null: 0), h = o*tanh(c), out[b, step] = h.
__kernel void fleet_lstm_cell_f32(BUF(float, act), BUF(float, c), BUF(float, h), BUF(float, out), BUF(float, xg), BUF(float, rec),
	BUF(float, cprev), int B, int T, int H, int step) {
	AT(float, act);
	AT(float, c);
	AT(float, h);
	AT(float, out);
	AT(float, xg);
	AT(float, rec);
	AT(float, cprev);
	FLEET_FOR_EACH(e, (long)B * H) {
		long b = e / H, j = e % H;
		long xo = (b * T + step) * 4 * (long)H + j, ro = b * 4 * (long)H + j;
		float a[4];
		for (int k = 0; k < 4; k++) {
			a[k] = xg[xo + k * H];
			if (rec) {
				a[k] += rec[ro + k * H];
			}
		}
		float i = lstm_sigmoid(a[0]), f = lstm_sigmoid(a[1]), g = tanh(a[2]), o = lstm_sigmoid(a[3]);
		float cp = cprev ? cprev[e] : 0.0f;
		float cv = f * cp + i * g;
		float hv = o * tanh(cv);
		act[ro] = i;
		act[ro + H] = f;
		act[ro + 2 * H] = g;
		act[ro + 3 * H] = o;
		c[e] = cv;
		h[e] = hv;
		out[(b * T + step) * (long)H + j] = hv;
	}
}

// fleet_lstm_cell_backward_f32: with d = dout[b, step] + dh[b] (dh null:
// none), tc = tanh(c), dct = d*o*(1 - tc^2) + dc (dc null: none), the
// pre-activations' gradient (dct*g*i(1-i), dct*cprev*f(1-f),
// dct*i*(1-g^2), d*tc*o(1-o)) goes to dgate and to dxg[b, step], and
// dcprev = dct*f (dcprev may be dc).
__kernel void fleet_lstm_cell_backward_f32(BUF(float, dgate), BUF(float, dxg), BUF(float, dcprev), BUF(float, dout), BUF(float, dh),
	BUF(float, dc), BUF(float, act), BUF(float, c), BUF(float, cprev), int B, int T, int H, int step) {
	AT(float, dgate);
	AT(float, dxg);
	AT(float, dcprev);
	AT(float, dout);
	AT(float, dh);
	AT(float, dc);
	AT(float, act);
	AT(float, c);
	AT(float, cprev);
	FLEET_FOR_EACH(e, (long)B * H) {
		long b = e / H, j = e % H;
		long xo = (b * T + step) * 4 * (long)H + j, ro = b * 4 * (long)H + j;
		float i = act[ro], f = act[ro + H], g = act[ro + 2 * H], o = act[ro + 3 * H];
		float tc = tanh(c[e]);
		float d = dout[(b * T + step) * (long)H + j];
		if (dh) {
			d += dh[e];
		}
		float dct = d * o * (1.0f - tc * tc);
		if (dc) {
			dct += dc[e];
		}
		float cp = cprev ? cprev[e] : 0.0f;
		float da[4] = {dct * g * i * (1.0f - i), dct * cp * f * (1.0f - f), dct * i * (1.0f - g * g), d * tc * o * (1.0f - o)};
		for (int k = 0; k < 4; k++) {
			dgate[ro + k * H] = da[k];
			dxg[xo + k * H] = da[k];
		}
		dcprev[e] = dct * f;
	}
}
