package report

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/fleetml/fleet/monitor/diagnose"
)

// PhaseBar draws a step's phases as one stacked bar, in ms per step, as
// inline SVG with a legend; time the phases do not cover is "other".
func PhaseBar(p diagnose.Phases, stepMs float64) template.HTML {
	parts := []struct {
		name string
		ms   float64
	}{{"data_wait", p.DataWait}, {"h2d", p.H2D}, {"forward", p.Forward}, {"backward", p.Backward},
		{"comm", p.Comm}, {"optimizer", p.Optimizer}, {"ckpt_log", p.CkptLog}}
	total := p.Sum()
	if stepMs > total {
		parts = append(parts, struct {
			name string
			ms   float64
		}{"other", stepMs - total})
		total = stepMs
	}
	if total <= 0 {
		return NoData("Step phases")
	}
	const w, h, barY, barH = 1100, 64, 26, 28
	var b strings.Builder
	esc := template.HTMLEscapeString
	fmt.Fprintf(&b, `<figure class="plot wide"><svg class="plot" data-title="Step phases" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="step phases">`, w, h, w, h)
	fmt.Fprintf(&b, `<text class="title" x="8" y="18">Step phases: %.2f ms per step</text>`, stepMs)
	x := 8.0
	scale := float64(w-16) / total
	var legend strings.Builder
	for _, q := range parts {
		if q.ms <= 0 {
			continue
		}
		c := phaseColor[q.name+"_ms"]
		fmt.Fprintf(&b, `<rect class="phase" data-name="%s" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %.2f ms</title></rect>`,
			q.name, x, barY, q.ms*scale, barH, c, q.name, q.ms)
		x += q.ms * scale
		fmt.Fprintf(&legend, `<span class="key"><span class="swatch" style="background:%s"></span>%s %.2f ms (%.0f%%)</span>`, c, esc(q.name), q.ms, 100*q.ms/total)
	}
	b.WriteString(`</svg><figcaption>` + legend.String() + `</figcaption></figure>`)
	return template.HTML(b.String())
}

// phaseColor is the colour of each phase in the phase bar and of its
// field in the step-time plot: the palette after the step time's.
var phaseColor = map[string]string{"ms_per_step": Palette[0], "data_wait_ms": Palette[1], "h2d_ms": Palette[2],
	"forward_ms": Palette[3], "backward_ms": Palette[4], "comm_ms": Palette[5], "optimizer_ms": Palette[6],
	"ckpt_log_ms": Palette[7], "other_ms": "#b8c2cc"}

