package prom

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// exposition is the test's parse of a text exposition.
type exposition struct {
	help    map[string]string
	typ     map[string]string
	samples map[string]float64 // key: name + "|" + sorted k=v pairs joined by ","
}

// parseExposition parses format 0.0.4 strictly enough for what Registry
// writes: every family has HELP then TYPE before its samples, each sample
// belongs to the last TYPE'd family, label values are quoted and escaped.
func parseExposition(t *testing.T, text string) exposition {
	t.Helper()
	e := exposition{help: map[string]string{}, typ: map[string]string{}, samples: map[string]float64{}}
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			if _, dup := e.help[name]; dup {
				t.Fatalf("line %d: second HELP for %s", ln, name)
			}
			e.help[name] = unescape(t, help, false)
			cur = ""
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			if _, ok := e.help[name]; !ok {
				t.Fatalf("line %d: TYPE before HELP for %s", ln, name)
			}
			if typ != "gauge" && typ != "counter" {
				t.Fatalf("line %d: type %q", ln, typ)
			}
			e.typ[name] = typ
			cur = name
			continue
		}
		if strings.HasPrefix(line, "#") || line == "" {
			t.Fatalf("line %d: unexpected %q", ln, line)
		}
		// name{labels} value
		i := strings.IndexAny(line, "{ ")
		if i < 0 {
			t.Fatalf("line %d: %q", ln, line)
		}
		name, rest := line[:i], line[i:]
		if name != cur {
			t.Fatalf("line %d: sample of %s outside its family (%s)", ln, name, cur)
		}
		var pairs []string
		if rest[0] == '{' {
			rest = rest[1:]
			for rest[0] != '}' {
				eq := strings.IndexByte(rest, '=')
				if eq < 0 || rest[eq+1] != '"' {
					t.Fatalf("line %d: bad labels %q", ln, line)
				}
				lname := rest[:eq]
				rest = rest[eq+2:]
				// find the closing quote, skipping escapes
				j := 0
				for ; rest[j] != '"'; j++ {
					if rest[j] == '\\' {
						j++
					}
				}
				pairs = append(pairs, lname+"="+unescape(t, rest[:j], true))
				rest = rest[j+1:]
				if rest[0] == ',' {
					rest = rest[1:]
				}
			}
			rest = rest[1:]
		}
		if rest[0] != ' ' {
			t.Fatalf("line %d: no space before value: %q", ln, line)
		}
		v, err := strconv.ParseFloat(rest[1:], 64)
		if err != nil {
			t.Fatalf("line %d: value: %v", ln, err)
		}
		key := name + "|" + strings.Join(pairs, ",")
		if _, dup := e.samples[key]; dup {
			t.Fatalf("line %d: duplicate series %s", ln, key)
		}
		e.samples[key] = v
	}
	return e
}

func unescape(t *testing.T, s string, quote bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch {
		case i < len(s) && s[i] == '\\':
			b.WriteByte('\\')
		case i < len(s) && s[i] == 'n':
			b.WriteByte('\n')
		case i < len(s) && s[i] == '"' && quote:
			b.WriteByte('"')
		default:
			t.Fatalf("bad escape in %q", s)
		}
	}
	return b.String()
}

func key(name string, kv ...string) string {
	var pairs []string
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, kv[i]+"="+kv[i+1])
	}
	// kv are given sorted by label name
	return name + "|" + strings.Join(pairs, ",")
}

func get(t *testing.T, url string) (string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(body), resp.Header
}

