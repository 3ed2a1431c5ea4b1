package optim_test

import (
	"testing"

	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// BenchmarkMuonStep times one Muon step of the README's reference shape
// (Llama-style blocks, 4 layers, 128 wide) on the CPU, packed as the
// trainer packs it.
func BenchmarkMuonStep(b *testing.B) {
	m, err := model.New(model.Config{Arch: model.ArchLlama, VocabSize: 65, BlockSize: 64, NLayer: 4, NHead: 4, NEmbd: 128, QKNorm: true}, tensor.CPU, 1)
	if err != nil {
		b.Fatal(err)
	}
	o, err := optim.NewMuon(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95}, optim.MuonConfig{LR: 0.02, Momentum: 0.95})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Free()
	if !o.Pack() {
		b.Fatal("not packed")
	}
	r := tensor.NewRNG(1)
	g := tensor.Randn(tensor.CPU, r, 1e-2, o.PackedGrads().Numel())
	o.PackedGrads().CopyFrom(g)
	b.ResetTimer()
	for range b.N {
		o.StepSched(nil, nil)
	}
}
