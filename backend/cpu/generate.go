package cpu

// The repetitive assembly (gemm512_amd64.s, bf16gemm_amd64.s and
// vexp_amd64.s) is written by a script; the other .s files are written by
// hand. Regenerate with go generate ./backend/cpu (it needs python3).
//go:generate python3 ../../scripts/gen_cpu_asm.py
