package ddp

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
)

// oneRankGroup is a dist.DeviceGroup of one rank that does nothing, or
// fails every collective with fail.
type oneRankGroup struct{ fail error }

func (g *oneRankGroup) Rank() int { return 0 }
func (g *oneRankGroup) Size() int { return 1 }
func (g *oneRankGroup) AllReduce(uintptr, int, dist.DType, dist.Op, uintptr) error {
	return g.fail
}
func (g *oneRankGroup) Broadcast(uintptr, int, dist.DType, int, uintptr) error { return g.fail }
func (g *oneRankGroup) AllGather(uintptr, uintptr, int, dist.DType, uintptr) error {
	return g.fail
}
func (g *oneRankGroup) ReduceScatterShards(uintptr, int, int, dist.Bounds, dist.DType, dist.Op, uintptr) error {
	return g.fail
}
func (g *oneRankGroup) AllGatherShards(uintptr, dist.Bounds, dist.DType, uintptr) error {
	return g.fail
}
func (g *oneRankGroup) CheckAsync() error { return nil }
func (g *oneRankGroup) Abort() error      { return nil }
func (g *oneRankGroup) Close() error      { return nil }

// TestDeviceCollectivesInFlightRecord: the device path's collectives (the
// broadcast at the start, each bucket's all-reduce or, sharded, its
// reduce-scatter, the norm's all-reduce and the parameters' gather) go
// into the flight record, numbered with the group's, tagged with their
// bucket, running from their enqueueing and done once the watchdog sees
// their step finish; one that fails to enqueue is recorded failed, with
// its error.
func TestDeviceCollectivesInFlightRecord(t *testing.T) {
	c := config.Default()
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize = 2, 2, 64, 32
	m, err := model.New(c.ModelConfig(65), tensor.CPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	opt := optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3})
	if !opt.Pack() {
		t.Fatal("the optimizer did not pack")
	}
	defer opt.Free()
	grp := &oneRankGroup{}
	d, err := newDeviceDDP(grp, tensor.CPU, m.Parameters(), opt.PackedGrads, 0, time.Minute, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close(false)
	d.bucket = 64 << 10 // several buckets of a small model
	d.flight = dist.NewFlightRecorder()
	if err := d.broadcast(); err != nil {
		t.Fatal(err)
	}
	// Step 1 cuts the buckets and launches them after backward; step 2
	// launches them from the gradient hook, sharded.
	if err := d.sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.shard(dist.EvenBounds(d.n, 1)); err != nil {
		t.Fatal(err)
	}
	params := m.Parameters()
	for i := len(params) - 1; i >= 0; i-- {
		d.ready(params[i].T)
	}
	if err := errors.Join(d.sync(), d.sumShards(tensor.Zeros(tensor.CPU)), d.gatherShards(opt.PackedParams()), d.drain()); err != nil {
		t.Fatal(err)
	}
	es := d.flight.Entries()
	nb := len(d.buckets)
	if nb < 3 {
		t.Fatalf("%d buckets, want several", nb)
	}
	var got []string
	for i, e := range es {
		if e.Seq != i+1 || e.State != dist.FlightDone || e.Started == 0 || e.Ended < e.Started || e.Bytes <= 0 {
			t.Errorf("entry %d: %+v", i, e)
		}
		got = append(got, fmt.Sprintf("%s #%d %s", e.Op, e.KindSeq, e.Tag))
	}
	want := []string{"nccl broadcast #1 parameters"}
	for b := range nb {
		want = append(want, fmt.Sprintf("nccl all-reduce #%d bucket %d", b+1, b))
	}
	// The hook launches the buckets in the order backward finishes them:
	// from the end of the flat buffer (the parameters without decay, then
	// the last layers' weights).
	for k := range nb {
		want = append(want, fmt.Sprintf("nccl reduce-scatter #%d bucket ", k+1))
	}
	want = append(want, "nccl all-reduce #"+fmt.Sprint(nb+1)+" gradient norm", "nccl all-gather-shards #1 parameters")
	if len(got) != len(want) {
		t.Fatalf("flight record:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("entry %d is %q, want %q", i+1, got[i], want[i])
		}
	}

	grp.fail = errors.New("injected")
	if err := d.sumShards(tensor.Zeros(tensor.CPU)); err == nil {
		t.Fatal("a collective that failed to enqueue returned no error")
	}
	es = d.flight.Entries()
	if e := es[len(es)-1]; e.State != dist.FlightFailed || !strings.Contains(e.Error, "injected") || e.Op != "nccl all-reduce" {
		t.Errorf("the failed collective's entry: %+v", e)
	}
}
