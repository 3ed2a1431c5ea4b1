package ddp

import (
	"fmt"
	"math"
)

// Gather returns every rank's vals, in rank order (the same on every
// rank): what a figure that is not a mean needs, such as the job's peak
// memory (the largest rank's). The values travel as two float32 each (a
// value and its remainder), so they arrive to about 1e-14 of what each
// rank sent, not float32's 1e-7. A group with no process group (a
// Stepper's) gathers its own values alone.
func (d *Group) Gather(vals []float64) ([][]float64, error) {
	if d.pg == nil {
		return [][]float64{append([]float64(nil), vals...)}, nil
	}
	n, world := len(vals), d.pg.Size()
	send := make([]float32, 2*n)
	for i, v := range vals {
		hi := float32(v)
		send[2*i] = hi
		if lo := v - float64(hi); !math.IsNaN(lo) && !math.IsInf(lo, 0) { // not for NaN, ±Inf or beyond float32
			send[2*i+1] = float32(lo)
		}
	}
	recv := make([]float32, world*len(send))
	if err := d.pg.AllGather(send, recv); err != nil {
		d.err = err
		return nil, fmt.Errorf("gathering the ranks' figures: %w", err)
	}
	out := make([][]float64, world)
	for r := range out {
		got := recv[r*len(send) : (r+1)*len(send)]
		out[r] = make([]float64, n)
		for i := range out[r] {
			out[r][i] = float64(got[2*i]) + float64(got[2*i+1])
		}
	}
	return out, nil
}
