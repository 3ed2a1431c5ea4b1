package units

import "testing"

func TestBytes(t *testing.T) {
	for in, want := range map[int64]string{
		-5: "0 B", 0: "0 B", 100: "100 B", 1000: "1000 B", 1023: "1 KiB", 1020: "1020 B",
		64 << 10: "64 KiB", 1536: "1.5 KiB", 1 << 20: "1 MiB", 3 << 19: "1.5 MiB",
		1 << 30: "1 GiB", 12 * (1 << 30 / 12): "1 GiB", 12 * (64 << 10 / 12): "64 KiB",
		3 << 30: "3 GiB", 141 << 30: "141 GiB", 72*(1<<20) + 200<<10: "72.2 MiB", 2 << 40: "2 TiB",
	} {
		if got := Bytes(in); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", in, got, want)
		}
	}
}
