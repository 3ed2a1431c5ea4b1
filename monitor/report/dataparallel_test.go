package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataParallelPage: a lab.json with the dataparallel experiment and
// no batch sweep (fleet bench lab --only dataparallel) is read, and the
// page draws the step times as bars and each mode's timeline, a span per
// segment on its device's row.
func TestDataParallelPage(t *testing.T) {
	dir := t.TempDir()
	d := DataParallel{Devices: []string{"cpu", "cpu:1"}, Batch: 8, BlockSize: 16, Params: 1000, Measured: true, Method: "a <b>test</b>",
		Conclusion: []string{"DDP beats DataParallel here"},
		Modes: []DPMode{
			{Name: "one device", StepMs: 10, Efficiency: 1, Timeline: []Segment{{0, "fwd+bwd", 0, 8}, {0, "update", 8, 10}}},
			{Name: "DataParallel", StepMs: 9, Efficiency: 0.55, Timeline: []Segment{{1, "broadcast", 0, 1}, {0, "fwd+bwd", 1, 5}, {1, "fwd+bwd", 1, 5},
				{1, "sum", 5, 6}, {0, "update", 6, 9}}},
			{Name: "DDP", StepMs: 6, Efficiency: 0.83, Timeline: []Segment{{0, "backward", 0, 5}, {0, "all-reduce", 4, 5}, {1, "backward", 0, 5}}},
		}}
	writeJSON(t, filepath.Join(dir, LabFile), map[string]any{"device": "cpu", "batch_sweep": map[string]any{"points": nil}, "dataparallel": d})
	r, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 0 || r.Lab == nil || r.Lab.DataParallel == nil || len(r.Lab.DataParallel.Modes) != 3 {
		t.Fatalf("problems %v, lab %+v", r.Problems, r.Lab)
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, want := range []string{"DataParallel against DDP", "a &lt;b&gt;test&lt;/b&gt;", "DDP beats DataParallel here",
		`data-title="Step time on 2 devices, measured (label: ms · efficiency)"`, `data-title="DataParallel: one step"`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(html, "Batch-size sweep") {
		t.Error("the page has a sweep section without a sweep")
	}
	if n := strings.Count(html, `class="bar"`); n != 3 {
		t.Errorf("%d bars, want 3", n)
	}
	if n := strings.Count(html, `class="span"`); n != 2+5+3 {
		t.Errorf("%d timeline spans, want 10", n)
	}
	// Neither a sweep nor the experiment: an error naming both.
	os.WriteFile(filepath.Join(dir, LabFile), []byte(`{"device":"cpu"}`), 0o644)
	if _, err := ReadLab(filepath.Join(dir, LabFile)); err == nil || !strings.Contains(err.Error(), "dataparallel") {
		t.Errorf("empty lab.json: %v", err)
	}
}
