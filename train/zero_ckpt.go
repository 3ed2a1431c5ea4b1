package train

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/dist"
)

// A checkpoint of a --zero 1 group holds AdamW's moments in one file per
// rank, ShardFile(k): rank k's contiguous shard [lo, hi) of the flat
// buffers. Each rank other than 0 writes its shard durably into the
// checkpoint folder's staging area (.shards) and reports its size and sum
// through the job's store; rank 0 writes its own with the step's other
// files and commits the step (moves latest) only once every shard is
// durable, moving the others' into the step's directory. The optimizer
// state file then holds no moments, but records how the flat buffer was
// cut (zero_world, and zero_layout: each parameter's offset in it), so a
// resume with any number of ranks, sharded or not, reassembles them.
const (
	metaZeroWorld  = "zero_world"
	metaZeroLayout = "zero_layout"
	metaZeroN      = "zero_n"
	shardStaging   = ".shards"
)

// ShardFile is the file of rank k's shard of the moments in a --zero 1
// checkpoint.
func ShardFile(k int) string { return fmt.Sprintf("optimizer-shard-%d.safetensors", k) }

// flatParam places a parameter in the optimizer's flat buffers.
type flatParam struct {
	Name   string `json:"name"`
	Offset int    `json:"offset"`
	Numel  int    `json:"numel"`
}

// shardSnap is a rank's shard of the moments as a step's checkpoint holds
// it, and what committing the step needs.
type shardSnap struct {
	rank, world, lo, hi, n, step int
	m, v                         []float32
	layout                       []flatParam
	store                        *dist.Store
	timeout                      time.Duration
}

// stagedShard is where rank k stages its shard of step's checkpoint.
func stagedShard(root string, step, k int) string {
	return filepath.Join(root, shardStaging, fmt.Sprintf("%s-%s", checkpoint.DirName(step), ShardFile(k)))
}

func shardKey(step, k int) string { return fmt.Sprintf("ckpt/shard/%d/%d", step, k) }

// saveShard snapshots this rank's shard [lo, hi) of the moments (of a
// group of world ranks, whose store rank 0 learns of it through) for
// step's checkpoint; a rank other than 0 writes it durably and reports it
// to rank 0 through the store.
func (c *checkpointer) saveShard(r *run, step, lo, hi, world int, store *dist.Store) error {
	sh := c.shard
	if sh == nil {
		offs := r.opt.FlatOffsets()
		sh = &shardSnap{rank: r.cfg.Rank, world: world, lo: lo, hi: hi, n: r.opt.PackedParams().Numel(),
			store: store, timeout: r.cfg.CollectiveTimeout()}
		for i, p := range r.opt.Parameters() {
			sh.layout = append(sh.layout, flatParam{Name: p.Name, Offset: offs[i], Numel: p.T.Numel()})
		}
		sh.m, sh.v = make([]float32, hi-lo), make([]float32, hi-lo)
		c.shard = sh
	}
	sh.step = step
	if hi > lo {
		m, v := r.opt.Moments()
		m.Rows(0, hi-lo).ReadFloat32s(sh.m)
		v.Rows(0, hi-lo).ReadFloat32s(sh.v)
	}
	if sh.rank == 0 {
		return nil // written and committed with the step (checkpointer.write)
	}
	sum, err := checkpoint.WriteStaged(stagedShard(c.root, step, sh.rank), sh.encode)
	if err != nil {
		return fmt.Errorf("checkpoint step %d: rank %d's shard of the optimizer: %w", step, sh.rank, err)
	}
	if err := sh.store.Set(shardKey(step, sh.rank), []byte(fmt.Sprintf("%d %s", sum.Size, sum.SHA256))); err != nil {
		return fmt.Errorf("checkpoint step %d: reporting rank %d's shard: %w", step, sh.rank, err)
	}
	return nil
}

// encode writes the shard as a safetensors file.
func (sh *shardSnap) encode(w io.Writer) error {
	f := &checkpoint.File{
		Metadata: map[string]string{"step": strconv.Itoa(sh.step), "rank": strconv.Itoa(sh.rank), metaZeroWorld: strconv.Itoa(sh.world),
			"lo": strconv.Itoa(sh.lo), "hi": strconv.Itoa(sh.hi), metaZeroN: strconv.Itoa(sh.n)},
		Tensors: map[string]checkpoint.Tensor{
			"exp_avg":    {DType: checkpoint.F32, Shape: []int{sh.hi - sh.lo}, Data: backend.AsBytes(sh.m)},
			"exp_avg_sq": {DType: checkpoint.F32, Shape: []int{sh.hi - sh.lo}, Data: backend.AsBytes(sh.v)},
		},
	}
	return checkpoint.Encode(w, f)
}

