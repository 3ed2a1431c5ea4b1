package kernels

import (
	"math"
	"strings"
)

// Extent is what one launch of kernel moves through its pointer parameter
// param, from the launch's arguments by parameter name (arg("n");
// arg("gridDim.x") is the grid's first dimension): elems elements of the
// pointer's type, passes times: 1 where the kernel reads them or writes
// them, 2 where it reads them and writes them back (AdamW's moments, an
// accumulated gradient), as a product's C counts twice where beta is not
// 0. The figures follow
// the "Traffic" line of each kernel's comment in its source: what the
// kernel moves to and from memory, not how far its buffer reaches (a view
// into the flat parameter buffer is charged for its own elements). A read
// the comment says comes again from cache counts once. The simulated GPU
// charges each pointer argument passes × min(elems, the elements to the
// end of the allocation it points into), so a null pointer (an absent operand) costs
// nothing. ok is false for a kernel or parameter it does not know; a test
// holds every pointer of every kernel to it.
func Extent(kernel, param string, arg func(param string) float64) (elems, passes float64, ok bool) {
	name, _ := baseName(kernel)
	for _, p := range []string{"cast_", "fill_"} { // fleet_cast_bf16_f32, fleet_fill_i32
		if strings.HasPrefix(name, p) {
			name = p[:len(p)-1]
		}
	}
	a := arg
	rc := func() float64 { return a("rows") * a("cols") }
	// rmw is 2 where a kernel reads what it writes (beta != 0), else 1.
	rmw := func(beta string) float64 {
		if a(beta) != 0 {
			return 2
		}
		return 1
	}
	chunks := func() float64 { return math.Ceil(a("rows") / max(a("chunkRows"), 1)) }
	btc := func() float64 { return a("B") * a("T") * a("C") }
	// btkv is B·T·KVH·C/H: the keys (or the values) of qkv, KVH heads.
	btkv := func() float64 { return a("B") * a("T") * a("KVH") * a("C") / max(a("H"), 1) }
	bht := func() float64 { return a("B") * a("H") * a("T") }
	switch name + "." + param {
	// elementwise.cu, gelu.cu, cast.cu: every element once.
	case "fill.dst", "cast.dst", "cast.src",
		"binary.dst", "binary.a", "binary.b",
		"dropout_add.dst", "dropout_add.x", "dropout_add.y",
		"axpy.x", "scale.dst", "scale.src", "unary.dst", "unary.src",
		"gelu.dst", "gelu.src", "gelu_backward.dx", "gelu_backward.x", "gelu_backward.dy":
		return a("n"), 1, true
	case "axpy.dst": // dst += alpha*x
		return a("n"), 2, true
	case "dropout_add.seedBase", "add_layernorm.seedBase", "layernorm_backward.seedBase",
		"attention_fwd.seedBase", "attention_bwd_dq.seedBase", "attention_bwd_dkdv.seedBase", "attention_bwd.seedBase":
		return 2, 1, true // the step's dropout key, two words
	case "bias_gelu.pre": // read, then the biased value written back
		return rc(), 2, true
	case "bias_gelu.h":
		return rc(), 1, true
	case "bias_gelu.bias", "bias_rows.bias":
		return a("cols"), 1, true
	case "bias_rows.c":
		return rc(), rmw("beta"), true

	// adamw.cu: param, m and v read and written, grad read, the bf16
	// copy written.
	case "adamw.param", "adamw.m", "adamw.v":
		return a("n"), 2, true
	case "adamw.grad", "adamw.half":
		return a("n"), 1, true
	case "adamw.gradScale":
		return 1, 1, true
	case "adamw.sched":
		return 3, 1, true

	// layernorm.cu
	case "layernorm.out", "layernorm.x",
		"add_layernorm.sum", "add_layernorm.out", "add_layernorm.x", "add_layernorm.y",
		"layernorm_backward.dx", "layernorm_backward.dres", "layernorm_backward.dout",
		"layernorm_backward.x", "layernorm_backward.ddrop":
		return rc(), 1, true
	case "layernorm.mean", "layernorm.rstd", "add_layernorm.mean", "add_layernorm.rstd",
		"layernorm_backward.mean", "layernorm_backward.rstd":
		return a("rows"), 1, true
	case "layernorm.w", "layernorm.b", "add_layernorm.w", "add_layernorm.b", "layernorm_backward.w":
		return a("cols"), 1, true
	case "layernorm_backward.dw", "layernorm_backward.db": // accumulated: read and written
		return a("cols"), 2, true
	case "layernorm_backward.part": // dw and db partials written and read
		return 2 * chunks() * a("cols"), 2, true
	case "layernorm_backward.done": // a counter per 32 columns, counted up and set back to 0
		return math.Ceil(a("cols") / 32), 2, true

	// reduce.cu
	case "sumrows_partial.part":
		return chunks() * a("cols"), 1, true
	case "sumrows_partial.src", "sumcols.src":
		return rc(), 1, true
	case "colsum.dst":
		return a("cols"), rmw("beta"), true
	case "colsum.part":
		return a("nparts") * a("cols"), 1, true
	case "sumcols.dst":
		return a("rows"), 1, true
	case "sumsquares_partial.part":
		return a("gridDim.x"), 1, true
	case "sumsquares_partial.src":
		return a("n"), 1, true
	case "sumsquares_finish.dst":
		return 1, rmw("beta"), true
	case "sumsquares_finish.part":
		return a("nparts"), 1, true

	// softmax.cu
	case "softmax.dst", "softmax.src", "softmax_backward.dx", "softmax_backward.y", "softmax_backward.dy":
		return rc(), 1, true

	// crossentropy.cu
	case "crossentropy.logits", "crossentropy_backward.dlogits", "crossentropy_backward.logits":
		return a("n") * a("V"), 1, true
	case "crossentropy.losses", "crossentropy.lse", "crossentropy.targets",
		"crossentropy_backward.lse", "crossentropy_backward.targets":
		return a("n"), 1, true
	case "crossentropy_backward.dloss", "crossentropy_fused.dloss":
		return 1, 1, true
	// The fused kernel's second sweep over a row comes from L2 (its grid
	// bounds the rows in flight): logits count once.
	case "crossentropy_fused.logits", "crossentropy_fused.dlogits":
		return a("n") * a("V"), 1, true
	case "crossentropy_fused.losses", "crossentropy_fused.targets":
		return a("n"), 1, true

	// embedding.cu: a table row read (or, backward, read and written)
	// per token.
	case "embedding.out", "embedding.table", "embedding_backward.dout":
		return a("n") * a("dim"), 1, true
	case "embedding.ids", "embedding_backward.ids":
		return a("n"), 1, true
	case "embedding_backward.dtable":
		return a("n") * a("dim"), 2, true

	// attention.cu and attention_mma.cu: qkv [B, T, 3C] ([B, T, C +
	// 2·KVH·C/H] with KVH key/value heads), out and dout [B, T, C], lse and
	// D [B, H, T]. The dq kernel writes q's third of dqkv, the dk/dv kernel
	// the other two.
	case "attention_fwd.out", "attention_bwd_dq.dout", "attention_bwd_dq.out", "attention_bwd_dkdv.dout",
		"attention_bwd_dq.dqkv":
		return btc(), 1, true
	case "attention_bwd_dkdv.dqkv":
		return 2 * btkv(), 1, true
	case "attention_fwd.qkv", "attention_bwd_dq.qkv", "attention_bwd_dkdv.qkv":
		return btc() + 2*btkv(), 1, true
	case "attention_fwd.lse", "attention_bwd_dq.lse", "attention_bwd_dkdv.lse",
		"attention_bwd_dq.D", "attention_bwd_dkdv.D":
		return bht(), 1, true
	// The tensor cores' backward: scratch is D [B, H, T], then the dq
	// accumulator [B, T, C] in F32. The first launch writes both (D, and
	// the accumulator's zeros); the main one reads D and adds to the
	// accumulator with atomics, which L2 performs: the grid runs the key
	// blocks of one (b, key/value head) together, so the accumulator's
	// rows they share stay there, and it counts read and written once
	// (D counts twice with it, 1/hd of the whole); the last reads the
	// accumulator and writes q's third of dqkv.
	case "attention_bwd_pre.scratch":
		return bht() + btc(), 1, true
	case "attention_bwd_pre.dout", "attention_bwd_pre.out", "attention_bwd_post.dqkv", "attention_bwd_post.scratch", "attention_bwd.dout":
		return btc(), 1, true
	case "attention_bwd.scratch":
		return bht() + btc(), 2, true
	case "attention_bwd.dqkv":
		return 2 * btkv(), 1, true
	case "attention_bwd.qkv":
		return btc() + 2*btkv(), 1, true
	case "attention_bwd.lse":
		return bht(), 1, true
	case "attention_kv.out":
		return btc(), 1, true
	case "attention_kv.qkv":
		return btc() + 2*btkv(), 1, true
	case "attention_kv.kc", "attention_kv.vc": // positions [0, Pos+T) read, [Pos, Pos+T) written
		return a("B") * (a("Pos") + 2*a("T")) * a("KVH") * a("C") / max(a("H"), 1), 1, true

	// step.cu: a few words of bookkeeping.
	case "track_loss.stats", "clip_coef.stats", "scaler_coef.stats", "step_clock.stats", "step_dropout_key.stats":
		return 5, 1, true
	case "track_loss.x", "clip_coef.coef", "clip_coef.sumsq", "scaler_coef.coef", "scaler_coef.sumsq",
		"scaler_coef.lrs", "step_clock.lrs":
		return 1, 1, true
	case "scaler_coef.state":
		return 8, 1, true
	case "step_clock.sched":
		return 3, 1, true
	case "step_dropout_key.key":
		return 2, 1, true
	}
	if e, p, ok := lstmExtent(name, param, arg); ok {
		return e, p, true
	}
	return llamaExtent(name, param, arg)
}