func TestServeAndParse(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 3))
	reg := NewRegistry()
	loss := reg.Gauge("fleet_train_loss", "Training loss of the last step.", nil)
	lossV := r.NormFloat64() * 3
	loss.Set(lossV)

	// Label values that need escaping, and several series in one family.
	devs := []string{"0", "1", `we"ird\dev` + "\nname"}
	util := map[string]float64{}
	for _, d := range devs {
		v := r.Float64() * 100
		reg.Gauge("fleet_device_utilization_percent", "Device busy time.\nSecond line with a \\ backslash.", Labels{"device": d, "kind": "cuda"}).Set(v)
		util[d] = v
	}
	tokens := reg.Counter("fleet_tokens_total", "Tokens trained on.", nil)
	var tokSum float64
	for range 1 + r.IntN(50) {
		d := float64(r.IntN(100000))
		tokens.Add(d)
		tokSum += d
	}
	tokens.Add(-5)         // ignored
	tokens.Add(math.NaN()) // ignored
	steps := reg.Counter("fleet_steps_total", "Optimizer steps.", Labels{"run": "a"})
	n := r.IntN(1000)
	for range n {
		steps.Inc()
	}
	// The same name and labels give the same metric.
	if reg.Counter("fleet_steps_total", "Optimizer steps.", Labels{"run": "a"}) != steps {
		t.Error("second registration returned another counter")
	}
	fnV := r.Float64()
	reg.GaugeFunc("fleet_mem_bytes", "Heap bytes.", nil, func() float64 { return fnV })
	reg.Gauge("fleet_special", "Special values.", Labels{"v": "inf"}).Set(math.Inf(1))
	reg.Gauge("fleet_special", "Special values.", Labels{"v": "-inf"}).Set(math.Inf(-1))
	reg.Gauge("fleet_special", "Special values.", Labels{"v": "nan"}).Set(math.NaN())
	g := reg.Gauge("fleet_added", "Added.", nil)
	a, b := r.NormFloat64(), r.NormFloat64()
	g.Add(a)
	g.Add(b)

	addr, closeFn, err := Serve("127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	body, hdr := get(t, "http://"+addr+"/metrics")
	if ct := hdr.Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type %q", ct)
	}
	e := parseExposition(t, body)

	want := map[string]float64{
		key("fleet_train_loss"):              lossV,
		key("fleet_tokens_total"):            tokSum,
		key("fleet_steps_total", "run", "a"): float64(n),
		key("fleet_mem_bytes"):               fnV,
		key("fleet_special", "v", "inf"):     math.Inf(1),
		key("fleet_special", "v", "-inf"):    math.Inf(-1),
		key("fleet_added"):                   a + b,
	}
	for _, d := range devs {
		want[key("fleet_device_utilization_percent", "device", d, "kind", "cuda")] = util[d]
	}
	for k, v := range want {
		got, ok := e.samples[k]
		if !ok {
			t.Errorf("missing %q in\n%s", k, body)
		} else if got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	if v := e.samples[key("fleet_special", "v", "nan")]; !math.IsNaN(v) {
		t.Errorf("NaN gauge read back as %v", v)
	}
	if len(e.samples) != len(want)+1 {
		t.Errorf("%d samples, want %d:\n%s", len(e.samples), len(want)+1, body)
	}
	if e.typ["fleet_tokens_total"] != "counter" || e.typ["fleet_train_loss"] != "gauge" || e.typ["fleet_mem_bytes"] != "gauge" {
		t.Errorf("types %v", e.typ)
	}
	if h := e.help["fleet_device_utilization_percent"]; h != "Device busy time.\nSecond line with a \\ backslash." {
		t.Errorf("help %q", h)
	}

	// A new value and a new series show in the next scrape.
	lossV2 := r.NormFloat64()
	loss.Set(lossV2)
	reg.Gauge("fleet_late", "Registered after Serve.", nil).Set(7)
	e = parseExposition(t, func() string { s, _ := get(t, "http://"+addr+"/metrics"); return s }())
	if e.samples[key("fleet_train_loss")] != lossV2 || e.samples[key("fleet_late")] != 7 {
		t.Errorf("second scrape: loss %v late %v", e.samples[key("fleet_train_loss")], e.samples[key("fleet_late")])
	}

	resp, err := http.Get("http://" + addr + "/other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %s", resp.Status)
	}

	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	if err := closeFn(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("server still accepting after close")
	}
}

