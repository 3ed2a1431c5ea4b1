package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/monitor/diagnose"
)

// DefaultRunsDir is the folder under which a run without --out gets a new
// numbered folder of its own (run-001, run-002, ...), so that running fleet
// train twice never writes over the first run.
const DefaultRunsDir = "out"

// Files and folders a run writes in its folder.
const (
	ConfigFile    = "config.json"
	TokenizerFile = "tokenizer.json"
	MetricsFile   = "metrics.jsonl"
	SummaryFile   = "summary.json"
	ModelFile     = "model.safetensors"
	BestFile      = "best.safetensors"
	// CheckpointDir holds the run's checkpoints (see package checkpoint).
	CheckpointDir = "checkpoints"
	// PipelineFile is where a pipelined run writes its pipeline report.
	PipelineFile = "pipeline.json"
	// ReplicasFile is where a --replicas run writes its report.
	ReplicasFile = "replicas.json"
)

// runPrefix names the numbered run folders: run-001, run-002, ...
const runPrefix = "run-"

// runFiles are the files and folders a run writes into its folder. A
// folder holding any of them holds a run, finished or not.
var runFiles = []string{ConfigFile, TokenizerFile, MetricsFile, SummaryFile, ModelFile, BestFile,
	CheckpointDir, diagnose.TelemetryFile, PipelineFile, ReplicasFile}

// runFilesIn lists the run files in dir, and its numbered run folders.
func runFilesIn(dir string) []string {
	var have []string
	for _, f := range runFiles {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			have = append(have, f)
		}
	}
	for _, n := range RunNumbers(dir) {
		have = append(have, RunName(n)+"/")
	}
	return have
}

// RunName is the folder name of run n: run-001, run-002, ...
func RunName(n int) string { return fmt.Sprintf("%s%03d", runPrefix, n) }

