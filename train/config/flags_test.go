package config

import (
	"flag"
	"io"
	"reflect"
	"testing"
	"time"
)

// TestFlagsSetTheirFields parses every flag of the table and checks that
// each lands in the field it declares, and that defaults are Default's.
func TestFlagsSetTheirFields(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	Flags.Register(fs, &c)
	if got := reflect.ValueOf(c); !reflect.DeepEqual(c, Default()) {
		t.Fatalf("registering changed the config: %+v", got)
	}
	args := map[string]string{"string": "x1", "int": "7", "int64": "7", "uint64": "7", "float64": "0.5", "bool": "true", "time.Duration": "3s"}
	seen := map[string]bool{}
	for _, f := range Flags {
		if seen[f.Name] || seen[f.Field] {
			t.Errorf("%s (%s) is declared twice", f.Name, f.Field)
		}
		seen[f.Name], seen[f.Field] = true, true
		c := Default()
		fs := flag.NewFlagSet("train", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		Flags.Register(fs, &c)
		field := reflect.ValueOf(&c).Elem().FieldByName(f.Field)
		if !field.IsValid() {
			t.Errorf("--%s sets %s, which Config lacks", f.Name, f.Field)
			continue
		}
		v, ok := args[field.Type().String()]
		switch f.Field {
		case "BatchSize":
			v, ok = "7", true
		case "MemoryLimit":
			v = "7"
		case "UntiedHead":
			v = "false" // the field holds the flag's negation
		}
		if !ok {
			t.Errorf("--%s: no test value for a %s", f.Name, field.Type())
			continue
		}
		if err := fs.Parse([]string{"--" + f.Name + "=" + v}); err != nil {
			t.Errorf("--%s=%s: %v", f.Name, v, err)
			continue
		}
		want := map[string]any{"x1": "x1", "7": 7, "0.5": 0.5, "true": true, "false": true, "3s": 3 * time.Second}[v]
		got := field.Interface()
		if reflect.ValueOf(got).Kind() != reflect.String && reflect.ValueOf(got).CanInt() {
			got = int(field.Int())
		} else if field.Kind() == reflect.Uint64 {
			got = int(field.Uint())
		}
		if field.Type() == reflect.TypeOf(time.Duration(0)) {
			got = field.Interface()
		}
		if got != want {
			t.Errorf("--%s=%s set %s to %v, want %v", f.Name, v, f.Field, got, want)
		}
	}
	for _, n := range ModelFlags {
		if _, ok := Flags.Lookup(n); !ok {
			t.Errorf("ModelFlags lists %s, which the table lacks", n)
		}
	}
}

func TestPrecision(t *testing.T) {
	for _, s := range []string{"", "fp32", "bf16", "fp16"} {
		p, err := ParsePrecision(s)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := p.MarshalText()
		if want := map[string]string{"": "fp32"}[s]; string(b) != s && string(b) != want {
			t.Errorf("%q reads as %v", s, p)
		}
		if p.LossScaled() != (s == "fp16") {
			t.Errorf("%q: LossScaled %v", s, p.LossScaled())
		}
	}
	if _, err := ParsePrecision("fp8"); err == nil || err.Error() != `Precision must be fp32, bf16 or fp16, got "fp8"` {
		t.Errorf("fp8: %v", err)
	}
	var p Precision
	if err := p.UnmarshalText([]byte("bf16")); err != nil || p != BF16 || p.DType().String() == "" {
		t.Errorf("UnmarshalText(bf16) = %v, %v", p, err)
	}
}