var page = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1b1f24; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #d8dde3; padding-bottom: 4px; }
.meta { color: #5d6b7a; }
.grid { display: flex; flex-wrap: wrap; gap: 12px; }
figure.plot { margin: 0; padding: 8px; border: 1px solid #d8dde3; border-radius: 6px; width: 530px; }
figure.wide { width: 1100px; max-width: 100%; }
figure.nodata { height: 80px; color: #5d6b7a; }
figure.nodata .title { font-weight: 600; color: #1b1f24; }
svg.plot { display: block; width: 100%; height: auto; }
svg .title { font-size: 14px; font-weight: 600; fill: #1b1f24; }
svg .tick { font-size: 11px; fill: #5d6b7a; }
svg .label { font-size: 12px; fill: #1b1f24; }
svg .grid { stroke: #eceff2; stroke-width: 1; }
svg .frame { fill: none; stroke: #9aa5b1; stroke-width: 1; }
figcaption { font-size: 12px; margin-top: 4px; }
.key { margin-right: 14px; white-space: nowrap; }
.key.empty { color: #8a96a3; }
.swatch { display: inline-block; width: 12px; height: 4px; margin: 0 5px 3px 0; vertical-align: middle; }
table { border-collapse: collapse; margin: 4px 24px 8px 0; }
td, th { padding: 2px 10px 2px 0; text-align: left; vertical-align: top; }
th { color: #5d6b7a; font-weight: 500; }
.tables { display: flex; flex-wrap: wrap; align-items: flex-start; }
pre { background: #f4f6f8; padding: 12px; border-radius: 6px; white-space: pre-wrap; }
.verdict { font-weight: 600; padding: 2px 8px; border-radius: 4px; background: #fdecea; color: #8a1c10; }
.verdict.ok { background: #e7f5ec; color: #11602f; }
.problems { color: #8a1c10; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<div class="meta">{{.Dir}} · report made {{.Generated}}</div>
{{with .Problems}}<ul class="problems">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}

<h2>Summary</h2>
{{if .Summary}}<div class="tables">{{range .Summary}}<table>{{range .}}<tr><th>{{.Key}}</th><td>{{.Value}}</td></tr>{{end}}</table>{{end}}</div>
{{else}}<p class="meta">No summary.json: the run has not finished, or was stopped.</p>{{end}}

<h2>Bottleneck diagnosis</h2>
{{if .Diagnosis}}<p>Main bottleneck: <span class="verdict{{if .Healthy}} ok{{end}}">{{.Verdict}}</span></p>
{{.Phases}}
<pre>{{.Diagnosis}}</pre>
{{else}}<p class="meta">No telemetry.json in this run: no diagnosis.</p>{{end}}

<h2>Training curves</h2>
<div class="grid">{{range .Plots}}{{.}}{{end}}</div>

{{with .Lab}}{{if .Sweep.Points}}<h2>Batch-size sweep</h2>
<p class="meta">{{.Device}}{{with .DeviceName}} ({{.}}){{end}}{{with .Sweep.Chosen}} · --batch-size auto takes {{.}}{{end}}{{with .Sweep.UtilSource}} · utilisation: {{.}}{{end}}</p>
{{with .Sweep.Summary}}<p>{{.}}</p>{{end}}{{with .Sweep.Stop}}<p class="meta">{{.}}</p>{{end}}
<div class="grid">{{range $.LabPlots}}{{.}}{{end}}</div>{{end}}
{{with .DataParallel}}<h2>DataParallel against DDP</h2>
<p class="meta">{{len .Devices}} devices ({{range $i, $d := .Devices}}{{if $i}}, {{end}}{{$d}}{{end}}), global batch {{.Batch}} × {{.BlockSize}} tokens, {{.Params}} parameters · {{.Method}}</p>
<ul>{{range .Conclusion}}<li>{{.}}</li>{{end}}</ul>
<p class="meta">Bytes through the first device: {{.BytesMethod}}</p>
<div class="grid">{{range $.DPPlots}}{{.}}{{end}}</div>
<ul class="meta">{{range .Modes}}<li>{{.Name}}: {{.TimelineNote}}{{with .Command}} · <code>{{.}}</code>{{end}}</li>{{end}}</ul>{{end}}
{{with .Recap}}<h2>Recap: n-gram, LSTM and Transformer</h2>
{{with .Note}}<p class="meta">{{.}}</p>{{end}}{{if .Models}}
<p class="meta">{{.Data}} · {{.TrainTokens}} train and {{.ValTokens}} val tokens · {{printf "%.0f" .BudgetSec}} s each · {{.Method}}</p>
<table><tr><th>model</th><th>arch</th><th>parameters</th><th>tokens/s</th><th>val perplexity</th><th>time s</th><th></th></tr>
{{range .Models}}<tr><td>{{.Name}}</td><td>{{.Arch}}</td>{{if .Skipped}}<td colspan="5">skipped: {{.Skipped}}</td>{{else}}<td>{{.Params}}</td><td>{{printf "%.0f" .TokensPerSec}}</td><td>{{printf "%.3f" .ValPerplexity}}</td><td>{{printf "%.1f" .ElapsedSec}}</td><td class="meta">{{.Note}}</td>{{end}}</tr>
{{end}}</table>
{{with .Summary}}<p>{{.}}</p>{{end}}
<div class="grid">{{range $.RecapPlots}}{{.}}{{end}}</div>{{end}}{{end}}{{end}}
<h2>Configuration</h2>
{{if .Config}}<div class="tables">{{range .Config}}<table>{{if .Name}}<tr><th colspan="2">{{.Name}}</th></tr>{{end}}{{range .Rows}}<tr><th>{{.Key}}</th><td>{{.Value}}</td></tr>{{end}}</table>{{end}}</div>
{{else}}<p class="meta">No config.json.</p>{{end}}

</body>
</html>
`))
