package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// LabFile is the name of the lab's results in a run's folder.
const LabFile = "lab.json"

// Lab is the part of lab.json (written by `fleet bench lab`) that the
// report reads: the batch-size sweep and the dataparallel and recap
// experiments.
// Other fields of the file are ignored. The JSON names are those the lab
// writes.
type Lab struct {
	Device     string `json:"device"`
	DeviceName string `json:"device_name,omitempty"`
	Sweep      Sweep  `json:"batch_sweep"`
	// DataParallel and Recap are those experiments, where they ran.
	DataParallel *DataParallel `json:"dataparallel,omitempty"`
	Recap        *Recap        `json:"recap,omitempty"`
}

// Sweep is training steps timed at a range of micro-batch sizes.
type Sweep struct {
	// UtilSource says how utilisation was measured.
	UtilSource string       `json:"utilisation_source,omitempty"`
	Points     []SweepPoint `json:"points"`
	Stop       string       `json:"stop,omitempty"`    // why the sweep ended
	Summary    string       `json:"summary,omitempty"` // its conclusion, in words
	// Chosen is the batch --batch-size auto takes (0: none).
	Chosen int `json:"chosen,omitempty"`
}

// SweepPoint is one batch size of the sweep. Zero means not measured.
type SweepPoint struct {
	Batch        int     `json:"batch"`
	TokensPerSec float64 `json:"tokens_per_s"`
	StepMs       float64 `json:"step_ms,omitempty"`
	GFLOPs       float64 `json:"gflops,omitempty"`
	// Util is the device's busy fraction, 0 to 1 (on a CPU: process CPU
	// time over wall time and threads); negative where not measured.
	Util      float64 `json:"utilisation"`
	MFU       float64 `json:"mfu,omitempty"`
	PeakBytes int64   `json:"peak_bytes,omitempty"`
}

// ReadLab reads lab.json: the sweep, the dataparallel and the recap
// experiments, any of them (a lab run with --only leaves some out). It
// accepts the sweep as Lab's batch_sweep
// object, or as an array under batch_sweep or sweep, and within a point
// the batch as batch, batch_size or micro_batch, tokens/s under the usual
// names, utilisation as a fraction (utilisation, util) or a percentage
// (util_pct): so a lab that names its fields a little differently still
// plots.
func ReadLab(path string) (Lab, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Lab{}, err
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return Lab{}, fmt.Errorf("%s: damaged: %w", path, err)
	}
	var lab Lab
	lab.Device, _ = raw["device"].(string)
	lab.DeviceName, _ = raw["device_name"].(string)
	var pts []any
	for _, key := range []string{"batch_sweep", "sweep"} {
		switch v := raw[key].(type) {
		case []any:
			pts = v
		case map[string]any:
			lab.Sweep.Chosen = int(num(v, "chosen", "auto", "auto_batch"))
			lab.Sweep.UtilSource, _ = v["utilisation_source"].(string)
			lab.Sweep.Stop, _ = v["stop"].(string)
			lab.Sweep.Summary, _ = v["summary"].(string)
			pts = pointsOf(v)
		}
		if pts != nil {
			break
		}
	}
	if v, ok := raw["dataparallel"].(map[string]any); ok {
		b, _ := json.Marshal(v)
		var d DataParallel
		if err := json.Unmarshal(b, &d); err != nil {
			return lab, fmt.Errorf("%s: dataparallel: %w", path, err)
		}
		lab.DataParallel = &d
	}
	if v, ok := raw["recap"].(map[string]any); ok {
		b, _ := json.Marshal(v)
		var r Recap
		if err := json.Unmarshal(b, &r); err != nil {
			return lab, fmt.Errorf("%s: recap: %w", path, err)
		}
		lab.Recap = &r
	}
	if pts == nil {
		if lab.DataParallel != nil || lab.Recap != nil {
			return lab, nil // a lab run without the sweep (--only)
		}
		return lab, fmt.Errorf("%s: no batch sweep (batch_sweep or sweep), no dataparallel and no recap experiment", path)
	}
	for _, p := range pts {
		m, ok := p.(map[string]any)
		if !ok {
			return lab, errors.New(path + ": a sweep point is not an object")
		}
		sp := SweepPoint{
			Batch:        int(num(m, "batch", "batch_size", "micro_batch")),
			TokensPerSec: num(m, "tokens_per_s", "tokens_per_sec", "tok_per_sec", "tokens_s"),
			StepMs:       num(m, "step_ms", "ms_per_step"),
			GFLOPs:       num(m, "gflops"),
			Util:         num(m, "utilisation", "utilization", "util"),
			MFU:          num(m, "mfu"),
			PeakBytes:    int64(num(m, "peak_bytes", "mem_bytes", "mem_peak_bytes")),
		}
		if pct := num(m, "util_pct", "util_mean_pct"); pct != 0 && sp.Util == 0 {
			sp.Util = pct / 100
		}
		if sp.Batch <= 0 {
			continue // an entry without a batch (a note, an error)
		}
		lab.Sweep.Points = append(lab.Sweep.Points, sp)
	}
	sort.SliceStable(lab.Sweep.Points, func(i, j int) bool { return lab.Sweep.Points[i].Batch < lab.Sweep.Points[j].Batch })
	return lab, nil
}

// pointsOf finds the array of point objects in a sweep object: "points"
// if there is one, else its first array of objects (in key order).
func pointsOf(m map[string]any) []any {
	if v, ok := m["points"].([]any); ok {
		return v
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := m[k].([]any); ok && len(v) > 0 {
			if _, obj := v[0].(map[string]any); obj {
				return v
			}
		}
	}
	return nil
}

// num is the first of keys in m that holds a number (0 if none).
func num(m map[string]any, keys ...string) float64 {
	for _, k := range keys {
		if v, ok := m[k].(float64); ok {
			return v
		}
	}
	// Case and separators aside ("TokensPerSec").
	for _, k := range keys {
		want := strings.ReplaceAll(k, "_", "")
		for mk, v := range m {
			if f, ok := v.(float64); ok && strings.EqualFold(strings.ReplaceAll(mk, "_", ""), want) {
				return f
			}
		}
	}
	return 0
}