// RunNumbers lists the numbers of the numbered run folders in root, in
// increasing order.
func RunNumbers(root string) []int {
	ents, _ := os.ReadDir(root)
	var ns []int
	for _, e := range ents {
		s, ok := strings.CutPrefix(e.Name(), runPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.Atoi(s); err == nil && n > 0 && RunName(n) == e.Name() {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns
}

// NewestRun returns the newest run under root: the numbered run folder
// with the highest number, or root itself where it holds a run's files
// and no numbered folders (a run given --out root). It fails, saying how
// to make one, where there is none.
func NewestRun(root string) (string, error) {
	if ns := RunNumbers(root); len(ns) > 0 {
		return filepath.Join(root, RunName(ns[len(ns)-1])), nil
	}
	if len(runFilesIn(root)) > 0 {
		return root, nil
	}
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return "", setting.Errorf("no run in %s: it does not exist (train one with fleet train, or name a run folder with {Out})", root)
	}
	return "", setting.Errorf("no run in %s: it holds no %sNNN folder and no run's files (train one with fleet train, or name a run folder with {Out})", root, runPrefix)
}

// finishedRun reports whether a run folder's files say the run finished:
// its final weights or summary are there.
func finishedRun(have []string) bool {
	return slices.Contains(have, ModelFile) || slices.Contains(have, SummaryFile)
}

// OutPlan is where a run writes, decided before anything is written
// (DecideOut). Rank 0 hands it to the other ranks of a job as JSON.
type OutPlan struct {
	Dir string `json:"dir"`
	// New says that Dir is a numbered folder to be made for this run
	// (claimed with an exclusive mkdir, so two runs cannot share it).
	New bool `json:"new,omitempty"`
	// Note is a line for the log about the choice ("" for none).
	Note string `json:"note,omitempty"`
	// Err is rank 0's refusal, passed to the other ranks of a job as a
	// setting.Errorf format (setting.Portable).
	Err string `json:"err,omitempty"`
	// CPUBF16 is rank 0's choice of the CPU's BF16 product under
	// Config.CPUBF16 auto (SettleCPUBF16), and CPUBF16How how it chose.
	CPUBF16    string `json:"cpu_bf16,omitempty"`
	CPUBF16How string `json:"cpu_bf16_how,omitempty"`
}

// DecideOut decides the run's folder. With Out given, the run's files go
// directly into it; without, into a new numbered folder under Runs (or,
// resuming, the newest one). A folder that holds a run's files is refused
// unless the run resumes, and a finished run without a checkpoint cannot
// be resumed: both would write over a finished run. Nothing is written.
func DecideOut(cfg Config) (OutPlan, error) {
	var p OutPlan
	if cfg.Out != "" {
		p.Dir = cfg.Out
	} else {
		root := cfg.Runs
		if root == "" {
			root = DefaultRunsDir
		}
		if cfg.Resume {
			if d, err := NewestRun(root); err == nil {
				if !cfg.Restart || ownRun(d, cfg.JobID) {
					p.Dir = d
					p.Note = fmt.Sprintf("run folder: %s, the newest run in %s (give --out DIR to resume another)", d, root)
				}
			}
		}
		if p.Dir == "" {
			ns := RunNumbers(root)
			next := 1
			if len(ns) > 0 {
				next = ns[len(ns)-1] + 1
			}
			p.Dir, p.New = filepath.Join(root, RunName(next)), true
			p.Note = fmt.Sprintf("run folder: %s (a new one for each run; --out DIR names one)", p.Dir)
			switch {
			case cfg.Restart:
				p.Note = fmt.Sprintf("restart: no run of this job in %s to resume; %s", root, p.Note)
			case cfg.Resume:
				p.Note = fmt.Sprintf("resume: no run in %s to resume; %s", root, p.Note)
			}
			return p, nil
		}
	}
	have := runFilesIn(p.Dir)
	if len(have) == 0 {
		return p, nil
	}
	if !cfg.Resume {
		return p, setting.Errorf("{Out} %s already holds a run (%s): add {Resume} to continue it, or give another {Out} "+
			"(without {Out}, each run gets a new folder under %s)", p.Dir, strings.Join(have, ", "), DefaultRunsDir)
	}
	if finishedRun(have) && !checkpoint.Exists(filepath.Join(p.Dir, CheckpointDir)) {
		return p, setting.Errorf("{Resume}: %s holds a finished run (%s) that left no checkpoint to continue from "+
			"(it ran with {CkptInterval} 0, or they were removed); starting over would write over it. To train its weights further, "+
			"give {InitFrom} %s and another {Out}",
			p.Dir, strings.Join(have, ", "), filepath.Join(p.Dir, ModelFile))
	}
	return p, nil
}

// ownRun reports whether the run in dir is the job's own: its config.json
// names the job. A job without an id (a launcher that gave no secret) can
// only tell that an unfinished run might be its own.
func ownRun(dir, jobID string) bool {
	if jobID == "" {
		return !finishedRun(runFilesIn(dir))
	}
	b, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return false
	}
	var rc RunConfig
	return json.Unmarshal(b, &rc) == nil && rc.Train.JobID == jobID
}

// MakeOut creates the decided folder and checks that it can be written. A
// new numbered folder is claimed with an exclusive mkdir; where another run
// took it meanwhile, the next number is. It returns the folder, and
// whether it created it, which a run that fails before writing anything
// into it then removes.
func MakeOut(p OutPlan) (dir string, created bool, err error) {
	if p.New {
		if err := os.MkdirAll(filepath.Dir(p.Dir), 0o755); err != nil {
			return "", false, fmt.Errorf("run folder %s: %w", p.Dir, err)
		}
		root := filepath.Dir(p.Dir)
		for tries := 0; ; tries++ {
			err := os.Mkdir(p.Dir, 0o755)
			if err == nil {
				break
			}
			if !errors.Is(err, fs.ErrExist) || tries == 100 {
				return "", false, fmt.Errorf("run folder %s: %w", p.Dir, err)
			}
			ns := RunNumbers(root)
			p.Dir = filepath.Join(root, RunName(ns[len(ns)-1]+1))
		}
		created = true
	} else {
		_, statErr := os.Stat(p.Dir)
		if err := os.MkdirAll(p.Dir, 0o755); err != nil {
			return "", false, setting.Errorf("{Out} %s: %w", p.Dir, err)
		}
		created = errors.Is(statErr, fs.ErrNotExist)
	}
	f, err := os.CreateTemp(p.Dir, ".write-check-*")
	if err != nil {
		return p.Dir, created, setting.Errorf("{Out} %s is not writable: %w", p.Dir, err)
	}
	f.Close()
	return p.Dir, created, os.Remove(f.Name())
}

// NewestCheckpoint finds the checkpoint a resumed run continues from: the
// newest that verifies. Where checkpoints exist but none verifies, it
// refuses, listing why each failed: starting over would write new
// checkpoints over the damaged ones, which a user may still want to
// repair, and restart a long run from nothing. Temporary folders of an
// interrupted save are not checkpoints. With no checkpoint at all, dir is "".
func NewestCheckpoint(root string) (dir string, m *checkpoint.Manifest, skipped []error, err error) {
	dir, m, skipped, err = checkpoint.Latest(root)
	if err != nil {
		return "", nil, nil, err
	}
	if dir == "" && len(skipped) > 0 {
		var b strings.Builder
		for _, e := range skipped {
			fmt.Fprintf(&b, "\n  - %v", e)
		}
		return "", nil, nil, setting.Errorf("{Resume}: %s holds checkpoints, but none verifies:%s\n"+
			"nothing was written; repair or remove them, or give another {Out} to start over", root, b.String())
	}
	return dir, m, skipped, nil
}
