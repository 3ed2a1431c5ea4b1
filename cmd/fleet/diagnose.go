package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/monitor/diagnose"
	"github.com/fleetml/fleet/train/ddp"
)

// diagnoseCmd prints what held a finished run back, from the telemetry
// the trainer wrote in its folder.
func diagnoseCmd(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("diagnose", flag.ContinueOnError)
	fset.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fleet diagnose RUN_DIR\n\nNames the main bottleneck of a training run (data loading, a small batch,\nhost-device copies, fp32 on tensor cores, host syncs, communication, or none:\ncompute-bound), with the measurements behind it and the flag that fixes it,\nfrom RUN_DIR/%s. Where the ranks of a data-parallel run left flight\nrecords of their collectives (RUN_DIR/%s/rank-K.json: written when a\ncollective fails, and on SIGUSR1), it first names the collective the group\nhung in and the rank that never entered it.\n", diagnose.TelemetryFile, ddp.FlightDir)
		fset.PrintDefaults()
	}
	dir, err := runDirArg(fset, args, stderr)
	if err != nil {
		return err
	}
	flight := desyncReport(stdout, filepath.Join(dir, ddp.FlightDir))
	t, err := readTelemetry(dir)
	if err != nil {
		if flight {
			return nil // a hung run: the flight records are its diagnosis
		}
		return err
	}
	return diagnose.Format(stdout, diagnose.Diagnose(t))
}

// desyncReport prints the desync report of the flight records in dir
// (dist.DesyncReport) and reports whether there were any.
func desyncReport(stdout io.Writer, dir string) bool {
	dumps, err := dist.ReadFlightDumps(dir)
	if err != nil {
		return false
	}
	world := 0
	for _, d := range dumps {
		world = max(world, d.World)
	}
	rep, err := dist.DesyncReport(dumps, world)
	switch {
	case errors.Is(err, dist.ErrNoDesync):
		fmt.Fprintf(stdout, "Collectives: the flight records of %d of %d ranks in %s show no rank missing from a collective\n\n", len(dumps), world, dir)
	case err != nil:
		fmt.Fprintf(stdout, "Collectives: %s: %v\n\n", dir, err)
	default:
		fmt.Fprintf(stdout, "Collectives (flight records of %d of %d ranks in %s):\n  %s\n\n", len(dumps), world, dir, rep)
	}
	return true
}

// runDirArg parses a command's flags, which may come before or after the
// one RUN_DIR argument, and returns RUN_DIR.
func runDirArg(fset *flag.FlagSet, args []string, stderr io.Writer) (string, error) {
	var dir string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if len(a) > 1 && a[0] == '-' {
			rest = append(rest, a)
			// A flag's value in the next argument: not for booleans or
			// -flag=value.
			name := a[1:]
			if name != "" && name[0] == '-' {
				name = name[1:]
			}
			if f := fset.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
				i++
				rest = append(rest, args[i])
			}
			continue
		}
		if dir != "" {
			rest = append(rest, a) // parse reports it as unexpected
			continue
		}
		dir = a
	}
	if err := parse(fset, rest, stderr); err != nil {
		return "", err
	}
	if dir == "" {
		fmt.Fprintf(stderr, "fleet %s: missing RUN_DIR\n", fset.Name())
		fset.Usage()
		return "", errUsage
	}
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("run folder %s does not exist", dir)
		}
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a run folder (a file)", dir)
	}
	return dir, nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// readTelemetry reads RUN_DIR/telemetry.json; its errors name the file.
func readTelemetry(dir string) (diagnose.Telemetry, error) {
	path := filepath.Join(dir, diagnose.TelemetryFile)
	t, err := diagnose.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return t, fmt.Errorf("%s not found: the trainer writes it at the end of a run", path)
	}
	return t, err
}