// metadata records in the state file how the flat buffer was cut.
func (sh *shardSnap) metadata(meta map[string]string) {
	b, _ := json.Marshal(sh.layout)
	meta[metaZeroWorld] = strconv.Itoa(sh.world)
	meta[metaZeroN] = strconv.Itoa(sh.n)
	meta[metaZeroLayout] = string(b)
}

// others waits (up to the collective timeout) for every other rank's shard
// of step to be durable and returns them as entries moved into the step's
// directory.
func (sh *shardSnap) others(root string, step int) ([]checkpoint.Entry, error) {
	var out []checkpoint.Entry
	for k := 1; k < sh.world; k++ {
		v, err := sh.store.GetTimeout(shardKey(step, k), sh.timeout)
		if err != nil {
			return nil, fmt.Errorf("checkpoint step %d: rank %d's shard of the optimizer: %w", step, k, err)
		}
		var sum checkpoint.FileSum
		if _, err := fmt.Sscanf(string(v), "%d %s", &sum.Size, &sum.SHA256); err != nil {
			return nil, fmt.Errorf("checkpoint step %d: rank %d reported its shard as %q", step, k, v)
		}
		from := stagedShard(root, step, k)
		if _, err := os.Stat(from); err != nil {
			return nil, fmt.Errorf("checkpoint step %d: rank %d reported its shard of the optimizer written, but %s is not there: "+
				"every rank must write into rank 0's --out (on several nodes, storage they share): %w", step, k, from, err)
		}
		out = append(out, checkpoint.Entry{Name: ShardFile(k), From: from, Sum: sum})
	}
	return out, nil
}

// cleanStaged removes staged shards of steps up to step (committed, or
// left by an attempt that was killed, whole or half written).
func (sh *shardSnap) cleanStaged(root string, step int) {
	dir := filepath.Join(root, shardStaging)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		// A staged shard, or atomicfile's temporary one (".NAME.tmp-…")
		// that a kill left.
		name, _, ok := strings.Cut(strings.TrimPrefix(e.Name(), "."), "-optimizer-shard-")
		if !ok {
			continue
		}
		var s int
		if _, err := fmt.Sscanf(name, "step-%d", &s); err == nil && s <= step {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// restoreShards loads the moments of a --zero 1 checkpoint in dir, written
// by any number of ranks, into the (unpacked) optimizer: whole, as a run
// of any number of ranks, sharded or not, takes them (Shard keeps its own
// part later).
func restoreShards(r *run, dir string, meta map[string]string) error {
	world, err := strconv.Atoi(meta[metaZeroWorld])
	if err != nil || world < 1 {
		return fmt.Errorf("%s %q", metaZeroWorld, meta[metaZeroWorld])
	}
	n, err := strconv.Atoi(meta[metaZeroN])
	if err != nil || n < 0 {
		return fmt.Errorf("%s %q", metaZeroN, meta[metaZeroN])
	}
	var layout []flatParam
	if err := json.Unmarshal([]byte(meta[metaZeroLayout]), &layout); err != nil {
		return fmt.Errorf("%s: %v", metaZeroLayout, err)
	}
	m, v := make([]float32, n), make([]float32, n)
	covered := 0
	for k := range world {
		path := filepath.Join(dir, ShardFile(k))
		f, err := checkpoint.Load(path)
		if err != nil {
			return err
		}
		lo, err1 := strconv.Atoi(f.Metadata["lo"])
		hi, err2 := strconv.Atoi(f.Metadata["hi"])
		if err1 != nil || err2 != nil || lo != covered || hi < lo || hi > n {
			return fmt.Errorf("%s covers [%s, %s), want it to start at %d of %d", path, f.Metadata["lo"], f.Metadata["hi"], covered, n)
		}
		for name, dst := range map[string][]float32{"exp_avg": m[lo:hi], "exp_avg_sq": v[lo:hi]} {
			t, ok := f.Tensors[name]
			if !ok {
				return fmt.Errorf("%s: missing tensor %s", path, name)
			}
			vals, err := t.Float32s()
			if err != nil || len(vals) != hi-lo {
				return fmt.Errorf("%s: tensor %s holds %d values, want %d (%v)", path, name, len(vals), hi-lo, err)
			}
			copy(dst, vals)
		}
		covered = hi
	}
	if covered != n {
		return fmt.Errorf("the shards cover %d of %d flat elements", covered, n)
	}
	at := map[string]flatParam{}
	for _, fp := range layout {
		at[fp.Name] = fp
	}
	for i, p := range r.model.Parameters() {
		fp, ok := at[p.Name]
		if !ok || fp.Numel != p.T.Numel() || fp.Offset < 0 || fp.Offset+fp.Numel > n {
			return fmt.Errorf("the shards' layout does not place parameter %s (%d elements)", p.Name, p.T.Numel())
		}
		mi, vi := r.opt.State(i)
		mi.SetFloat32s(m[fp.Offset : fp.Offset+fp.Numel])
		vi.SetFloat32s(v[fp.Offset : fp.Offset+fp.Numel])
	}
	return nil
}
