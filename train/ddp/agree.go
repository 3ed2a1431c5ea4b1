package ddp

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	fcpu "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/train/config"
)

// Keys of the job's store through which the ranks agree before step 1.
const (
	keyOut      = "fleet/out"            // rank 0's config.OutPlan
	keySettings = "fleet/settings/"      // + rank: a rank's settings, or its failure
	keyRead     = "fleet/settings-read/" // + rank: the rank has read every rank's settings
)

// ShareOut decides the run's folder on rank 0 and hands the decision to
// every other rank, before any rank writes: in a data-parallel job only
// rank 0 looks at --out (the ranks of several nodes may not even share
// it), and a refusal fails the whole job. A world of one decides alone.
// For a bf16 run on the CPU (cpuBF16) whose Config.CPUBF16 is auto, the
// plan also carries rank 0's choice of the CPU's BF16 product, so every
// rank runs the same one.
func ShareOut(store *dist.Store, cfg config.Config, cpuBF16 bool) (config.OutPlan, error) {
	if cfg.Rank == 0 {
		p, err := config.DecideOut(cfg)
		if cpuBF16 && cfg.CPUBF16Auto() {
			p.CPUBF16, p.CPUBF16How = fcpu.BF16Product() // timed once, for every rank
		}
		if store == nil {
			return p, err
		}
		if err != nil {
			p.Err = setting.Portable(err) // the other ranks name settings as this one does
		}
		b, _ := json.Marshal(p)
		if serr := store.Set(keyOut, b); serr != nil && err == nil {
			err = fmt.Errorf("dist: telling the ranks the run folder: %w", serr)
		}
		return p, err
	}
	b, err := store.Get(keyOut)
	if err != nil {
		return config.OutPlan{}, fmt.Errorf("dist: waiting for rank 0 to decide the run folder: %w", err)
	}
	var p config.OutPlan
	if err := json.Unmarshal(b, &p); err != nil {
		return config.OutPlan{}, fmt.Errorf("dist: rank 0's run folder: %w", err)
	}
	if p.Err != "" {
		return p, setting.Errorf("rank 0 refused the run: " + p.Err)
	}
	return p, nil
}

// rankSettings is what a rank posts: its settings, or why it failed
// before it had them (a setting.Errorf format: setting.Portable).
type rankSettings struct {
	Settings []config.Recorded `json:"settings,omitempty"`
	Err      string            `json:"err,omitempty"`
}

// AgreeSettings posts this rank's settings and compares every rank's with
// rank 0's. Any difference, or any rank that failed before it could post,
// fails every rank with the same message, naming each setting:
// ranks started by hand with different flags would otherwise train apart
// (or wait forever in collectives that do not line up) and exit 0.
func AgreeSettings(store *dist.Store, rank int, mine []config.Recorded) error {
	b, _ := json.Marshal(rankSettings{Settings: mine})
	if err := store.Set(keySettings+strconv.Itoa(rank), b); err != nil {
		return fmt.Errorf("dist: posting this rank's settings: %w", err)
	}
	world := store.World()
	all := make([]rankSettings, world)
	var failed []string
	for q := 0; q < world; q++ {
		b, err := store.Get(keySettings + strconv.Itoa(q))
		if err != nil {
			return fmt.Errorf("dist: waiting for rank %d's settings: %w", q, err)
		}
		if err := json.Unmarshal(b, &all[q]); err != nil {
			return fmt.Errorf("dist: rank %d's settings: %w", q, err)
		}
		if all[q].Err != "" {
			failed = append(failed, fmt.Sprintf("rank %d: ", q)+all[q].Err)
		}
	}
	markRead(store, rank)
	var err error
	if len(failed) > 0 {
		err = setting.Errorf("the job cannot start: " + strings.Join(failed, "; "))
	} else {
		var diff []string
		for q := 1; q < world; q++ {
			diff = append(diff, config.SettingsDiff(all[0].Settings, all[q].Settings, q)...)
		}
		if len(diff) > 0 {
			err = setting.Errorf("the ranks' settings differ, so their weights would drift apart:\n  - " +
				strings.Join(diff, "\n  - ") + "\n" +
				"start every rank with the same settings (fleet run, torchrun and srun pass each process the same command)")
		}
	}
	if rank == 0 {
		waitRead(store)
	}
	return err
}

// PostFailure tells the other ranks, waiting in AgreeSettings, that this
// rank failed before it could post its settings. Rank 0, whose store the
// others use, waits for them to read it before it goes.
func PostFailure(store *dist.Store, rank int, cause error) {
	key := keySettings + strconv.Itoa(rank)
	if _, err := store.GetTimeout(key, 0); err == nil {
		return // posted already: the settings, or a failure
	}
	b, _ := json.Marshal(rankSettings{Err: setting.Portable(cause)})
	if store.Set(key, b) != nil {
		return
	}
	markRead(store, rank)
	if rank == 0 {
		waitRead(store)
	}
}

func markRead(store *dist.Store, rank int) { store.Set(keyRead+strconv.Itoa(rank), []byte{1}) }

// waitRead waits until every rank has read every rank's settings (or
// failed), so that rank 0's store outlives their reads.
func waitRead(store *dist.Store) {
	keys := make([]string, store.World())
	for q := range keys {
		keys[q] = keyRead + strconv.Itoa(q)
	}
	// A rank that never reads has died or hangs: the job fails anyway,
	// and the wait is bounded by the store's timeout.
	_ = store.Wait(keys...)
}
