package train

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/monitor/prom"
	"github.com/fleetml/fleet/monitor/tfevents"
	"github.com/fleetml/fleet/tensor"
)

// sinks are the logs the ecosystem reads, fed with the same fields as
// metrics.jsonl: TensorBoard event files (--tensorboard) and a Prometheus
// /metrics endpoint (--metrics-addr). Only rank 0 writes them.
type sinks struct {
	tb     *tfevents.Writer
	reg    *prom.Registry
	gauges map[string]*prom.Gauge
	stop   func() error
	tok    Tokenizer // for the text samples in TensorBoard
}

// openSinks starts what cfg asks for.
func (r *run) openSinks(tok Tokenizer) error {
	cfg := r.cfg
	if cfg.Rank != 0 || (cfg.TensorBoard == "" && cfg.MetricsAddr == "") {
		return nil
	}
	s := &sinks{tok: tok}
	if cfg.TensorBoard != "" {
		w, err := tfevents.NewWriter(cfg.TensorBoard)
		if err != nil {
			return setting.Errorf("{TensorBoard}: %w", err)
		}
		s.tb = w
		fmt.Fprintf(r.log, "tensorboard: writing %s (view with tensorboard --logdir %s)\n", w.Path(), cfg.TensorBoard)
	}
	if cfg.MetricsAddr != "" {
		s.reg = prom.NewRegistry()
		s.gauges = map[string]*prom.Gauge{}
		addr, stop, err := prom.Serve(cfg.MetricsAddr, s.reg)
		if err != nil {
			s.close(io.Discard)
			return setting.Errorf("{MetricsAddr}: %w", err)
		}
		s.stop = stop
		fmt.Fprintf(r.log, "metrics: serving Prometheus metrics at http://%s/metrics\n", addr)
	}
	r.out.sinks = s
	return nil
}

// emit sends a metrics.jsonl line's fields to the sinks.
func (s *sinks) emit(m Metric) error {
	if s == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	var fields map[string]float64
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	now := time.Now()
	for _, k := range names {
		if k == "step" {
			continue
		}
		v := fields[k]
		if s.tb != nil {
			if err := s.tb.Scalar(k, int64(m.Step), v, now); err != nil {
				return setting.Errorf("{TensorBoard}: %w", err)
			}
		}
		if s.reg != nil {
			g := s.gauges[k]
			if g == nil {
				g = s.reg.Gauge("fleet_"+k, "The last logged "+k+" (see metrics.jsonl).", nil)
				s.gauges[k] = g
			}
			g.Set(v)
		}
	}
	if s.reg != nil {
		g := s.gauges["step"]
		if g == nil {
			g = s.reg.Gauge("fleet_step", "The optimizer step of the last logged metrics.", nil)
			s.gauges["step"] = g
		}
		g.Set(float64(m.Step))
	}
	return nil
}

// sample writes a short generated text to TensorBoard at an evaluation.
func (s *sinks) sample(m *model.GPT, step int, seed uint64) error {
	if s == nil || s.tb == nil || s.tok == nil {
		return nil
	}
	prompt, err := s.tok.Encode("\n")
	if err != nil || len(prompt) == 0 {
		prompt = []int32{0}
	}
	out, err := m.Generate(prompt, 200, model.Sampling{Temperature: 0.8, TopK: 200, RNG: tensor.NewRNG(seed + uint64(step))})
	if err != nil {
		return err
	}
	if err := s.tb.Text("samples", int64(step), s.tok.Decode(out), time.Now()); err != nil {
		return setting.Errorf("{TensorBoard}: %w", err)
	}
	return s.tb.Flush()
}

// close flushes and stops the sinks, reporting errors to log.
func (s *sinks) close(log io.Writer) error {
	if s == nil {
		return nil
	}
	var err error
	if s.tb != nil {
		if err = s.tb.Close(); err != nil {
			err = setting.Errorf("{TensorBoard}: %w", err)
		}
	}
	if s.stop != nil {
		s.stop()
	}
	return err
}
