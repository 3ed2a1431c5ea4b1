package ddp

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/launch"
)

// FlightDir is the folder of a run's flight records (dist.FlightDump): one
// rank-K.json per rank, written when a collective fails and on SIGUSR1;
// `fleet diagnose RUN_DIR` and `fleet run` read them.
const FlightDir = "flight"

// flightRecorder is a process group that keeps a flight record.
type flightRecorder interface{ Flight() *dist.FlightRecorder }

// dumpFlight writes this rank's flight record, saying why, into the run's
// FlightDir and the launcher's folder (launch.EnvFlightDir) where set. A
// group without a record (a Stepper's) dumps nothing; a failure to write is
// logged, never fatal: the run is failing already, or must go on.
func (d *Group) dumpFlight(reason string) {
	fr, ok := d.pg.(flightRecorder)
	if !ok {
		return
	}
	dump := dist.FlightDump{Rank: d.pg.Rank(), World: d.pg.Size(), Group: "ddp", Reason: reason,
		Dumped: time.Now().UnixNano(), Entries: fr.Flight().Entries()}
	var dirs []string
	if d.out != "" {
		dirs = append(dirs, filepath.Join(d.out, FlightDir))
	}
	if extra := os.Getenv(launch.EnvFlightDir); extra != "" {
		dirs = append(dirs, extra)
	}
	for _, dir := range dirs {
		if err := dist.WriteFlightDump(dir, dump); err != nil {
			fmt.Fprintf(d.log, "warning: %v\n", err)
			continue
		}
		fmt.Fprintf(d.log, "dist: flight record of the last %d collectives written to %s (%s)\n", len(dump.Entries), dist.FlightFile(dir, dump.Rank), reason)
	}
}

// failedCollective reports whether the group's flight record holds a
// failed collective.
func (d *Group) failedCollective() bool {
	fr, ok := d.pg.(flightRecorder)
	if !ok {
		return false
	}
	es := fr.Flight().Entries()
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].State == dist.FlightFailed {
			return true
		}
	}
	return false
}
