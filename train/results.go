package train

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
)

// Files a run writes in its output folder (config declares them, with the
// rules of run folders).
const (
	ConfigFile    = config.ConfigFile
	TokenizerFile = config.TokenizerFile
	MetricsFile   = config.MetricsFile
	SummaryFile   = config.SummaryFile
	ModelFile     = config.ModelFile
	BestFile      = config.BestFile
	CheckpointDir = config.CheckpointDir
	PipelineFile  = config.PipelineFile
)

// Summary is summary.json.
type Summary struct {
	// Simulated says the run was on a simulated GPU (--device sim:NAME):
	// its times are the host's, its losses mean nothing (0 here), and it
	// wrote no weights.
	//
	// Every figure is the job's. In a data-parallel run the losses are the
	// group's, as the log's are: the evaluations' means over the ranks,
	// and FinalTrainLoss the loss of the last log line (the ranks' mean
	// over its steps). The rates, times, shares and counts per step are
	// per rank, as the log's tok/s and ms/step are: the means over the
	// ranks of each rank's figure (tokens_per_sec times the world size is
	// the job's rate). The peaks (PeakMemBytes, UtilPeakPct) and
	// ElapsedSec are the largest rank's, MemTotalBytes the smallest
	// device's.
	Simulated      bool    `json:"simulated,omitempty"`
	BestValLoss    float64 `json:"best_val_loss"`
	FinalValLoss   float64 `json:"final_val_loss"`
	FinalTrainLoss float64 `json:"final_train_loss"`
	ValPerplexity  float64 `json:"val_perplexity"`
	// TokensPerSec is the median over optimizer steps (skipping the first
	// 5) of each step's tokens / its time, evaluation excluded.
	TokensPerSec float64 `json:"tokens_per_sec"`
	MsPerStep    float64 `json:"ms_per_step"`
	// DataWaitMs is the median over the same steps of the time each step
	// waited for data; DataWaitShare is the total wait over the total
	// step time.
	DataWaitMs    float64 `json:"data_wait_ms"`
	DataWaitShare float64 `json:"data_wait_share"`
	// MFU is model FLOPs utilisation at the median rate: FLOPsPerToken ×
	// TokensPerSec ÷ PeakFLOPs (the device's peak for the run's products:
	// a data-sheet figure for GPUs, measured on the CPU; 0 if unknown).
	MFU           float64 `json:"mfu"`
	FLOPsPerToken float64 `json:"flops_per_token"`
	PeakFLOPs     float64 `json:"peak_flops"`
	PeakSource    string  `json:"peak_source,omitempty"`
	// PhaseMs is the mean ms per step of each phase (PhaseNames) over the
	// measured steps; HostReadsPerStep the host's reads of device values
	// per step; CopiedBytesPerStep the host<->device bytes per step.
	PhaseMs            map[string]float64 `json:"phase_ms,omitempty"`
	HostReadsPerStep   float64            `json:"host_reads_per_step"`
	CopiedBytesPerStep float64            `json:"copied_bytes_per_step"`
	PeakMemBytes       int64              `json:"peak_mem_bytes"`
	// RankPhaseMs is, in a data-parallel run, each rank's own PhaseMs (the
	// mean above is over them), with the communication it overlapped
	// with backward as "comm_overlapped": where each process's step went.
	RankPhaseMs []map[string]float64 `json:"rank_phase_ms,omitempty"`
	// UtilMeanPct and UtilPeakPct are the device's utilisation sampled in
	// the background (the process's CPU use over its cores on the CPU).
	UtilMeanPct float64 `json:"util_mean_pct"`
	UtilPeakPct float64 `json:"util_peak_pct"`
	// HostBusyPct is, on the CPU, how busy all the machine's cores were
	// (every process's use).
	HostBusyPct float64 `json:"host_busy_pct,omitempty"`
	// TelemetryOverheadPct is what the step telemetry costs per step, in
	// percent of the median step, measured at the end of the run.
	TelemetryOverheadPct float64 `json:"telemetry_overhead_pct"`
	MemTotalBytes        int64   `json:"mem_total_bytes,omitempty"`
	Steps                int     `json:"steps"`
	Device               string  `json:"device"`
	NumParams            int     `json:"num_params"`
	Data                 string  `json:"data"`
	TrainTokens          int     `json:"train_tokens"`
	ValTokens            int     `json:"val_tokens"`
	ElapsedSec           float64 `json:"elapsed_sec"`
	Config               Config  `json:"config"`
	Model                model.Config
}

