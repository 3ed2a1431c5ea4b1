package rng

// Philox4x32 is the counter-based generator Philox4x32-10 (Salmon, Moraes,
// Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC11): ten
// rounds of multiplications, XORs with the key and a key schedule of Weyl
// increments, turning a 128-bit counter and a 64-bit key into four 32-bit
// words. Any counter's words are computed on their own, so a device draws
// the number of each element where it uses it. The dropout kernels of every
// backend compute exactly this (backend.DropoutMask).
func Philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	const (
		m0, m1 = 0xD2511F53, 0xCD9E8D57
		w0, w1 = 0x9E3779B9, 0xBB67AE85
	)
	for round := 0; round < 10; round++ {
		if round > 0 {
			key[0] += w0
			key[1] += w1
		}
		p0 := uint64(m0) * uint64(ctr[0])
		p1 := uint64(m1) * uint64(ctr[2])
		ctr = [4]uint32{uint32(p1>>32) ^ ctr[1] ^ key[0], uint32(p1), uint32(p0>>32) ^ ctr[3] ^ key[1], uint32(p0)}
	}
	return ctr
}
