package kernels

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/backend"
)

// Launch shapes of the attention kernels (attention.cu). In the tiled
// kernels a group of attnGroup(hd) consecutive threads owns one row, 16
// head dimensions per thread, and a block covers attnRows(hd) rows: 64, or
// 32 for the widest groups, so blocks have 64 to 256 threads. These mirror
// ATTN_DISPATCH, attn_rows and ATTN_HDMAX in attention.cu.
const (
	attnHDMax     = 128
	attnKVThreads = 256
	attnKVWarps   = attnKVThreads / 32 // (b, t, h) rows per block of the KV kernel, one warp each
)

// attnGroup is the number of threads that share one row for head size hd:
// the smallest of 1, 2, 4 and 8 that covers hd with 16 dimensions each.
func attnGroup(hd int) int {
	g := 1
	for 16*g < hd {
		g *= 2
	}
	return g
}

// attnRows is the number of rows (queries, or keys in the dk/dv kernel) one
// tiled block covers for head size hd.
func attnRows(hd int) int {
	if attnGroup(hd) == 8 {
		return 32
	}
	return 64
}

// attnBlock is the block shape of the tiled kernels for head size hd.
func attnBlock(hd int) [3]int { return [3]int{attnRows(hd) * attnGroup(hd), 1, 1} }

// The tensor-core kernels (attention_mma.cu): blocks of mmaWarps warps
// owning 64 rows each, and one instantiation per head padding.
const (
	mmaWarps = 4
	mmaRows  = 16 * mmaWarps
)

var mmaBlock = [3]int{32 * mmaWarps, 1, 1}

// mmaPads are the head paddings of the tensor-core kernels, one
// instantiation each (attention_mma.cu's HDP): a head of hd runs on the
// smallest that holds it.
var mmaPads = [...]int{32, 64, attnHDMax}

// mmaTiles are the column tiles of the tensor-core kernels by head
// padding: the keys the forward pass streams at a time, and the queries
// the main backward kernel streams; attention_mma.cu's FA_FWD and FA_BWD
// instantiations (their second argument), which a test holds this table
// to.
var mmaTiles = map[int][2]int{32: {64, 64}, 64: {64, 64}, attnHDMax: {32, 16}}

// MMAPairs is the number of (row, column) score pairs the tensor-core
// kernel op of head padding pad computes for one (sequence, head) of T
// positions, counted as the kernel's loops run: each warp owns 16 rows and
// computes whole 16×BC tiles, so the tiles on the diagonal count whole
// (their masked half included), and so do the rows of a warp past T where
// its loop still runs. The ops: "attention_fwd" (the forward kernel's
// scores), "attention_bwd" (the main backward kernel's Sᵀ and dPᵀ, and so
// its dV and dK products) and "attention_bwd_dq" (the same kernel's dq
// product, over every key of the block for each query tile it loads, the
// tiles of warps with nothing to do included as zeros). T(T+1)/2 pairs are
// needed; at T 1024 and 64-wide tiles the kernels compute about 6% more.
// 0 for an op or padding it does not know.
func MMAPairs(op string, pad, T int) float64 {
	tiles, ok := mmaTiles[pad]
	if !ok || T <= 0 {
		return 0
	}
	var pairs int
	for b0 := 0; b0 < T; b0 += mmaRows { // a block's 64 rows
		switch op {
		case "attention_bwd_dq":
			// Query tiles q0 = b0, b0+BQ, ... below T, each a 64×BQ
			// product for the whole block.
			bq := tiles[1]
			pairs += mmaRows * bq * ((T - b0 + bq - 1) / bq)
			continue
		case "attention_fwd", "attention_bwd":
		default:
			return 0
		}
		for w := range mmaWarps {
			r0 := b0 + 16*w // the warp's first row
			if op == "attention_fwd" {
				// Key tiles k0 = 0, BC, ... below min(T, b0+64), each
				// computed where k0 <= r0+15 (fa_fwd's active).
				bc := tiles[0]
				kend := min(T, b0+mmaRows)
				n := min((kend+bc-1)/bc, (r0+15)/bc+1)
				pairs += 16 * bc * n
				continue
			}
			// Query tiles q0 = b0, b0+BQ, ... below T, each computed
			// where q0+BQ-1 >= r0, for warps whose first key is below T
			// (fa_bwd's active).
			if r0 >= T {
				continue
			}
			bq := tiles[1]
			for q0 := b0; q0 < T; q0 += bq {
				if q0+bq-1 >= r0 {
					pairs += 16 * bq
				}
			}
		}
	}
	return float64(pairs)
}

