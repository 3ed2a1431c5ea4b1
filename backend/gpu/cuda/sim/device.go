package sim

import (
	"maps"
	"math"
	"sort"
	"sync"
	"unsafe"

	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// Counters is what a simulated device has recorded since it opened. Every
// field but Peak only grows: Sub gives a window's.
type Counters struct {
	// Launches counts every unit of work enqueued: kernels, cuBLAS calls,
	// copies and memsets; ByKernel splits it by kernel (cuBLAS calls and
	// copies by their function's name).
	Launches int64
	ByKernel map[string]int64
	// FLOPsByKernel, BytesByKernel and SecondsByKernel split FLOPs,
	// BytesTouched and DeviceSeconds the same way: what the cost model
	// charges each kernel.
	FLOPsByKernel, BytesByKernel, SecondsByKernel map[string]float64
	// HostSyncs counts the calls that make the host wait for the device:
	// stream, event and context synchronisations, synchronous copies,
	// device-to-host copies into pageable memory, and cuMemFree (which
	// waits for the device to go idle).
	HostSyncs int64
	// SyncsBy splits HostSyncs by the call that waited.
	SyncsBy            map[string]int64
	H2DBytes, D2HBytes int64
	// DriverAllocs counts cuMemAlloc and cuMemHostAlloc calls.
	DriverAllocs int64
	// BytesTouched sums, over launches, the bytes each one reads and
	// writes: for a kernel, each pointer argument's traffic as the kernel's
	// source states it (kernels.Extent: the elements the launch reads, and
	// those it writes, never past the end of the allocation the pointer
	// points into); for a GEMM, its three matrices (C twice where it is
	// read too). A model of the traffic, not a measurement: caches are
	// not modelled.
	BytesTouched float64
	// FLOPs sums the launches' floating-point work: 2·M·N·K per GEMM, and
	// kernels.FLOPs for kernels (the work they execute: a tensor-core
	// attention kernel's whole tiles, the masked halves of the diagonal
	// ones included).
	FLOPs float64
	// DeviceSeconds is the cost model's estimate of the device's busy
	// time: each launch takes max(bytes / (0.85 × bandwidth), FLOPs /
	// (efficiency × peak)) plus 1 µs, efficiency TensorCoreEfficiency for
	// products, MMAEfficiency for mma.sync kernels and CUDACoreEfficiency
	// (of the FP32 peak) for the rest. An estimate, not a measurement.
	// Collectives are not in it (CommSeconds).
	DeviceSeconds float64
	// CommSeconds is the collectives' time on their streams, by the bus
	// bandwidth model (BusBandwidth); ExposedCommSeconds the part of it
	// the compute stream spent waiting for them (cuStreamWaitEvent on an
	// event of a collectives' stream not yet reached), which adds to the
	// step's device time. Estimates.
	CommSeconds, ExposedCommSeconds float64
	// Peak is the most device memory the driver has had allocated at
	// once, in bytes.
	Peak int64
}

// Sub is the window from o (earlier) to c; Peak stays c's.
func (c Counters) Sub(o Counters) Counters {
	w := Counters{
		Launches: c.Launches - o.Launches, HostSyncs: c.HostSyncs - o.HostSyncs,
		H2DBytes: c.H2DBytes - o.H2DBytes, D2HBytes: c.D2HBytes - o.D2HBytes,
		DriverAllocs: c.DriverAllocs - o.DriverAllocs, BytesTouched: c.BytesTouched - o.BytesTouched,
		FLOPs: c.FLOPs - o.FLOPs, DeviceSeconds: c.DeviceSeconds - o.DeviceSeconds, Peak: c.Peak,
		CommSeconds: c.CommSeconds - o.CommSeconds, ExposedCommSeconds: c.ExposedCommSeconds - o.ExposedCommSeconds,
		ByKernel: map[string]int64{}, SyncsBy: map[string]int64{},
		FLOPsByKernel: subFloats(c.FLOPsByKernel, o.FLOPsByKernel), BytesByKernel: subFloats(c.BytesByKernel, o.BytesByKernel),
		SecondsByKernel: subFloats(c.SecondsByKernel, o.SecondsByKernel),
	}
	for k, v := range c.ByKernel {
		if d := v - o.ByKernel[k]; d != 0 {
			w.ByKernel[k] = d
		}
	}
	for k, v := range c.SyncsBy {
		if d := v - o.SyncsBy[k]; d != 0 {
			w.SyncsBy[k] = d
		}
	}
	return w
}

// subFloats is c - o by key, keeping the keys that differ.
func subFloats(c, o map[string]float64) map[string]float64 {
	w := map[string]float64{}
	for k, v := range c {
		if d := v - o[k]; d != 0 {
			w[k] = d
		}
	}
	return w
}

// Device is one simulated GPU: its memory accounts, its handles and what
// it has recorded. Its libraries (Driver, NVRTC, CUBLAS) call into it; it
// is safe for use by several goroutines.
type Device struct {
	Spec Spec

	mu    sync.Mutex
	c     Counters
	next  uint64
	bases []uint64          // live device blocks, sorted
	sizes map[uint64]uint64 // block -> bytes
	used  int64
	// ltWorkspace is the workspace bytes the last cublasLtMatmul was given.
	ltWorkspace int64
	// contexts counts the primary context's retains: while one is held,
	// it takes ContextBytes beside used.
	contexts int
	// pinned holds the page-locked host blocks it handed out, by
	// address, keeping them alive.
	pinned map[uintptr][]byte

	handle   uintptr            // the last handle given out
	programs map[uintptr]string // NVRTC program -> source
	images   map[uintptr]string // compiled image id -> source
	modules  map[uintptr][]cudakernels.Signature
	funcs    map[uintptr]*function
	events   map[uintptr]float64 // event -> its stream's clock when recorded
	failWait uintptr             // a CUresult the next synchronisation returns (FailNextWait)
	// capture, while a stream captures, is the work it records instead
	// of running; graphs and execs hold captured graphs and their
	// launchable forms, by handle.
	capture *[]node
	graphs  map[uintptr][]node
	execs   map[uintptr][]node
	// The timelines: the compute clock is DeviceSeconds +
	// ExposedCommSeconds (every stream but the collectives' runs on it);
	// comm is the collectives' streams' clock, commStreams those streams,
	// and waits what each stream was last told to wait for.
	comm        float64
	commStreams map[uintptr]bool
	waits       map[uintptr]float64
	strings     [][]byte // C strings handed out, kept alive
}

// function is a kernel a module holds: its parameters, where in them the
// FLOPs formula finds its scalars, and whether it multiplies on tensor
// cores (kernels.TensorCoreKernel, decided once when it is loaded).
type function struct {
	name       string
	params     []cudakernels.Param
	index      map[string]int
	tensorCore bool
}

// New returns a simulated device of the given model, with nothing
// allocated and nothing recorded.
func New(spec Spec) *Device {
	return &Device{Spec: spec, next: 1 << 32, sizes: map[uint64]uint64{}, pinned: map[uintptr][]byte{},
		programs: map[uintptr]string{}, images: map[uintptr]string{}, modules: map[uintptr][]cudakernels.Signature{},
		funcs: map[uintptr]*function{}, events: map[uintptr]float64{},
		commStreams: map[uintptr]bool{}, waits: map[uintptr]float64{},
		graphs: map[uintptr][]node{}, execs: map[uintptr][]node{},
		c: Counters{ByKernel: map[string]int64{}, SyncsBy: map[string]int64{},
			FLOPsByKernel: map[string]float64{}, BytesByKernel: map[string]float64{}, SecondsByKernel: map[string]float64{}}}
}

// Counters returns a copy of what the device has recorded so far.
func (d *Device) Counters() Counters {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.c
	c.ByKernel = make(map[string]int64, len(d.c.ByKernel))
	for k, v := range d.c.ByKernel {
		c.ByKernel[k] = v
	}
	c.SyncsBy = make(map[string]int64, len(d.c.SyncsBy))
	for k, v := range d.c.SyncsBy {
		c.SyncsBy[k] = v
	}
	c.FLOPsByKernel, c.BytesByKernel, c.SecondsByKernel = maps.Clone(d.c.FLOPsByKernel), maps.Clone(d.c.BytesByKernel), maps.Clone(d.c.SecondsByKernel)
	return c
}

// Used is the device memory allocated now, in bytes (the context's
// ContextBytes not included).
func (d *Device) Used() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.used
}

