package tfevents

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The decoder below is the test's own: it shares nothing with the writer
// but the CRC32C polynomial from hash/crc32.

func testMask(c uint32) uint32 { return (c>>15 | c<<17) + 0xa282ead8 }

func testCRC(b []byte) uint32 {
	return testMask(crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// readRecords splits an event file into its records' data, checking both
// CRCs of each.
func readRecords(t *testing.T, raw []byte) ([][]byte, error) {
	t.Helper()
	var out [][]byte
	for off := 0; off < len(raw); {
		if len(raw)-off < 12 {
			return out, fmt.Errorf("truncated header at %d", off)
		}
		hdr := raw[off : off+8]
		n := binary.LittleEndian.Uint64(hdr)
		if got, want := binary.LittleEndian.Uint32(raw[off+8:]), testCRC(hdr); got != want {
			return out, fmt.Errorf("record at %d: length crc %08x, want %08x", off, got, want)
		}
		if n > uint64(len(raw)-off-16) {
			return out, fmt.Errorf("record at %d: length %d past end of file", off, n)
		}
		data := raw[off+12 : off+12+int(n)]
		if got, want := binary.LittleEndian.Uint32(raw[off+12+int(n):]), testCRC(data); got != want {
			return out, fmt.Errorf("record at %d: data crc %08x, want %08x", off, got, want)
		}
		out = append(out, data)
		off += 16 + int(n)
	}
	return out, nil
}

// pbField is one decoded protobuf field.
type pbField struct {
	num  int
	wire int
	u    uint64 // varint, fixed32, fixed64
	b    []byte // length-delimited
}

func uvarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("bad varint")
}

func parseMsg(b []byte) ([]pbField, error) {
	var fs []pbField
	for len(b) > 0 {
		key, n, err := uvarint(b)
		if err != nil {
			return nil, err
		}
		b = b[n:]
		f := pbField{num: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			f.u, n, err = uvarint(b)
			if err != nil {
				return nil, err
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return nil, fmt.Errorf("short fixed64")
			}
			f.u = binary.LittleEndian.Uint64(b)
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return nil, fmt.Errorf("short fixed32")
			}
			f.u = uint64(binary.LittleEndian.Uint32(b))
			b = b[4:]
		case 2:
			l, n, err := uvarint(b)
			if err != nil {
				return nil, err
			}
			b = b[n:]
			if l > uint64(len(b)) {
				return nil, fmt.Errorf("field %d: length %d past end", f.num, l)
			}
			f.b = b[:l]
			b = b[l:]
		default:
			return nil, fmt.Errorf("unexpected wire type %d", f.wire)
		}
		if f.num == 0 {
			return nil, fmt.Errorf("field number 0")
		}
		fs = append(fs, f)
	}
	return fs, nil
}

// decoded event, with the parts this package writes.
type event struct {
	wall        float64
	step        int64
	fileVersion string
	hasSummary  bool
	tag         string
	hasSimple   bool
	simple      float32
	plugin      string
	dataClass   uint64
	dtype       uint64
	hasShape    bool
	rank        int
	strings     [][]byte
}

func decodeEvent(t *testing.T, data []byte) event {
	t.Helper()
	fs, err := parseMsg(data)
	if err != nil {
		t.Fatalf("event: %v", err)
	}
	var e event
	for _, f := range fs {
		switch {
		case f.num == 1 && f.wire == 1:
			e.wall = math.Float64frombits(f.u)
		case f.num == 2 && f.wire == 0:
			e.step = int64(f.u)
		case f.num == 3 && f.wire == 2:
			e.fileVersion = string(f.b)
		case f.num == 5 && f.wire == 2:
			e.hasSummary = true
			decodeSummary(t, f.b, &e)
		default:
			t.Fatalf("unexpected Event field %d (wire %d)", f.num, f.wire)
		}
	}
	return e
}

func decodeSummary(t *testing.T, b []byte, e *event) {
	fs, err := parseMsg(b)
	if err != nil {
		t.Fatalf("summary: %v", err)
	}
	if len(fs) != 1 || fs[0].num != 1 || fs[0].wire != 2 {
		t.Fatalf("summary: want one value, got %+v", fs)
	}
	vs, err := parseMsg(fs[0].b)
	if err != nil {
		t.Fatalf("value: %v", err)
	}
	for _, f := range vs {
		switch {
		case f.num == 1 && f.wire == 2:
			e.tag = string(f.b)
		case f.num == 2 && f.wire == 5:
			e.hasSimple = true
			e.simple = math.Float32frombits(uint32(f.u))
		case f.num == 8 && f.wire == 2:
			ts, err := parseMsg(f.b)
			if err != nil {
				t.Fatalf("tensor: %v", err)
			}
			for _, g := range ts {
				switch {
				case g.num == 1 && g.wire == 0:
					e.dtype = g.u
				case g.num == 2 && g.wire == 2:
					e.hasShape = true
					dims, err := parseMsg(g.b)
					if err != nil {
						t.Fatalf("shape: %v", err)
					}
					e.rank = len(dims)
				case g.num == 8 && g.wire == 2:
					e.strings = append(e.strings, g.b)
				default:
					t.Fatalf("unexpected TensorProto field %d", g.num)
				}
			}
		case f.num == 9 && f.wire == 2:
			ms, err := parseMsg(f.b)
			if err != nil {
				t.Fatalf("metadata: %v", err)
			}
			for _, g := range ms {
				switch {
				case g.num == 1 && g.wire == 2:
					ps, err := parseMsg(g.b)
					if err != nil {
						t.Fatalf("plugin data: %v", err)
					}
					for _, p := range ps {
						if p.num == 1 && p.wire == 2 {
							e.plugin = string(p.b)
						}
					}
				case g.num == 4 && g.wire == 0:
					e.dataClass = g.u
				default:
					t.Fatalf("unexpected SummaryMetadata field %d", g.num)
				}
			}
		default:
			t.Fatalf("unexpected Value field %d (wire %d)", f.num, f.wire)
		}
	}
}

