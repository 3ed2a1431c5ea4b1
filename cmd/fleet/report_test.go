package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetml/fleet/monitor/diagnose"
)

func TestReportCmd(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "data.txt", corpus())
	run := filepath.Join(dir, "run")
	args := append([]string{"train", "--data", data, "--out", run}, tiny...)
	args = append(args, "--log-interval", "1")
	if code, out, errb := fleet(t, args...); code != 0 {
		t.Fatalf("train: exit %d\n%s\n%s", code, out, errb)
	}
	if err := diagnose.WriteFile(filepath.Join(run, diagnose.TelemetryFile), starvedTelemetry(0.25)); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "page.html")
	var out, errb bytes.Buffer
	// The flag after the folder, as people type it.
	if err := reportCmd([]string{run, "--out", page}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), page) {
		t.Errorf("output %q does not name the page", out.String())
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	// 20 steps logged every step: a train loss line of 20 points.
	loss := regexp.MustCompile(`data-name="train_loss"[^>]*points="([^"]*)"`).FindStringSubmatch(html)
	if loss == nil || len(strings.Fields(loss[1])) != 20 {
		t.Errorf("train loss line: %v, want 20 points", loss)
	}
	for _, want := range []string{"val_loss", "tokens_per_sec", "main bottleneck: data loading", "best_val_loss", "n_layer"} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The default page is in the folder.
	if err := reportCmd([]string{run}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(run, "report.html")); err != nil {
		t.Error(err)
	}
	if err := reportCmd([]string{filepath.Join(dir, "nope")}, &out, &errb); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing folder: %v", err)
	}
}