// mmaNames holds the kernel names by op, variant (F32 storage with bf16
// operands, BF16 storage, F32 storage with f16 operands) and padding,
// built once so that a launch allocates nothing.
var mmaNames = func() map[string][3][len(mmaPads)]string {
	m := map[string][3][len(mmaPads)]string{}
	for _, op := range []string{"attention_fwd", "attention_bwd"} {
		var n [3][len(mmaPads)]string
		for i, p := range mmaPads {
			n[0][i] = fmt.Sprintf("fleet_%s_mma%d_f32", op, p)
			n[1][i] = fmt.Sprintf("fleet_%s_mma%d_bf16", op, p)
			n[2][i] = fmt.Sprintf("fleet_%s_mma%df16_f32", op, p)
		}
		m[op] = n
	}
	return m
}()

// mmaName is the tensor-core kernel of op for attention p stored as dt
// (F32 or BF16), head size hd (<= attnHDMax).
func mmaName(op string, dt backend.DType, p backend.Attention, hd int) string {
	i := 0
	for mmaPads[i] < hd {
		i++
	}
	switch {
	case dt == backend.BF16:
		return mmaNames[op][1][i]
	case p.Round == backend.F16:
		return mmaNames[op][2][i]
	}
	return mmaNames[op][0][i]
}

// mmaGrid is the grid of the tensor-core forward kernel and of the
// backward pass's first and last launches: (b, h) pairs by 64-query
// blocks.
func mmaGrid(p backend.Attention) [3]int {
	return [3]int{p.B * p.H, (p.T + mmaRows - 1) / mmaRows, 1}
}

// mmaBwdGrid is the grid of the main backward kernel: key blocks by
// (b, key/value head), the key blocks of one (b, key/value head) next to
// each other, as FlashAttention-2 orders them, so that the rows of the dq
// accumulator they add to are in L2 while they run.
func mmaBwdGrid(p backend.Attention, kvh int) [3]int {
	return [3]int{(p.T + mmaRows - 1) / mmaRows, p.B * kvh, 1}
}

// mmaAttention reports whether attention p of storage dt runs on the
// tensor-core kernels: on a device that has them, for BF16 storage, or for
// F32 storage whose products p rounds to BF16 or F16 (autocast).
func mmaAttention(l any, dt backend.DType, p backend.Attention) bool {
	return (dt == backend.BF16 || dt == backend.F32 && (p.Round == backend.BF16 || p.Round == backend.F16)) && tensorCores(l)
}

// attnSuffix names the kernel variant for a storage dtype.
func attnSuffix(op string, dt backend.DType) (string, error) {
	switch dt {
	case backend.F32:
		return "f32", nil
	case backend.BF16:
		return "bf16", nil
	}
	return "", fmt.Errorf("%s: dtype %v not supported (want f32 or bf16)", op, dt)
}

// attnCheck validates a shape with KVH key/value heads and returns the
// head size.
func attnCheck(op string, B, T, C, H, KVH int) (int, error) {
	if B < 1 || T < 1 || C < 1 || H < 1 || C%H != 0 || KVH < 1 || H%KVH != 0 {
		return 0, fmt.Errorf("%s: bad shape B=%d T=%d C=%d H=%d KVH=%d (want positive sizes, C a multiple of H, KVH dividing H)", op, B, T, C, H, KVH)
	}
	hd := C / H
	if hd > attnHDMax {
		return 0, fmt.Errorf("%s: head size %d exceeds %d", op, hd, attnHDMax)
	}
	// Every scalar travels as a 32-bit int, the KV kernel numbers its
	// B*T*H warps in a 32-bit grid, and the tiled grids have ceil(T/R)
	// rows, at most 65535. Offsets inside the kernels are 64-bit.
	if 3*int64(C) > math.MaxInt32 || int64(B)*int64(T)*int64(H) > math.MaxInt32 || (T+attnRows(hd)-1)/attnRows(hd) > 65535 {
		return 0, fmt.Errorf("%s: shape B=%d T=%d C=%d H=%d too large", op, B, T, C, H)
	}
	return hd, nil
}

// attnGrid is the grid of the tiled kernels: x runs over the B*H
// (batch, head) pairs, y over the row blocks. The kernels number row
// blocks so that y = 0 is the one with the most work (the last query
// block, or the first key block), and the hardware starts blocks roughly
// in linear order, so the long blocks start first.
func attnGrid(B, T, H, hd int) [3]int {
	r := attnRows(hd)
	return [3]int{B * H, (T + r - 1) / r, 1}
}

