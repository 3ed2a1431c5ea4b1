package report

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// Series is one line of a plot: points (X[i], Y[i]). Points whose X or Y
// is NaN or infinite are left out.
type Series struct {
	Name string
	X, Y []float64
	// Color is a CSS colour; "" takes the next one of Palette.
	Color string
}

// Palette is the colours series get in order, chosen to stay apart for
// the common forms of colour blindness and on paper.
var Palette = []string{"#1f5fd6", "#d6401f", "#1d9a4b", "#b07d00", "#7b3fc4", "#0e8f9a", "#c2185b", "#5d6b7a"}

// Plot geometry, in SVG user units (the SVG scales to its container).
const (
	plotW, plotH                 = 560, 300
	padL, padR, padTop, padBotom = 64, 16, 30, 44
)

// LinePlot draws series as lines on shared axes, as inline SVG with its
// legend: a figure of class "plot". Titles, labels and names are escaped.
// With no finite point at all it returns a "no data" note instead; a
// series of one point is drawn as a dot.
func LinePlot(title, xlabel, ylabel string, series ...Series) template.HTML {
	type pt struct{ x, y float64 }
	pts := make([][]pt, len(series))
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	n := 0
	for i, s := range series {
		for j := 0; j < len(s.X) && j < len(s.Y); j++ {
			x, y := s.X[j], s.Y[j]
			if !finite(x) || !finite(y) {
				continue
			}
			pts[i] = append(pts[i], pt{x, y})
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
			n++
		}
	}
	if n == 0 {
		return NoData(title)
	}
	xt := ticks(xmin, xmax, 6)
	yt := ticks(ymin, ymax, 5)
	x0, x1 := xt[0], xt[len(xt)-1]
	y0, y1 := yt[0], yt[len(yt)-1]
	iw, ih := float64(plotW-padL-padR), float64(plotH-padTop-padBotom)
	sx := func(x float64) float64 { return padL + (x-x0)/(x1-x0)*iw }
	sy := func(y float64) float64 { return padTop + ih - (y-y0)/(y1-y0)*ih }

	var b strings.Builder
	esc := template.HTMLEscapeString
	fmt.Fprintf(&b, `<figure class="plot"><svg class="plot" data-title="%s" viewBox="0 0 %d %d" width="%d" height="%d" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="%s">`,
		esc(title), plotW, plotH, plotW, plotH, esc(title))
	fmt.Fprintf(&b, `<text class="title" x="%d" y="18">%s</text>`, padL, esc(title))
	// Grid and tick labels.
	for _, v := range xt {
		x := sx(v)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%.1f"/>`, x, padTop, x, padTop+ih)
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x, padTop+ih+16, esc(tickLabel(v, xt)))
	}
	for _, v := range yt {
		y := sy(v)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%.1f" x2="%.1f" y2="%.1f"/>`, padL, y, padL+iw, y)
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, esc(tickLabel(v, yt)))
	}
	fmt.Fprintf(&b, `<rect class="frame" x="%d" y="%d" width="%.0f" height="%.0f"/>`, padL, padTop, iw, ih)
	fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%d" text-anchor="middle">%s</text>`, padL+iw/2, plotH-6, esc(xlabel))
	fmt.Fprintf(&b, `<text class="label" transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>`, padTop+ih/2, esc(ylabel))
	// Series without a colour take the palette's in order, skipping those
	// other series of the plot chose.
	colors := make([]string, len(series))
	taken := map[string]bool{}
	for _, s := range series {
		taken[s.Color] = true
	}
	next := 0
	for i, s := range series {
		colors[i] = s.Color
		for colors[i] == "" {
			c := Palette[next%len(Palette)]
			if !taken[c] || next >= len(Palette) {
				colors[i] = c
			}
			next++
		}
		p := pts[i]
		switch {
		case len(p) == 0:
			continue
		case len(p) == 1:
			fmt.Fprintf(&b, `<circle class="series" data-name="%s" cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`, esc(s.Name), sx(p[0].x), sy(p[0].y), esc(colors[i]))
			continue
		}
		fmt.Fprintf(&b, `<polyline class="series" data-name="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="`, esc(s.Name), esc(colors[i]))
		for j, q := range p {
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", sx(q.x), sy(q.y))
		}
		b.WriteString(`"/>`)
		// Few points: mark them, so that a short series reads as data.
		if len(p) <= 30 {
			for _, q := range p {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`, sx(q.x), sy(q.y), esc(colors[i]))
			}
		}
	}
	b.WriteString(`</svg><figcaption>`)
	for i, s := range series {
		if len(pts[i]) == 0 {
			fmt.Fprintf(&b, `<span class="key empty">%s: no data</span>`, esc(s.Name))
			continue
		}
		fmt.Fprintf(&b, `<span class="key"><span class="swatch" style="background:%s"></span>%s</span>`, esc(colors[i]), esc(s.Name))
	}
	b.WriteString(`</figcaption></figure>`)
	return template.HTML(b.String())
}

// NoData is the note that stands in for a plot without data.
func NoData(title string) template.HTML {
	return template.HTML(`<figure class="plot nodata"><div class="title">` + template.HTMLEscapeString(title) +
		`</div><p>no data</p></figure>`)
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// ticks returns about n round values spanning [lo, hi], the first at or
// below lo and the last at or above hi.
func ticks(lo, hi float64, n int) []float64 {
	if hi == lo {
		d := math.Abs(lo) * 0.1
		if d == 0 {
			d = 1
		}
		lo, hi = lo-d, hi+d
	}
	step := niceStep((hi - lo) / float64(n))
	start := math.Floor(lo/step) * step
	var out []float64
	for i := 0; ; i++ {
		v := start + float64(i)*step
		// Snap away float noise (0.30000000000000004).
		v = math.Round(v/step) * step
		out = append(out, v)
		if v >= hi-step*1e-9 || i > 4*n {
			break
		}
	}
	return out
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel writes v compactly (1.5k, 2M, 0.001), with as many decimals
// as the ticks' spacing needs.
func tickLabel(v float64, all []float64) string {
	step := 1.0
	if len(all) > 1 {
		step = all[1] - all[0]
	}
	a := math.Abs(v)
	for _, u := range []struct {
		div    float64
		suffix string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if a >= u.div && step >= u.div/100 {
			return trim(v/u.div, step/u.div) + u.suffix
		}
	}
	return trim(v, step)
}

func trim(v, step float64) string {
	dec := 0
	if step < 1 {
		dec = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}
