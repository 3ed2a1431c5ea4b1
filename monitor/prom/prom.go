// Package prom exposes gauges and counters to Prometheus: a Registry of
// metric families rendered in the text exposition format 0.0.4 (HELP and
// TYPE lines, labelled samples), served over HTTP at /metrics by Serve.
//
// Metrics are set from the training goroutine and read by the HTTP
// handler at the same time: a Gauge or Counter holds its value in an atomic
// word, so Set, Add and a scrape never race and never block each other.
// Registering a metric takes the Registry's lock and may happen at any time,
// also while it is being served.
//
// Address rule for Serve: a bare ":PORT" (or "PORT") listens on
// 127.0.0.1:PORT, so that metrics stay on the machine unless asked
// otherwise. Exposing them to the network is an explicit choice:
// "0.0.0.0:PORT", "[::]:PORT", or a host name or address to bind.
//
// Misuse at registration (an invalid metric or label name, a name already
// registered with another type or help text, the same series registered
// twice as a GaugeFunc) is a programming error and panics, as flag
// redefinitions do.
package prom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ContentType is the media type of the text exposition format 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Labels are a series' label names and values. Names must match
// [a-zA-Z_][a-zA-Z0-9_]* and not begin with "__"; values are any text.
type Labels map[string]string

// A Gauge is a value that goes up and down. Its methods are safe for
// concurrent use.
type Gauge struct{ bits atomic.Uint64 }

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Add adds d (which may be negative) to the gauge.
func (g *Gauge) Add(d float64) { addFloat(&g.bits, d) }

// Value is the gauge's current value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

// A Counter is a total that only goes up, from 0. Its methods are safe for
// concurrent use.
type Counter struct{ bits atomic.Uint64 }

// Add adds d to the counter. A negative or NaN d would break the
// counter's meaning and is ignored.
func (c *Counter) Add(d float64) {
	if d > 0 {
		addFloat(&c.bits, d)
	}
}

// Inc adds 1 to the counter.
func (c *Counter) Inc() { addFloat(&c.bits, 1) }

// Value is the counter's current total.
func (c *Counter) Value() float64 { return math.Float64frombits(c.bits.Load()) }