type written struct {
	text  bool
	tag   string
	step  int64
	v     float64
	s     string
	wall  time.Time
	wallS float64
}

func randText(r *rand.Rand) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz ABC*_#\n|éλ中"
	rs := []rune(alphabet)
	n := r.IntN(400)
	if r.IntN(10) == 0 {
		n = 200 + r.IntN(3000) // lengths that need 2-byte varints
	}
	var sb strings.Builder
	for range n {
		sb.WriteRune(rs[r.IntN(len(rs))])
	}
	return sb.String()
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 7))
	dir := filepath.Join(t.TempDir(), "runs", "x") // created by NewWriter
	w, err := NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(w.Path())
	host, _ := os.Hostname()
	re := regexp.MustCompile(`^events\.out\.tfevents\.(\d+)\.(.+)\.(\d+)\.(\d+)$`)
	m := re.FindStringSubmatch(name)
	if m == nil {
		t.Fatalf("file name %q", name)
	}
	if sec, _ := strconv.ParseInt(m[1], 10, 64); math.Abs(float64(sec-time.Now().Unix())) > 60 {
		t.Errorf("file name time %s, now %d", m[1], time.Now().Unix())
	}
	if host != "" && !strings.Contains(host, "/") && m[2] != host {
		t.Errorf("file name host %q, want %q", m[2], host)
	}
	if m[3] != strconv.Itoa(os.Getpid()) {
		t.Errorf("file name pid %s, want %d", m[3], os.Getpid())
	}

	tags := []string{"train/loss", "val/loss", "lr", "throughput/tokens_per_s", "grad_norm", "λ/ü"}
	var want []written
	base := time.Unix(1_700_000_000+r.Int64N(100_000_000), 0)
	step := r.Int64N(1000)
	for i := range 600 {
		step += 1 + r.Int64N(3)
		if i == 7 {
			step = 0 // a zero step is left out of the encoding
		}
		if i == 11 {
			step = -1 - r.Int64N(1<<40)
		}
		wall := base.Add(time.Duration(r.Int64N(int64(1000 * time.Hour))))
		var x written
		if r.IntN(8) == 0 {
			x = written{text: true, tag: "samples/" + tags[r.IntN(len(tags))], step: step, s: randText(r), wall: wall}
			err = w.Text(x.tag, x.step, x.s, x.wall)
		} else {
			v := r.NormFloat64() * math.Pow(10, float64(r.IntN(12)-6))
			x = written{tag: tags[r.IntN(len(tags))], step: step, v: v, wall: wall}
			err = w.Scalar(x.tag, x.step, x.v, x.wall)
		}
		if err != nil {
			t.Fatal(err)
		}
		x.wallS = float64(wall.UnixNano()) / 1e9
		want = append(want, x)
	}
	// The zero time means now.
	before := time.Now()
	if err := w.Scalar("now", 3, 1.5, time.Time{}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Scalar("late", 1, 1, time.Time{}); err == nil {
		t.Error("Scalar after Close succeeded")
	}

	raw, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := readRecords(t, raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(want)+2 {
		t.Fatalf("%d records, want %d", len(recs), len(want)+2)
	}
	first := decodeEvent(t, recs[0])
	if first.fileVersion != "brain.Event:2" || first.hasSummary {
		t.Errorf("first event %+v", first)
	}
	if math.Abs(first.wall-float64(time.Now().Unix())) > 60 {
		t.Errorf("first event wall time %f", first.wall)
	}
	for i, x := range want {
		e := decodeEvent(t, recs[i+1])
		if e.fileVersion != "" || !e.hasSummary {
			t.Fatalf("record %d: %+v", i+1, e)
		}
		if e.tag != x.tag || e.step != x.step || e.wall != x.wallS {
			t.Fatalf("record %d: tag %q step %d wall %f, want %q %d %f", i+1, e.tag, e.step, e.wall, x.tag, x.step, x.wallS)
		}
		if math.Abs(e.wall-float64(x.wall.Unix())) > 1e-6*math.Abs(e.wall) {
			t.Fatalf("record %d: wall %f, want about %d", i+1, e.wall, x.wall.Unix())
		}
		if x.text {
			if e.hasSimple || e.plugin != "text" || e.dataClass != 2 || e.dtype != 7 || !e.hasShape || e.rank != 0 {
				t.Fatalf("record %d: text event %+v", i+1, e)
			}
			if len(e.strings) != 1 || string(e.strings[0]) != x.s {
				t.Fatalf("record %d: text %q, want %q", i+1, e.strings, x.s)
			}
		} else {
			if !e.hasSimple || e.plugin != "" || e.hasShape || e.strings != nil {
				t.Fatalf("record %d: scalar event %+v", i+1, e)
			}
			if e.simple != float32(x.v) {
				t.Fatalf("record %d: value %g, want %g", i+1, e.simple, float32(x.v))
			}
		}
	}
	last := decodeEvent(t, recs[len(recs)-1])
	lo, hi := float64(before.UnixNano())/1e9, float64(after.UnixNano())/1e9
	if last.tag != "now" || last.simple != 1.5 || last.step != 3 || last.wall < lo-1e-6 || last.wall > hi+1e-6 {
		t.Errorf("zero-time event %+v, want wall in [%f, %f]", last, lo, hi)
	}

	// Every single corrupted byte is caught by one of the CRCs (or breaks
	// the framing).
	for range 200 {
		bad := bytes.Clone(raw)
		i := r.IntN(len(bad))
		bad[i] ^= byte(1 + r.IntN(255))
		if _, err := readRecords(t, bad); err == nil {
			t.Fatalf("corrupting byte %d went unnoticed", i)
		}
	}
}

func TestDistinctFiles(t *testing.T) {
	dir := t.TempDir()
	seen := map[string]bool{}
	for range 5 {
		w, err := NewWriter(dir)
		if err != nil {
			t.Fatal(err)
		}
		if seen[w.Path()] {
			t.Fatalf("file %s reused", w.Path())
		}
		seen[w.Path()] = true
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 5 {
		t.Errorf("%d files, want 5", len(ents))
	}
}

func TestFlush(t *testing.T) {
	w, err := NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	v := rand.Float64()
	if err := w.Scalar("a", 5, v, time.Now()); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(w.Path())
	recs, err := readRecords(t, raw)
	if err != nil || len(recs) != 1 {
		t.Fatalf("before Flush: %d records (%v), want only the version", len(recs), err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(w.Path())
	recs, err = readRecords(t, raw)
	if err != nil || len(recs) != 2 {
		t.Fatalf("after Flush: %d records (%v)", len(recs), err)
	}
	if e := decodeEvent(t, recs[1]); e.simple != float32(v) || e.step != 5 {
		t.Errorf("flushed event %+v", e)
	}
}

func TestErrors(t *testing.T) {
	if _, err := NewWriter(""); err == nil {
		t.Error("NewWriter(\"\") succeeded")
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewWriter(filepath.Join(file, "sub")); err == nil {
		t.Error("NewWriter under a file succeeded")
	}
	w, err := NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Scalar("bad\xff", 1, 1, time.Time{}); err == nil {
		t.Error("invalid UTF-8 tag accepted")
	}
	// A write failure is returned and sticks.
	w.f.Close()
	big := strings.Repeat("x", bufferSize)
	if err := w.Text("t", 1, big, time.Time{}); err == nil {
		t.Error("write to a closed file succeeded")
	}
	if err := w.Scalar("a", 1, 1, time.Time{}); err == nil {
		t.Error("error did not stick")
	}
	if err := w.Close(); err == nil {
		t.Error("Close after a failed write returned nil")
	}
}

func TestScalarAllocs(t *testing.T) {
	w, err := NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := time.Now()
	step := int64(0)
	allocs := testing.AllocsPerRun(2000, func() {
		step++
		if err := w.Scalar("train/loss", step, 2.5, now); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Scalar: %v allocations per call, want 0", allocs)
	}
	allocs = testing.AllocsPerRun(200, func() {
		step++
		if err := w.Text("sample", step, "some *markdown* text", now); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Text: %v allocations per call, want 0", allocs)
	}
}

func BenchmarkScalar(b *testing.B) {
	w, err := NewWriter(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := w.Scalar("train/loss", int64(i), 2.5, now); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSample writes a small event file into $TFEVENTS_SAMPLE_DIR when it is
// set, for checking with TensorBoard's own reader (scripts/tb_check.py):
// 100 steps of train/loss and lr, and 3 text summaries under samples.
func TestSample(t *testing.T) {
	dir := os.Getenv("TFEVENTS_SAMPLE_DIR")
	if dir == "" {
		t.Skip("TFEVENTS_SAMPLE_DIR not set")
	}
	w, err := NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for step := range int64(100) {
		wall := start.Add(time.Duration(step) * time.Second)
		if err := w.Scalar("train/loss", step, 4*math.Exp(-float64(step)/30)+0.1*rand.Float64(), wall); err != nil {
			t.Fatal(err)
		}
		if err := w.Scalar("lr", step, 6e-4*float64(step+1)/100, wall); err != nil {
			t.Fatal(err)
		}
		if step%40 == 0 {
			if err := w.Text("samples", step, fmt.Sprintf("step **%d**: `func main() {`", step), wall); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", w.Path())
}