// Attention launches causal self-attention (backend.Backend.Attention) on
// packed qkv [B, T, 3C] (with p.KVH key/value heads, [B, T, C +
// 2·KVH·C/H]: query head h reads key/value head h/(H/KVH) where it lies):
// out [B, T, C] and qkv are stored as dt (F32 or BF16), lse [B, H, T] is
// F32. One launch: fleet_attention_fwd_<dt>, or,
// on a device with tensor cores, for BF16 or for F32 with p.Round BF16,
// fleet_attention_fwd_mma<HDP>_<dt> (attention_mma.cu), and for F32 with
// p.Round F16, fleet_attention_fwd_mma<HDP>f16_f32.
func Attention[B comparable](l Launcher[B], dt backend.DType, p backend.Attention, out, lse, qkv B) error {
	var base B
	return AttentionAt(l, dt, p, out, lse, qkv, base)
}

// attnDropArgs appends p.Drop's mask to a launch's arguments, as the
// other dropout kernels take it (seed, offset, site, threshold, scale,
// then seedBase, base: the device-held key of p.Drop.Base, or B's zero
// value); a threshold of 0 turns the kernels' dropout off.
func attnDropArgs[B comparable](a *Args[B], p backend.Attention, base B) *Args[B] {
	m := p.Drop
	if !p.Dropped() {
		m = backend.DropoutMask{Scale: 1}
	}
	return a.Long(int64(m.Seed)).Long(m.Offset).Int(int32(m.Site)).Uint(m.Threshold).Float(m.Scale).Buf(base)
}

// AttentionAt is Attention where p.Drop's key is offset by the one base
// holds on the device (backend.DropoutMask.Base).
func AttentionAt[B comparable](l Launcher[B], dt backend.DType, p backend.Attention, out, lse, qkv, base B) error {
	const op = "attention"
	_, err := attnSuffix(op, dt)
	if err != nil {
		return err
	}
	hd, err := attnCheck(op, p.B, p.T, p.C, p.H, p.KVHeads())
	if err != nil {
		return err
	}
	shape := *attnDropArgs(new(Args[B]).Buf(out, lse, qkv).Int(int32(p.B), int32(p.T), int32(p.C), int32(p.H), int32(p.KVHeads())), p, base)
	if mmaAttention(l, dt, p) {
		return l.Launch(mmaName("attention_fwd", dt, p, hd), mmaGrid(p), mmaBlock, 0, shape)
	}
	return l.Launch(name("attention_fwd", dt, 0), attnGrid(p.B, p.T, p.H, hd), attnBlock(hd), 0, shape)
}

// AttentionBackwardScratch is the number of F32 elements of scratch
// AttentionBackward needs: one D_i = dout_i·out_i per score row, B·H·T,
// then the tensor-core pass's dq accumulator, B·T·C (the CUDA-core kernels
// use only the first part).
func AttentionBackwardScratch(p backend.Attention) int { return p.B*p.H*p.T + p.B*p.T*p.C }

// AttentionBackward launches the attention backward pass
// (backend.Backend.AttentionBackward): dqkv [B, T, 3C] from dout and out
// [B, T, C], lse [B, H, T] (F32, from Attention) and qkv. dqkv, dout, out
// and qkv are stored as dt; scratch holds AttentionBackwardScratch(p) F32
// elements. Every element of dqkv is written.
//
// On the CUDA cores, two launches, in this order: fleet_attention_bwd_dq_<dt>
// (writes dq and the D_i in scratch), then fleet_attention_bwd_dkdv_<dt>
// (reads them, writes dk and dv, each key/value head's summed over the
// query heads of its group in a fixed order: the dkdv grid runs over the
// key/value heads). Deterministic.
//
// Where Attention runs on tensor cores, FlashAttention-2's backward in
// three launches: fleet_attention_bwd_pre_<dt> (the D_i, and the dq
// accumulator in scratch zeroed), fleet_attention_bwd_mma<HDP>_<dt>
// (the scores and dP once per pair: dk and dv, summed over each group's
// query heads in a fixed order, and dq added to the accumulator with
// float atomics), then fleet_attention_bwd_post_<dt> (dq from the
// accumulator). The atomics add each key block's share of a dq element in
// the order the blocks run, so on a GPU dq's bits may differ from run to
// run; dk and dv do not.
func AttentionBackward[B comparable](l Launcher[B], dt backend.DType, p backend.Attention, dqkv, dout, out, lse, qkv, scratch B) error {
	var base B
	return AttentionBackwardAt(l, dt, p, dqkv, dout, out, lse, qkv, scratch, base)
}

