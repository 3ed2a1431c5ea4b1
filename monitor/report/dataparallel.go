package report

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"
)

// DataParallel is the lab's dataparallel experiment (lab.json's
// "dataparallel"): one device against DataParallel and DDP on the same
// devices, with the same model, data and global batch.
type DataParallel struct {
	Devices   []string `json:"devices"`
	Batch     int      `json:"global_batch"` // rows per optimizer step, shared by the devices
	BlockSize int      `json:"block_size"`
	Params    int      `json:"params"`
	// Measured is true where each mode was a timed training run, false
	// where its step was predicted by a simulated GPU's cost model.
	Measured bool     `json:"measured"`
	Method   string   `json:"method"`
	Modes    []DPMode `json:"modes"`
	// BytesMethod says how each mode's bytes through the first device
	// are computed.
	BytesMethod string `json:"bytes_method"`
	// Conclusion is the lecture's claims, each with what the figures say
	// about it.
	Conclusion []string `json:"conclusion"`
}

// DPMode is one way of running the step: one device, DataParallel or DDP.
type DPMode struct {
	Name    string  `json:"name"`
	Command string  `json:"command,omitempty"`
	StepMs  float64 `json:"step_ms"`
	// TokensPerSec is the job's: every device's tokens together.
	TokensPerSec float64 `json:"tokens_per_s"`
	// Efficiency is the scaling efficiency against one device: one
	// device's step time over N times this mode's (1: N devices give N
	// times one device's tokens/s; one device's own is 1).
	Efficiency float64 `json:"efficiency"`
	// FirstDeviceBytes is the bytes through the first device per step
	// (DataParallel.BytesMethod); CountedBytes, where the trainer counted
	// them itself, its count.
	FirstDeviceBytes float64 `json:"first_device_bytes_per_step"`
	CountedBytes     float64 `json:"counted_first_device_bytes_per_step,omitempty"`
	// Timeline is one step on each device (Device indexes Devices), ms
	// from the step's start; TimelineNote says what it is made of.
	Timeline     []Segment `json:"timeline"`
	TimelineNote string    `json:"timeline_note"`
}

// Segment is one span of a device's work in a step.
type Segment struct {
	Device  int     `json:"device"`
	Kind    string  `json:"kind"`
	StartMs float64 `json:"start_ms"`
	EndMs   float64 `json:"end_ms"`
}

// dataParallelPlots draws the experiment: each mode's step time and
// efficiency as bars, then each mode's timeline on one time scale.
func dataParallelPlots(d *DataParallel) []template.HTML {
	if d == nil || len(d.Modes) == 0 {
		return nil
	}
	var labels []string
	var ms []float64
	var notes []string
	for _, m := range d.Modes {
		labels = append(labels, m.Name)
		ms = append(ms, m.StepMs)
		notes = append(notes, fmt.Sprintf("%.3g ms · %.0f%%", m.StepMs, 100*m.Efficiency))
	}
	what := "measured"
	if !d.Measured {
		what = "predicted"
	}
	out := []template.HTML{BarPlot(fmt.Sprintf("Step time on %d devices, %s (label: ms · efficiency)", len(d.Devices), what), "ms per step", labels, ms, notes)}
	span := 0.0
	for _, m := range d.Modes {
		for _, s := range m.Timeline {
			span = max(span, s.EndMs)
		}
	}
	for _, m := range d.Modes {
		out = append(out, Timeline(m.Name+": one step", d.Devices, m.Timeline, span))
	}
	return out
}

// BarPlot draws one bar per label, with its note above it, as inline SVG.
func BarPlot(title, ylabel string, labels []string, values []float64, notes []string) template.HTML {
	top := 0.0
	for _, v := range values {
		if finite(v) {
			top = math.Max(top, v)
		}
	}
	if top <= 0 {
		return NoData(title)
	}
	yt := ticks(0, top, 5)
	y1 := yt[len(yt)-1]
	iw, ih := float64(plotW-padL-padR), float64(plotH-padTop-padBotom)
	sy := func(y float64) float64 { return padTop + ih - y/y1*ih }
	var b strings.Builder
	esc := template.HTMLEscapeString
	fmt.Fprintf(&b, `<figure class="plot"><svg class="plot" data-title="%s" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="%s">`,
		esc(title), plotW, plotH, plotW, plotH, esc(title))
	fmt.Fprintf(&b, `<text class="title" x="%d" y="18">%s</text>`, padL, esc(title))
	for _, v := range yt {
		y := sy(v)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%.1f" x2="%.1f" y2="%.1f"/>`, padL, y, padL+iw, y)
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, esc(tickLabel(v, yt)))
	}
	fmt.Fprintf(&b, `<rect class="frame" x="%d" y="%d" width="%.0f" height="%.0f"/>`, padL, padTop, iw, ih)
	fmt.Fprintf(&b, `<text class="label" transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>`, padTop+ih/2, esc(ylabel))
	slot := iw / float64(len(labels))
	for i, l := range labels {
		x := padL + slot*float64(i) + slot*0.2
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x+slot*0.3, padTop+ih+16, esc(l))
		if i >= len(values) || !finite(values[i]) || values[i] < 0 {
			continue
		}
		y := sy(values[i])
		fmt.Fprintf(&b, `<rect class="bar" data-name="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`,
			esc(l), x, y, slot*0.6, padTop+ih-y, Palette[i%len(Palette)])
		if i < len(notes) {
			fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x+slot*0.3, y-4, esc(notes[i]))
		}
	}
	b.WriteString(`</svg></figure>`)
	return template.HTML(b.String())
}

