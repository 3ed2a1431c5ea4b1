package kernels

import (
	"math"
	"strconv"
	"strings"
)

// MovesData reports whether kernel does no floating-point work: it only
// converts, fills, gathers or hashes (a cast, a fill, an embedding's
// forward, the dropout key of a replayed step).
func MovesData(kernel string) bool {
	for _, p := range []string{"fleet_cast_", "fleet_fill_", "fleet_embedding_f", "fleet_embedding_bf", "fleet_step_dropout_key_"} {
		if strings.HasPrefix(kernel, p) {
			return true
		}
	}
	return false
}

// TensorCoreKernel reports whether kernel does its products on tensor
// cores (mma.sync): the tensor-core kernels carry _mma in their names
// (attention_mma.cu), and the NVRTC test holds every file that declares
// one to mma.sync instructions in its PTX. The simulated GPU prices them
// at the tensor cores' rate.
func TensorCoreKernel(kernel string) bool { return strings.Contains(kernel, "_mma") }

// FLOPs is the floating-point work of one launch of kernel, from its
// scalar arguments by parameter name (arg("n"); a pointer's is 1 where
// given, 0 where null), counted as the kernel's
// source does it: a multiply-add is 2, an exp, tanh or sqrt 1. Kernels that
// only move or gather data (casts, fills, embeddings) do none. The
// simulated GPU prices each launch with it; 0 for a kernel it does not
// know, which then costs only its memory traffic.
func FLOPs(kernel string, arg func(param string) float64) float64 {
	name, pad := baseName(kernel)
	hd := func() float64 { return arg("C") / arg("H") }
	// causal is the number of (query, key) pairs causal attention scores:
	// T(T+1)/2 per sequence and head.
	causal := func() float64 { t := arg("T"); return arg("B") * arg("H") * t * (t + 1) / 2 }
	if pad > 0 {
		// A tensor-core attention kernel (attention_mma.cu) works on
		// heads padded to its HDP, named in its name, and on whole tiles:
		// its products count the padding, and every tile it computes,
		// the diagonal ones (half masked) and the rows past T included.
		hd = func() float64 { return float64(pad) }
		causal = func() float64 { return MMAPairs(name, pad, int(arg("T"))) * arg("B") * arg("H") }
	}
	switch name {
	case "binary", "scale", "unary", "sumsquares_partial":
		return arg("n")
	case "axpy", "dropout_add": // dropout_add: the multiply and the add (its draw is integer work)
		return 2 * arg("n")
	case "gelu":
		return 10 * arg("n") // x³, a multiply-add chain and tanh
	case "bias_gelu": // the add, then GELU
		return 11 * arg("rows") * arg("cols")
	case "gelu_backward":
		return 20 * arg("n")
	case "softmax":
		return 5 * arg("rows") * arg("cols") // max, subtract, exp, sum, divide
	case "softmax_backward":
		return 4 * arg("rows") * arg("cols")
	case "layernorm":
		return 8 * arg("rows") * arg("cols")
	case "add_layernorm": // the add (and mask) then the LayerNorm
		return 10 * arg("rows") * arg("cols")
	case "layernorm_backward": // dx (the masked copy, where asked for, one more multiply), the partials, their sums
		return 14*arg("rows")*arg("cols") + 2*math.Ceil(arg("rows")/max(arg("chunkRows"), 1))*arg("cols")
	case "sumrows_partial", "sumcols", "bias_rows":
		return arg("rows") * arg("cols")
	case "colsum":
		return arg("nparts") * arg("cols")
	case "sumsquares_finish":
		return arg("nparts")
	case "crossentropy", "crossentropy_backward":
		return 4 * arg("n") * arg("V") // max, exp, sum; or softmax minus one-hot, scaled
	case "crossentropy_fused": // the two above, in one launch
		return 8 * arg("n") * arg("V")
	case "embedding_backward":
		return arg("n") * arg("dim") // one add per token and column
	case "track_loss":
		return 2
	case "clip_coef":
		return 4
	case "scaler_coef": // the clip's few operations and two powers by squaring
		return 16 + 4*64
	case "step_clock":
		return 4 + 4*64
	case "adamw":
		return 15 * arg("n")
	case "attention_fwd":
		// Per pair: a head-wide dot product for the score, an online
		// softmax update, and a head-wide multiply-add into the output;
		// with dropout on the probabilities (a threshold given), their
		// multiply (the draws are integer work).
		return causal() * (4*hd() + 5 + attnDrop(arg))
	case "attention_bwd_dq":
		// The CUDA cores' dq kernel: the score again, dP = dO·V, and
		// dQ += dS·K; dropout's multiply.
		return causal() * (6*hd() + 5 + attnDrop(arg))
	case "attention_bwd_dkdv":
		// The CUDA cores' dk/dv kernel: the score again, dP, dV += P·dO
		// and dK += dS·Q; dropout's two multiplies.
		return causal() * (8*hd() + 5 + 2*attnDrop(arg))
	case "attention_bwd":
		// The tensor cores' backward (FlashAttention-2's): the score
		// again, dP, dV += P·dO and dK += dS·Q on the pairs the warps
		// compute, dropout's two multiplies; and dQ += dS·K over the
		// whole 64-key by BQ-query tile of every tile the block loads:
		// 10·hd a pair where the two tile counts agree, against 14·hd
		// for the CUDA cores' two kernels.
		t := int(arg("T"))
		return arg("B") * arg("H") * (MMAPairs("attention_bwd", pad, t)*(8*hd()+5+2*attnDrop(arg)) + MMAPairs("attention_bwd_dq", pad, t)*2*hd())
	case "attention_bwd_pre": // D_i = dO_i·O_i, a multiply-add per element
		return 2 * arg("B") * arg("T") * arg("C")
	case "attention_bwd_post": // dq's scale, a multiply per element
		return arg("B") * arg("T") * arg("C")
	case "attention_kv":
		// T new positions against Pos+T cached ones (causally).
		t, pos := arg("T"), arg("Pos")
		return arg("B") * arg("H") * t * (pos + (t+1)/2) * (4*hd() + 5)
	}
	if f := lstmFLOPs(name, arg); f != 0 {
		return f
	}
	return llamaFLOPs(name, arg)
}

// attnDrop is 1 for an attention launch that drops probabilities (its
// dropThreshold not 0), else 0.
func attnDrop(arg func(param string) float64) float64 {
	if arg("dropThreshold") != 0 {
		return 1
	}
	return 0
}

// baseName is kernel without its fleet_ prefix and its storage suffix
// (_f32, _bf16, _f16), and, for a tensor-core attention kernel
// (attention_mma.cu), without its _mma<HDP> part, which pad returns (0
// for any other kernel): fleet_attention_fwd_mma64_bf16 is
// attention_fwd, 64.
func baseName(kernel string) (name string, pad int) {
	name = strings.TrimPrefix(kernel, "fleet_")
	for _, dt := range []string{"_f32", "_bf16", "_f16"} {
		if i := strings.LastIndex(name, dt); i >= 0 && i+len(dt) == len(name) {
			name = name[:i]
			break
		}
	}
	if i := strings.LastIndex(name, "_mma"); i >= 0 {
		digits := name[i+len("_mma"):]
		if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = digits[:j] // mma64f16: the padding, then the operand type
		}
		if p, err := strconv.Atoi(digits); err == nil {
			return name[:i], p
		}
	}
	return name, 0
}
