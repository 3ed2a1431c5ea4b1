package train

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/monitor/diagnose"
)

// readEventTags decodes TensorBoard event files (record framing with
// masked CRC32C, then just enough protobuf: Event.summary.value.tag and
// whether the value is a scalar) and counts the scalar and text values
// per tag. Its own decoder, independent of the writer.
func readEventTags(t *testing.T, dir string) (scalars, texts map[string]int) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	if len(files) != 1 {
		t.Fatalf("%d event files in %s, want 1", len(files), dir)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	mask := func(c uint32) uint32 { return (c>>15 | c<<17) + 0xa282ead8 }
	scalars, texts = map[string]int{}, map[string]int{}
	// fields walks a protobuf message, calling f for each field.
	var fields func(m []byte, f func(num int, wire int, v uint64, sub []byte))
	fields = func(m []byte, f func(int, int, uint64, []byte)) {
		for len(m) > 0 {
			key, n := binary.Uvarint(m)
			if n <= 0 {
				t.Fatal("bad protobuf key")
			}
			m = m[n:]
			num, wire := int(key>>3), int(key&7)
			switch wire {
			case 0:
				v, n := binary.Uvarint(m)
				m = m[n:]
				f(num, wire, v, nil)
			case 1:
				f(num, wire, binary.LittleEndian.Uint64(m), nil)
				m = m[8:]
			case 5:
				f(num, wire, uint64(binary.LittleEndian.Uint32(m)), nil)
				m = m[4:]
			case 2:
				l, n := binary.Uvarint(m)
				m = m[n:]
				f(num, wire, 0, m[:l])
				m = m[l:]
			default:
				t.Fatalf("wire type %d", wire)
			}
		}
	}
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatal("truncated record header")
		}
		n := binary.LittleEndian.Uint64(b)
		if mask(crc32.Checksum(b[:8], tab)) != binary.LittleEndian.Uint32(b[8:]) {
			t.Fatal("bad length CRC")
		}
		data := b[12 : 12+n]
		if mask(crc32.Checksum(data, tab)) != binary.LittleEndian.Uint32(b[12+n:]) {
			t.Fatal("bad data CRC")
		}
		b = b[16+n:]
		fields(data, func(num, wire int, _ uint64, sub []byte) {
			if num != 5 || wire != 2 { // Event.summary
				return
			}
			fields(sub, func(num, wire int, _ uint64, val []byte) {
				if num != 1 || wire != 2 { // Summary.value
					return
				}
				var tag string
				scalar, text := false, false
				fields(val, func(num, wire int, _ uint64, s []byte) {
					switch {
					case num == 1:
						tag = string(s)
					case num == 2 && wire == 5:
						scalar = true
					case num == 8:
						text = true
					}
				})
				if scalar {
					scalars[tag]++
				}
				if text {
					texts[tag]++
				}
			})
		})
	}
	return scalars, texts
}

// TestTensorBoardAndDiagnosis: a CPU run with --tensorboard writes event
// files that decode with at least 5 scalar tags and text samples, writes
// telemetry.json, and prints a diagnosis that calls it compute-bound
// (or crowded out by other processes, on a busy machine).
func TestTensorBoardAndDiagnosis(t *testing.T) {
	c := tinyConfig(t)
	// The reference model: a step long enough that logging is a small part
	// (in -short mode, e.g. under emulation, the tiny one, and no verdict).
	if !testing.Short() {
		c.NLayer, c.NHead, c.NEmbd, c.BlockSize, c.BatchSize = 4, 4, 128, 64, 12
	}
	c.MaxIters, c.LogInterval, c.EvalInterval = 40, 5, 20
	c.TensorBoard = filepath.Join(t.TempDir(), "tb")
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	scalars, texts := readEventTags(t, c.TensorBoard)
	t.Logf("scalar tags: %v; text tags: %v", scalars, texts)
	if len(scalars) < 5 {
		t.Errorf("%d scalar tags, want at least 5", len(scalars))
	}
	for _, tag := range []string{"train_loss", "val_loss", "val_perplexity", "lr", "tokens_per_sec", "mfu", "grad_norm", "mem_bytes"} {
		if scalars[tag] == 0 {
			t.Errorf("no %s scalars", tag)
		}
	}
	if scalars["lr"] != 8 || texts["samples"] != 3 {
		t.Errorf("%d lr scalars (want 8, one per log line) and %d samples (want 3, one per evaluation)", scalars["lr"], texts["samples"])
	}
	tel, err := diagnose.ReadFile(filepath.Join(c.Out, diagnose.TelemetryFile))
	if err != nil {
		t.Fatal(err)
	}
	// Healthy: compute-bound, or, where other processes (other test
	// binaries) crowd the cores, that; never the data or the batch.
	d := diagnose.Diagnose(tel)
	if testing.Short() {
		if !strings.Contains(log.String(), "bottleneck") {
			t.Errorf("the run printed no diagnosis:\n%s", log.String())
		}
	} else if !strings.Contains(log.String(), "bottleneck") ||
		(d.Main.Kind != diagnose.Compute && d.Main.Kind != diagnose.Shared) ||
		(d.Main.Kind == diagnose.Compute && !strings.Contains(log.String(), "compute-bound")) {
		t.Errorf("the healthy run's diagnosis is %q:\n%s", d.Main.Kind, log.String())
	}
	if tel.Steps != 35 || tel.PhaseMs.Forward <= 0 || tel.PhaseMs.Backward <= 0 || tel.PhaseMs.Optimizer <= 0 || tel.TokensPerSec <= 0 || tel.MFU <= 0 {
		t.Errorf("telemetry.json lacks measurements: %+v", tel)
	}
}

// TestDiagnosisNamesStarvedLoader: with every batch fetch slowed, the
// diagnosis names data loading as the bottleneck.
func TestDiagnosisNamesStarvedLoader(t *testing.T) {
	slowData = 20 * time.Millisecond
	defer func() { slowData = 0 }()
	c := tinyConfig(t)
	c.MaxIters, c.LogInterval, c.EvalInterval = 15, 5, 100
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	tel, err := diagnose.ReadFile(filepath.Join(c.Out, diagnose.TelemetryFile))
	if err != nil {
		t.Fatal(err)
	}
	d := diagnose.Diagnose(tel)
	var out bytes.Buffer
	diagnose.Format(&out, d)
	t.Log(out.String())
	if tel.PhaseMs.DataWait < 15 {
		t.Errorf("data wait %.1f ms per step with a 20 ms delay per batch", tel.PhaseMs.DataWait)
	}
	if !strings.Contains(log.String(), out.String()) || !strings.Contains(strings.ToLower(out.String()), "data") || !strings.Contains(out.String(), "--data-workers") {
		t.Errorf("the run's diagnosis does not name data starvation:\n%s", log.String())
	}
}