// AttentionBackwardAt is AttentionBackward with AttentionAt's base.
func AttentionBackwardAt[B comparable](l Launcher[B], dt backend.DType, p backend.Attention, dqkv, dout, out, lse, qkv, scratch, base B) error {
	const op = "attention backward"
	_, err := attnSuffix(op, dt)
	if err != nil {
		return err
	}
	kvh := p.KVHeads()
	hd, err := attnCheck(op, p.B, p.T, p.C, p.H, kvh)
	if err != nil {
		return err
	}
	nb, nt, nc, nh, nkv := int32(p.B), int32(p.T), int32(p.C), int32(p.H), int32(kvh)
	if mmaAttention(l, dt, p) {
		if p.B*kvh > 65535 {
			return fmt.Errorf("%s: B=%d by KVH=%d is %d (batch, key/value head) pairs, more than the 65535 of a grid's y", op, p.B, kvh, p.B*kvh)
		}
		pre := *new(Args[B]).Buf(scratch, dout, out).Int(nb, nt, nc, nh)
		if dt == backend.F32 {
			f16 := int32(0)
			if p.Round == backend.F16 {
				f16 = 1
			}
			pre.Int(f16)
		}
		if err := l.Launch(name("attention_bwd_pre", dt, 0), mmaGrid(p), mmaBlock, 0, pre); err != nil {
			return err
		}
		args := *attnDropArgs(new(Args[B]).Buf(dqkv, scratch, dout, lse, qkv).Int(nb, nt, nc, nh, nkv), p, base)
		if err := l.Launch(mmaName("attention_bwd", dt, p, hd), mmaBwdGrid(p, kvh), mmaBlock, 0, args); err != nil {
			return err
		}
		return l.Launch(name("attention_bwd_post", dt, 0), mmaGrid(p), mmaBlock, 0, *new(Args[B]).Buf(dqkv, scratch).Int(nb, nt, nc, nh, nkv))
	}
	grid, gridKV, block := attnGrid(p.B, p.T, p.H, hd), attnGrid(p.B, p.T, kvh, hd), attnBlock(hd)
	dq, dkdv := name("attention_bwd_dq", dt, 0), name("attention_bwd_dkdv", dt, 0)
	if err := l.Launch(dq, grid, block, 0, *attnDropArgs(new(Args[B]).Buf(dqkv, scratch, dout, out, lse, qkv).Int(nb, nt, nc, nh, nkv), p, base)); err != nil {
		return err
	}
	return l.Launch(dkdv, gridKV, block, 0, *attnDropArgs(new(Args[B]).Buf(dqkv, scratch, dout, lse, qkv).Int(nb, nt, nc, nh, nkv), p, base))
}

// AttentionKV launches inference attention against a key/value cache
// (backend.Backend.AttentionKV): k and v of qkv [B, T, 3C] go into kc and vc
// [B, MaxT, C] at positions [Pos, Pos+T), and out [B, T, C] is attention of
// each new position over positions [0, Pos+t]; with p.KVH key/value heads,
// qkv is [B, T, C + 2·KVH·C/H] and the caches [B, MaxT, KVH·C/H]. All four
// buffers are stored as dt. One launch of fleet_attention_kv_<dt>, one warp
// per (b, t, h).
func AttentionKV[B comparable](l Launcher[B], dt backend.DType, p backend.AttentionKV, out, qkv, kc, vc B) error {
	const op = "attention with cache"
	_, err := attnSuffix(op, dt)
	if err != nil {
		return err
	}
	if _, err := attnCheck(op, p.B, p.T, p.C, p.H, p.KVHeads()); err != nil {
		return err
	}
	if p.Pos < 0 || p.MaxT > math.MaxInt32 || int64(p.Pos)+int64(p.T) > int64(p.MaxT) {
		return fmt.Errorf("%s: positions [%d, %d) outside the cache of %d", op, p.Pos, p.Pos+p.T, p.MaxT)
	}
	warps := p.B * p.T * p.H
	grid := [3]int{(warps + attnKVWarps - 1) / attnKVWarps, 1, 1}
	return l.Launch(name("attention_kv", dt, 0), grid, [3]int{attnKVThreads, 1, 1}, 0, *new(Args[B]).Buf(out, qkv, kc, vc).Int(int32(p.B), int32(p.T), int32(p.C), int32(p.H), int32(p.KVHeads()), int32(p.Pos), int32(p.MaxT)))
}