// LtWorkspaceBytes is the workspace the last cublasLtMatmul was given, in
// bytes (a live block of device memory at least that long, or the call
// fails).
func (d *Device) LtWorkspaceBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ltWorkspace
}

// contextBytes is what the context holds now: ContextBytes while it is
// retained, else 0.
func (d *Device) contextBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.contexts > 0 {
		return ContextBytes
	}
	return 0
}

func (d *Device) newHandle() uintptr {
	d.handle++
	return d.handle
}

// alloc reserves bytes of device memory; ok is false when the device
// has no room.
func (d *Device) alloc(bytes uint64) (p uint64, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ctx := int64(0)
	if d.contexts > 0 {
		ctx = ContextBytes
	}
	if ctx+d.used+int64(bytes) > d.Spec.Memory {
		return 0, false
	}
	p = d.next
	d.next += (max(bytes, 1)+511)&^511 + 512 // a gap: no block touches the next
	d.sizes[p] = bytes
	i := sort.Search(len(d.bases), func(i int) bool { return d.bases[i] >= p })
	d.bases = append(d.bases, 0)
	copy(d.bases[i+1:], d.bases[i:])
	d.bases[i] = p
	d.used += int64(bytes)
	d.c.Peak = max(d.c.Peak, d.used)
	d.c.DriverAllocs++
	return p, true
}