func addFloat(bits *atomic.Uint64, d float64) {
	for {
		old := bits.Load()
		if bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

const (
	typeGauge   = "gauge"
	typeCounter = "counter"
)

// series is one labelled sample of a family.
type series struct {
	labels string // rendered: `{a="x",b="y"}`, or "" without labels
	bits   *atomic.Uint64
	fn     func() float64
	gauge  *Gauge
	ctr    *Counter
}

func (s *series) value() float64 {
	if s.fn != nil {
		return s.fn()
	}
	return math.Float64frombits(s.bits.Load())
}

type family struct {
	name, help, typ string
	series          map[string]*series
}

// A Registry holds metric families. Its methods are safe for concurrent
// use.
type Registry struct {
	mu   sync.RWMutex
	fams map[string]*family
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{fams: map[string]*family{}} }

// Gauge returns the gauge of family name with the given labels (nil for
// none), registering the family with help text help and the series on first
// use; a later call with the same name and labels returns the same Gauge.
func (r *Registry) Gauge(name, help string, labels Labels) *Gauge {
	s := r.register(name, help, typeGauge, labels, nil)
	return s.gauge
}

// Counter returns the counter of family name with the given labels, like
// Gauge. Prometheus' convention is to end counter names with "_total".
func (r *Registry) Counter(name, help string, labels Labels) *Counter {
	s := r.register(name, help, typeCounter, labels, nil)
	return s.ctr
}

// GaugeFunc registers a gauge whose value is fn's result at each scrape.
// fn runs on the HTTP server's goroutine, so what it reads must be safe
// for that; it must be quick and must not call the Registry.
func (r *Registry) GaugeFunc(name, help string, labels Labels, fn func() float64) {
	if fn == nil {
		panic("prom: GaugeFunc " + name + " with a nil function")
	}
	r.register(name, help, typeGauge, labels, fn)
}

func (r *Registry) register(name, help, typ string, labels Labels, fn func() float64) *series {
	if !validName(name, true) {
		panic(fmt.Sprintf("prom: invalid metric name %q", name))
	}
	key := renderLabels(name, labels)
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.fams[name]
	if f == nil {
		f = &family{name: name, help: help, typ: typ, series: map[string]*series{}}
		r.fams[name] = f
	} else if f.typ != typ || f.help != help {
		panic(fmt.Sprintf("prom: metric %s registered again as %s %q, was %s %q", name, typ, help, f.typ, f.help))
	}
	s := f.series[key]
	if s != nil {
		if fn != nil || s.fn != nil {
			panic(fmt.Sprintf("prom: series %s%s registered twice with a function", name, key))
		}
		return s
	}
	s = &series{labels: key, fn: fn}
	if fn == nil {
		if typ == typeCounter {
			s.ctr = new(Counter)
			s.bits = &s.ctr.bits
		} else {
			s.gauge = new(Gauge)
			s.bits = &s.gauge.bits
		}
	}
	f.series[key] = s
	return s
}

// renderLabels renders labels sorted by name, escaped, as they appear in a
// sample line.
func renderLabels(metric string, labels Labels) string {
	if len(labels) == 0 {
		return ""
	}
	names := make([]string, 0, len(labels))
	for n := range labels {
		if !validName(n, false) || strings.HasPrefix(n, "__") {
			panic(fmt.Sprintf("prom: metric %s: invalid label name %q", metric, n))
		}
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		labelEscaper.WriteString(&b, labels[n])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// validName reports whether s is a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)
// or, with colon false, a label name ([a-zA-Z_][a-zA-Z0-9_]*).
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c == ':' && colon:
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// WriteTo writes every family, sorted by name, its series sorted by labels,
// in the text exposition format.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	type snap struct {
		f *family
		s []*series
	}
	r.mu.RLock()
	fams := make([]snap, 0, len(r.fams))
	for _, f := range r.fams {
		ss := make([]*series, 0, len(f.series))
		for _, s := range f.series {
			ss = append(ss, s)
		}
		fams = append(fams, snap{f, ss})
	}
	r.mu.RUnlock()
	slices.SortFunc(fams, func(a, b snap) int { return strings.Compare(a.f.name, b.f.name) })

	var buf bytes.Buffer
	for _, fs := range fams {
		f := fs.f
		slices.SortFunc(fs.s, func(a, b *series) int { return strings.Compare(a.labels, b.labels) })
		buf.WriteString("# HELP ")
		buf.WriteString(f.name)
		buf.WriteByte(' ')
		helpEscaper.WriteString(&buf, f.help)
		buf.WriteString("\n# TYPE ")
		buf.WriteString(f.name)
		buf.WriteByte(' ')
		buf.WriteString(f.typ)
		buf.WriteByte('\n')
		for _, s := range fs.s {
			buf.WriteString(f.name)
			buf.WriteString(s.labels)
			buf.WriteByte(' ')
			buf.Write(appendValue(buf.AvailableBuffer(), s.value()))
			buf.WriteByte('\n')
		}
	}
	return buf.WriteTo(w)
}

func appendValue(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// Handler serves the registry in the text exposition format.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", ContentType)
		if req.Method == http.MethodHead {
			return
		}
		r.WriteTo(w)
	})
}

// ListenAddr applies the address rule: ":PORT" and "PORT" become
// "127.0.0.1:PORT"; an address with a host is returned as it is.
func ListenAddr(addr string) (string, error) {
	if addr != "" && strings.Trim(addr, "0123456789") == "" {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("prom: metrics address %q: want HOST:PORT or :PORT: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Serve serves reg at /metrics on addr (see the package doc for the address
// rule; port 0 picks a free port) until closeFn is called. It returns the
// address actually bound, host:port. closeFn stops the server, waiting up
// to two seconds for scrapes in progress; calling it again returns nil.
func Serve(addr string, reg *Registry) (actualAddr string, closeFn func() error, err error) {
	if reg == nil {
		return "", nil, errors.New("prom: nil Registry")
	}
	laddr, err := ListenAddr(addr)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", laddr)
	if err != nil {
		return "", nil, fmt.Errorf("prom: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", reg.Handler())
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln) // returns http.ErrServerClosed after Shutdown
	}()
	var once sync.Once
	closeFn = func() error {
		var err error
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err = srv.Shutdown(ctx); err != nil {
				err = srv.Close()
			}
			<-done
		})
		return err
	}
	return ln.Addr().String(), closeFn, nil
}
