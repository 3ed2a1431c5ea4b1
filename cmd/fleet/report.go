package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/fleetml/fleet/monitor/report"
)

// reportCmd writes a run's folder as one self-contained HTML page.
func reportCmd(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("report", flag.ContinueOnError)
	out := fset.String("out", "", "the page to write (default RUN_DIR/"+report.ReportFile+")")
	fset.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fleet report RUN_DIR [--out FILE]\n\nWrites one self-contained HTML page (no network needed to view it) with the run's\nsummary and configuration, its loss, throughput and device curves, the bottleneck\ndiagnosis, and the batch-size sweep of lab.json when the folder has one.\n\nFlags:\n")
		fset.PrintDefaults()
	}
	dir, err := runDirArg(fset, args, stderr)
	if err != nil {
		return err
	}
	path := *out
	if path == "" {
		path = filepath.Join(dir, report.ReportFile)
	}
	if err := report.Write(dir, path); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	return nil
}