func (d *Device) free(p uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.sizes[p]
	if !ok {
		return false
	}
	delete(d.sizes, p)
	i := sort.Search(len(d.bases), func(i int) bool { return d.bases[i] >= p })
	d.bases = append(d.bases[:i], d.bases[i+1:]...)
	d.used -= int64(n)
	d.hostSync("cuMemFree") // it waits for the device to go idle
	return true
}

// extent is the bytes from p to the end of the live block it points into,
// or 0 for an address in none. Called with mu held.
func (d *Device) extent(p uint64) float64 {
	i := sort.Search(len(d.bases), func(i int) bool { return d.bases[i] > p }) - 1
	if i < 0 {
		return 0
	}
	base := d.bases[i]
	if end := base + d.sizes[base]; p < end {
		return float64(end - p)
	}
	return 0
}

// node is one unit of captured work: a graph's node.
type node struct {
	name                               string
	bytes, flops, peakTFLOPs, efficacy float64
	copy                               bool
}

// replay records a graph's nodes as the work they are, each counted as a
// launch. Called with mu held.
func (d *Device) replay(nodes []node) {
	for _, n := range nodes {
		if n.copy {
			d.copyWork(n.name, n.bytes)
		} else {
			d.work(n.name, n.bytes, n.flops, n.peakTFLOPs, n.efficacy)
		}
	}
}

// work records one unit of work, or, while a stream captures, adds it to
// the capture. Called with mu held.
func (d *Device) work(name string, bytes, flops, peakTFLOPs, efficiency float64) {
	if d.capture != nil {
		*d.capture = append(*d.capture, node{name, bytes, flops, peakTFLOPs, efficiency, false})
		return
	}
	t := bytes / (BandwidthEfficiency * d.Spec.HBM)
	if flops > 0 && peakTFLOPs > 0 {
		t = max(t, flops/(efficiency*peakTFLOPs*1e12))
	}
	d.c.Launches++
	d.c.ByKernel[name]++
	d.c.BytesTouched += bytes
	d.c.FLOPs += flops
	d.c.DeviceSeconds += t + LaunchSeconds
	d.c.BytesByKernel[name] += bytes
	d.c.FLOPsByKernel[name] += flops
	d.c.SecondsByKernel[name] += t + LaunchSeconds
}

// clock is stream's time now. Called with mu held.
func (d *Device) clock(stream uintptr) float64 {
	if d.commStreams[stream] {
		return d.comm
	}
	return d.c.DeviceSeconds + d.c.ExposedCommSeconds
}

// waitEvent makes stream wait for an event recorded at time t: a
// collectives' stream starts its next collective no earlier; the compute
// stream idles until t, exposing the collectives it waits for. Called with
// mu held.
func (d *Device) waitEvent(stream uintptr, t float64) {
	d.waits[stream] = max(d.waits[stream], t)
	if d.commStreams[stream] {
		d.comm = max(d.comm, t)
		return
	}
	if now := d.clock(stream); t > now {
		d.c.ExposedCommSeconds += t - now
	}
}

// Collective records a collective over world ranks that moves bytes
// through each rank's link (a ring all-reduce of B bytes: 2(world-1)/world
// × B), enqueued on stream, which becomes a collectives' stream: it runs
// after what the stream was told to wait for, after the stream's previous
// collective, for bytes / BusBandwidth(world) plus the launch cost. It is
// the simulated NCCL's work; world counts the ranks the simulated device
// is one of, the others imagined alike.
func (d *Device) Collective(name string, bytes float64, world int, stream uintptr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.commStreams[stream] {
		d.commStreams[stream] = true
		d.comm = max(d.comm, d.waits[stream])
	}
	t := bytes/BusBandwidth(world) + LaunchSeconds
	d.comm += t
	d.c.Launches++
	d.c.ByKernel[name]++
	d.c.CommSeconds += t
}

// copyWork records a copy between host and device: over PCIe, not HBM.
// Called with mu held.
func (d *Device) copyWork(name string, bytes float64) {
	if d.capture != nil {
		*d.capture = append(*d.capture, node{name: name, bytes: bytes, copy: true})
		return
	}
	t := bytes/(BandwidthEfficiency*d.Spec.PCIe) + LaunchSeconds
	d.c.Launches++
	d.c.ByKernel[name]++
	d.c.DeviceSeconds += t
	d.c.SecondsByKernel[name] += t
}