// segmentColor is the colour of each kind of span in a timeline; kinds
// not listed take the palette's remaining colours in name order.
var segmentColor = map[string]string{"fwd+bwd": Palette[0], "forward": Palette[3], "backward": Palette[4], "broadcast": Palette[1],
	"scatter": Palette[7], "sum": Palette[6], "all-reduce": Palette[5], "update": Palette[2]}

// Timeline draws spans per device on a time axis from 0 to span ms (0:
// the spans' own end), as a wide inline SVG with a legend: a row per
// device, a span per segment. Spans of a row that overlap (an all-reduce
// under backward) are drawn as a thinner bar over the other.
func Timeline(title string, devices []string, segs []Segment, span float64) template.HTML {
	for _, s := range segs {
		span = max(span, s.EndMs)
	}
	if len(segs) == 0 || span <= 0 || len(devices) == 0 {
		return NoData(title)
	}
	const w, rowH, left, top = 1100, 22, 110, 26
	h := top + rowH*len(devices) + 30
	xt := ticks(0, span, 8)
	scale := float64(w-left-16) / xt[len(xt)-1]
	var b strings.Builder
	esc := template.HTMLEscapeString
	fmt.Fprintf(&b, `<figure class="plot wide"><svg class="plot" data-title="%s" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="%s">`,
		esc(title), w, h, w, h, esc(title))
	fmt.Fprintf(&b, `<text class="title" x="8" y="18">%s</text>`, esc(title))
	for _, v := range xt {
		x := left + v*scale
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, x, top, x, top+rowH*len(devices))
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s ms</text>`, x, top+rowH*len(devices)+14, esc(tickLabel(v, xt)))
	}
	for i, d := range devices {
		fmt.Fprintf(&b, `<text class="label" x="%d" y="%d" text-anchor="end">%s</text>`, left-6, top+rowH*i+15, esc(d))
	}
	kinds := map[string]bool{}
	var extra []string
	for _, s := range segs {
		if !kinds[s.Kind] {
			kinds[s.Kind] = true
			if _, ok := segmentColor[s.Kind]; !ok {
				extra = append(extra, s.Kind)
			}
		}
	}
	sort.Strings(extra)
	color := func(k string) string {
		if c, ok := segmentColor[k]; ok {
			return c
		}
		for i, e := range extra {
			if e == k {
				return Palette[i%len(Palette)]
			}
		}
		return "#b8c2cc"
	}
	// Overlaid spans (all-reduce) after the others, thinner.
	sorted := append([]Segment(nil), segs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Kind != "all-reduce" && sorted[j].Kind == "all-reduce" })
	for _, s := range sorted {
		if s.Device < 0 || s.Device >= len(devices) || !(s.EndMs >= s.StartMs) {
			continue
		}
		y, hh := float64(top+rowH*s.Device+3), float64(rowH-6)
		if s.Kind == "all-reduce" {
			y, hh = y+hh/2, hh/2
		}
		fmt.Fprintf(&b, `<rect class="span" data-name="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.3g–%.3g ms</title></rect>`,
			esc(s.Kind), left+s.StartMs*scale, y, math.Max(0.5, (s.EndMs-s.StartMs)*scale), hh, color(s.Kind),
			esc(devices[s.Device]), esc(s.Kind), s.StartMs, s.EndMs)
	}
	b.WriteString(`</svg><figcaption>`)
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, `<span class="key"><span class="swatch" style="background:%s"></span>%s</span>`, color(k), esc(k))
	}
	b.WriteString(`</figcaption></figure>`)
	return template.HTML(b.String())
}