func TestAddressRule(t *testing.T) {
	for in, want := range map[string]string{
		":9090":        "127.0.0.1:9090",
		"9090":         "127.0.0.1:9090",
		"0.0.0.0:9090": "0.0.0.0:9090",
		"[::]:9090":    "[::]:9090",
		"host:1":       "host:1",
	} {
		got, err := ListenAddr(in)
		if err != nil || got != want {
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "localhost", "1.2.3.4:1:2"} {
		if _, err := ListenAddr(bad); err == nil {
			t.Errorf("ListenAddr(%q) accepted", bad)
		}
	}

	reg := NewRegistry()
	reg.Gauge("x", "x.", nil).Set(1)
	addr, closeFn, err := Serve(":0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	host, port, _ := net.SplitHostPort(addr)
	if host != "127.0.0.1" {
		t.Fatalf(`":0" bound %s, want 127.0.0.1`, addr)
	}
	get(t, "http://"+addr+"/metrics")
	// Not reachable through the machine's other addresses, where it has any.
	addrs, _ := net.InterfaceAddrs()
	tried := 0
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		tried++
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), port), time.Second)
		if err == nil {
			c.Close()
			t.Errorf(`":0" reachable at %s`, ipn.IP)
		}
	}
	t.Logf("checked %d non-loopback addresses", tried)
}

func TestRegistrationPanics(t *testing.T) {
	reg := NewRegistry()
	reg.Gauge("g", "help", nil)
	for name, f := range map[string]func(){
		"bad metric name": func() { reg.Gauge("1abc", "h", nil) },
		"dash in name":    func() { reg.Gauge("a-b", "h", nil) },
		"bad label name":  func() { reg.Gauge("ok", "h", Labels{"a:b": "x"}) },
		"reserved label":  func() { reg.Gauge("ok2", "h", Labels{"__x": "x"}) },
		"type change":     func() { reg.Counter("g", "help", nil) },
		"help change":     func() { reg.Gauge("g", "other", nil) },
		"func twice":      func() { reg.GaugeFunc("g", "help", nil, func() float64 { return 0 }) },
		"nil func":        func() { reg.GaugeFunc("h", "help", nil, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	reg.Gauge("ns:sub_total", "colons are allowed in metric names", Labels{"_a1": "v"})
}

// TestConcurrent sets values and registers series from one goroutine while
// others scrape; run with -race. Every scraped value must be one that was set.
func TestConcurrent(t *testing.T) {
	reg := NewRegistry()
	g := reg.Gauge("fleet_step", "Step.", nil)
	c := reg.Counter("fleet_tokens_total", "Tokens.", nil)
	addr, closeFn, err := Serve("127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			g.Set(float64(i))
			c.Add(3)
			if i%50 == 0 && i < 10000 {
				reg.Gauge("fleet_dyn", "Dynamic.", Labels{"i": strconv.Itoa(i)}).Set(float64(i))
			}
		}
	})
	var last float64
	for range 40 {
		body, _ := get(t, "http://"+addr+"/metrics")
		e := parseExposition(t, body)
		step := e.samples[key("fleet_step")]
		tok := e.samples[key("fleet_tokens_total")]
		if step != math.Trunc(step) || math.Mod(tok, 3) != 0 || tok < last {
			t.Fatalf("scraped step %v tokens %v (previous tokens %v)", step, tok, last)
		}
		last = tok
	}
	close(stop)
	wg.Wait()
	if c.Value() == 0 || math.Mod(c.Value(), 3) != 0 {
		t.Errorf("counter %v", c.Value())
	}
}

func BenchmarkGaugeSet(b *testing.B) {
	g := NewRegistry().Gauge("x", "x", nil)
	for i := 0; b.Loop(); i++ {
		g.Set(float64(i))
	}
}

func ExampleServe() {
	reg := NewRegistry()
	reg.Gauge("fleet_train_loss", "Training loss of the last step.", nil).Set(2.5)
	reg.Counter("fleet_tokens_total", "Tokens trained on.", Labels{"rank": "0"}).Add(4096)
	addr, closeFn, err := Serve(":0", reg) // 127.0.0.1, a free port
	if err != nil {
		panic(err)
	}
	defer closeFn()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Print(string(body))
	// Output:
	// # HELP fleet_tokens_total Tokens trained on.
	// # TYPE fleet_tokens_total counter
	// fleet_tokens_total{rank="0"} 4096
	// # HELP fleet_train_loss Training loss of the last step.
	// # TYPE fleet_train_loss gauge
	// fleet_train_loss 2.5
}