// launch records a kernel launch on a grid of gridX × ... blocks: params
// is cuLaunchKernel's kernelParams, one pointer per parameter to its
// value. Each pointer argument is charged for the elements the launch
// reads and writes through it (kernels.Extent, from its scalar
// arguments), and never past the end of the allocation it points into
// (so a null pointer costs nothing). A kernel or parameter Extent does
// not know (none of fleet's: a test holds them to it) falls back to the
// allocation's end, bounded by the product of the launch's integer
// arguments that count elements.
func (d *Device) launch(f *function, gridX uint32, params uintptr) {
	var vals [64]float64
	var ptrs [64]uint64
	var bytes float64
	count := 1.0
	ints := false
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, p := range f.params {
		slot := *(*uintptr)(ptr(params + uintptr(i)*unsafe.Sizeof(uintptr(0))))
		raw := *(*uint64)(ptr(slot))
		if p.Elem != "" {
			if i < len(ptrs) {
				ptrs[i] = raw
			}
			continue
		}
		if i >= len(vals) {
			continue
		}
		switch p.Type {
		case "int":
			vals[i] = float64(int32(uint32(raw)))
		case "unsigned int":
			vals[i] = float64(uint32(raw))
		case "long long":
			vals[i] = float64(int64(raw))
		case "unsigned long long":
			vals[i] = float64(raw)
		case "float":
			vals[i] = float64(math.Float32frombits(uint32(raw)))
		case "double":
			vals[i] = math.Float64frombits(raw)
		}
		if p.Type != "float" && p.Type != "double" && !notExtents[p.Name] {
			count *= max(vals[i], 1)
			ints = true
		}
	}
	arg := func(name string) float64 {
		if name == "gridDim.x" {
			return float64(gridX)
		}
		if i, ok := f.index[name]; ok && i < len(vals) {
			if f.params[i].Elem != "" && ptrs[i] != 0 {
				return 1 // a pointer: 1 where given, 0 where null
			}
			return vals[i]
		}
		return 0
	}
	for i, p := range f.params {
		if p.Elem == "" || i >= len(ptrs) {
			continue
		}
		b := d.extent(ptrs[i])
		if n, passes, ok := kernels.Extent(f.name, p.Name, arg); ok {
			b = passes * min(b, n*elemSize[p.Elem])
		} else if ints {
			b = min(b, count*elemSize[p.Elem])
		}
		bytes += b
	}
	flops := kernels.FLOPs(f.name, arg)
	if f.tensorCore {
		d.work(f.name, bytes, flops, d.Spec.BF16, MMAEfficiency)
		return
	}
	d.work(f.name, bytes, flops, d.Spec.FP32, CUDACoreEfficiency)
}

// notExtents are the integer kernel parameters that count no elements (an
// operation's code, a step number, a position): launch leaves them out of
// the product that bounds each pointer's extent.
var notExtents = map[string]bool{"op": true, "step": true, "seed": true, "offset": true, "site": true, "threshold": true, "Pos": true, "chunkRows": true, "decayEnd": true}

// elemSize is the size of a kernel pointer parameter's elements, by type.
var elemSize = map[string]float64{"float": 4, "unsigned short": 2, "int": 4, "unsigned int": 4, "long long": 8, "unsigned char": 1, "void": 1}

// cstring keeps a NUL-terminated copy of s alive and returns its address.
// Called with mu held.
func (d *Device) cstring(s string) uintptr {
	b := append([]byte(s), 0)
	d.strings = append(d.strings, b)
	return uintptr(unsafe.Pointer(&b[0]))
}

// ptr turns an address a C caller passed into a pointer (through memory,
// so that vet's unsafeptr check, which guards Go memory, accepts it: the
// address is the caller's, which keeps what it points to alive).
func ptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// goString reads a NUL-terminated string at p.
func goString(p uintptr) string {
	if p == 0 {
		return ""
	}
	n := 0
	for *(*byte)(ptr(p + uintptr(n))) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(ptr(p)), n))
}

// FailNextWait makes the next stream, event or context synchronisation
// return the driver error code (700 is CUDA_ERROR_ILLEGAL_ADDRESS), as a
// real device reports a kernel's failure at the host's next wait: tests
// check what the backend makes of it.
func (d *Device) FailNextWait(code int) {
	d.mu.Lock()
	d.failWait = uintptr(code)
	d.mu.Unlock()
}

// hostSync records a call that made the host wait. Called with mu held.
func (d *Device) hostSync(call string) {
	d.c.HostSyncs++
	d.c.SyncsBy[call]++
}
