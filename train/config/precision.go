package config

import (
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/tensor"
)

// Precision is the precision of a run's matrix products (Config.Precision,
// --precision). Master weights, statistics, the loss and the optimizer are
// F32 under every one.
type Precision uint8

const (
	// FP32 multiplies F32 operands.
	FP32 Precision = iota
	// BF16 rounds the products' operands to bfloat16 and keeps the
	// activations in BF16, accumulating in F32.
	BF16
	// FP16 rounds the products' operands to float16, under dynamic loss
	// scaling.
	FP16
)

// precisions are the names --precision takes, by Precision, and the dtype
// each multiplies in.
var precisions = [...]struct {
	name string
	dt   tensor.DType
}{FP32: {"fp32", tensor.F32}, BF16: {"bf16", tensor.BF16}, FP16: {"fp16", tensor.F16}}

// ParsePrecision reads a --precision value; "" is fp32.
func ParsePrecision(s string) (Precision, error) {
	if s == "" {
		return FP32, nil
	}
	for p, d := range precisions {
		if d.name == s {
			return Precision(p), nil
		}
	}
	return FP32, setting.Errorf("{Precision} must be fp32, bf16 or fp16, got %q", s)
}

// String is the name --precision and config.json give it.
func (p Precision) String() string { return precisions[p].name }

// DType is the dtype the matrix products' operands are rounded to.
func (p Precision) DType() tensor.DType { return precisions[p].dt }

// LossScaled reports whether the precision trains under dynamic loss
// scaling (fp16, whose range is too narrow for small gradients).
func (p Precision) LossScaled() bool { return p == FP16 }

// MarshalText writes the precision's name, so JSON records it as config.json
// does.
func (p Precision) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a name ParsePrecision takes.
func (p *Precision) UnmarshalText(b []byte) error {
	q, err := ParsePrecision(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}