// Metric is one line of metrics.jsonl. Fields that are unknown at an event
// are left out.
type Metric struct {
	Step         int      `json:"step"`
	TrainLoss    *float64 `json:"train_loss,omitempty"`
	ValLoss      *float64 `json:"val_loss,omitempty"`
	Perplexity   *float64 `json:"val_perplexity,omitempty"`
	LR           *float64 `json:"lr,omitempty"`
	MsPerStep    *float64 `json:"ms_per_step,omitempty"`
	TokensPerSec *float64 `json:"tokens_per_sec,omitempty"`
	// DataWaitMs is the mean time per step the trainer waited for its
	// batches (drawing them from the loader's queue into the staging
	// memory) over the log interval.
	DataWaitMs *float64 `json:"data_wait_ms,omitempty"`
	// MFU is model FLOPs utilisation: the model's training FLOPs per token
	// × tokens/s ÷ the device's peak.
	MFU       *float64 `json:"mfu,omitempty"`
	GradNorm  *float64 `json:"grad_norm,omitempty"`  // before clipping, last step
	LossScale *float64 `json:"loss_scale,omitempty"` // fp16's loss scale
	// Mean ms per step of each phase over the log interval (PhaseNames).
	H2DMs       *float64 `json:"h2d_ms,omitempty"`
	ForwardMs   *float64 `json:"forward_ms,omitempty"`
	BackwardMs  *float64 `json:"backward_ms,omitempty"`
	CommMs      *float64 `json:"comm_ms,omitempty"`
	OptimizerMs *float64 `json:"optimizer_ms,omitempty"`
	CkptLogMs   *float64 `json:"ckpt_log_ms,omitempty"`
	// Util is the device's utilisation in percent, sampled in the
	// background over the interval; MemBytes the device memory in use and
	// MemPeakBytes the run's peak so far.
	Util         *float64 `json:"util,omitempty"`
	MemBytes     *float64 `json:"mem_bytes,omitempty"`
	MemPeakBytes *float64 `json:"mem_peak_bytes,omitempty"`
}

// fillMetric adds the telemetry of the last n steps to m.
func (r *run) fillMetric(m *Metric, n int) {
	if r.tel == nil || n == 0 {
		return
	}
	w := r.tel.takeWindow()
	for p, dst := range [nPhases]**float64{phH2D: &m.H2DMs, phForward: &m.ForwardMs, phBackward: &m.BackwardMs,
		phComm: &m.CommMs, phOptimizer: &m.OptimizerMs, phCkptLog: &m.CkptLogMs} {
		if dst != nil {
			v := w[p] / float64(n)
			*dst = &v
		}
	}
	st := tensor.MemStats(r.dev)
	mem, peak := float64(st.Allocated), float64(r.peakMem())
	m.MemBytes, m.MemPeakBytes = &mem, &peak
	if u, ok := r.utilisation(); ok {
		m.Util = &u
	}
}

// Result is a finished run.
type Result struct {
	Dir       string // the run's folder
	Model     *model.GPT
	Tokenizer Tokenizer
	Summary   Summary
}

// jobFigure is a figure each rank measures for itself, and how the job's
// is made of the ranks' (jobSummary).
type jobFigure struct {
	v   *float64
	how int
}

const (
	meanOfRanks = iota
	largestRank
	smallestRank
)

// jobSummary makes the figures of sum that each rank measured for itself
// the job's (see Summary): the final train loss is the last log line's,
// and the others are combined over the group's ranks, gathered from each.
// Every rank of a group calls it, after its last step; a process alone
// keeps its own figures.
func (r *run) jobSummary(sum *Summary) error {
	sum.FinalTrainLoss = r.stats.loggedLoss
	if r.simulated {
		sum.FinalTrainLoss = 0 // no loss: see Summary.Simulated
	}
	peak, total := float64(sum.PeakMemBytes), float64(sum.MemTotalBytes)
	phases := make([]float64, nPhases)
	figs := []jobFigure{
		{&sum.TokensPerSec, meanOfRanks}, {&sum.MsPerStep, meanOfRanks}, {&sum.DataWaitMs, meanOfRanks},
		{&sum.DataWaitShare, meanOfRanks}, {&sum.HostReadsPerStep, meanOfRanks}, {&sum.CopiedBytesPerStep, meanOfRanks},
		{&sum.TelemetryOverheadPct, meanOfRanks}, {&sum.UtilMeanPct, meanOfRanks}, {&sum.HostBusyPct, meanOfRanks},
		{&sum.UtilPeakPct, largestRank}, {&peak, largestRank}, {&total, smallestRank}, {&sum.ElapsedSec, largestRank},
		// telemetry.json's
		{&r.perf.meanStepMs, meanOfRanks}, {&r.perf.commOverlappedMs, meanOfRanks},
	}
	overlapped, p0 := len(figs)-1, len(figs)
	for p := range phases {
		phases[p] = sum.PhaseMs[PhaseNames[p]]
		figs = append(figs, jobFigure{&phases[p], meanOfRanks})
	}
	mine := make([]float64, len(figs))
	for i, f := range figs {
		mine[i] = *f.v
	}
	all, err := r.group().Gather(mine)
	if err != nil {
		return fmt.Errorf("the run's summary: %w", err)
	}
	for i, f := range figs {
		v := all[0][i]
		for _, rank := range all[1:] {
			switch f.how {
			case meanOfRanks:
				v += rank[i]
			case largestRank:
				v = max(v, rank[i])
			case smallestRank:
				v = min(v, rank[i])
			}
		}
		if f.how == meanOfRanks {
			v /= float64(len(all))
		}
		*f.v = v
	}
	sum.PeakMemBytes, sum.MemTotalBytes = int64(math.Round(peak)), int64(math.Round(total))
	if sum.PhaseMs != nil {
		for p, ms := range phases {
			sum.PhaseMs[PhaseNames[p]] = ms
		}
		if len(all) > 1 {
			for _, rank := range all {
				m := map[string]float64{"comm_overlapped": rank[overlapped]}
				for p := range phases {
					m[PhaseNames[p]] = rank[p0+p]
				}
				sum.RankPhaseMs = append(sum.RankPhaseMs, m)
			}
		}
	}
	if sum.PeakFLOPs > 0 {
		sum.MFU = sum.TokensPerSec * sum.FLOPsPerToken / sum.PeakFLOPs
	}
	return nil
}
