package launch

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// envOf turns "K=V" pairs into a getenv function.
func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

func hasWarning(e Env, sub string) bool {
	for _, w := range e.Warnings {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

func TestFromEnvSources(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		name    string
		env     []string
		want    Env    // Warnings not compared
		warn    string // a warning that must be present ("" none at all)
		derived string // the id the secret must be derived from
	}{
		{name: "single", env: nil,
			want: Env{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", Source: SourceSingle}},
		{name: "fleet run",
			env: []string{"RANK=3", "LOCAL_RANK=1", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=1",
				"MASTER_ADDR=10.1.2.3", "MASTER_PORT=29500", "TORCHELASTIC_RESTART_COUNT=2", "FLEET_RUN=1",
				"FLEET_JOB_SECRET=" + secret},
			want: Env{Rank: 3, LocalRank: 1, WorldSize: 4, LocalWorldSize: 2, NodeRank: 1, MasterAddr: "10.1.2.3",
				MasterPort: 29500, RestartCount: 2, Secret: secret, Source: SourceFleetRun}},
		{name: "torchrun with a run id",
			env: []string{"RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4", "GROUP_RANK=1",
				"MASTER_ADDR=head", "MASTER_PORT=1234", "TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_RUN_ID=job-77"},
			want: Env{Rank: 5, LocalRank: 1, WorldSize: 8, LocalWorldSize: 4, NodeRank: 1, MasterAddr: "head",
				MasterPort: 1234, Source: SourceTorchrun},
			warn: "derived from TORCHELASTIC_RUN_ID", derived: "torchrun/job-77"},
		{name: "torchrun default run id",
			env: []string{"RANK=2", "LOCAL_RANK=2", "WORLD_SIZE=4", "LOCAL_WORLD_SIZE=4",
				"MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=none"},
			want: Env{Rank: 2, LocalRank: 2, WorldSize: 4, LocalWorldSize: 4, NodeRank: 0, MasterAddr: "127.0.0.1",
				MasterPort: 29500, Source: SourceTorchrun},
			warn: "cannot refuse strangers"},
		{name: "torchrun world of one",
			env:  []string{"RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1", "LOCAL_WORLD_SIZE=1"},
			want: Env{WorldSize: 1, LocalWorldSize: 1, Source: SourceTorchrun}},
		{name: "slurm",
			env: []string{"SLURM_PROCID=5", "SLURM_LOCALID=1", "SLURM_NTASKS=8", "SLURM_NODEID=1",
				"SLURM_STEP_TASKS_PER_NODE=4(x2)", "SLURM_TASKS_PER_NODE=1(x2)", "SLURM_JOB_NODELIST=node[01-04,07],gpu5",
				"SLURM_JOB_ID=123456", "SLURM_STEP_ID=0", "SLURM_RESTART_COUNT=1"},
			want: Env{Rank: 5, LocalRank: 1, WorldSize: 8, LocalWorldSize: 4, NodeRank: 1, MasterAddr: "node01",
				MasterPort: 15456, RestartCount: 1, Source: SourceSlurm},
			warn: "derived from SLURM_JOB_ID", derived: "slurm/123456.0"},
		{name: "slurm uneven nodes, step node list, second step",
			env: []string{"SLURM_PROCID=2", "SLURM_LOCALID=0", "SLURM_NTASKS=3", "SLURM_NODEID=1",
				"SLURM_TASKS_PER_NODE=2,1", "SLURM_JOB_NODELIST=a[1-9]", "SLURM_STEP_NODELIST=a[3,5]",
				"SLURM_JOB_ID=41999", "SLURM_STEP_ID=2", "FLEET_JOB_SECRET=" + secret},
			want: Env{Rank: 2, WorldSize: 3, LocalWorldSize: 1, NodeRank: 1, MasterAddr: "a3",
				MasterPort: 12000 + (1999+2000)%20000, Secret: secret, Source: SourceSlurm}},
		{name: "slurm with MASTER_ADDR and MASTER_PORT",
			env: []string{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NTASKS_PER_NODE=1", "SLURM_STEP_ID=0",
				"SLURM_JOB_NODELIST=n[1-2]", "MASTER_ADDR=n2-ib", "MASTER_PORT=4000", "SLURM_JOB_ID=9"},
			want: Env{WorldSize: 2, LocalWorldSize: 1, MasterAddr: "n2-ib", MasterPort: 4000, Source: SourceSlurm},
			warn: "derived from SLURM_JOB_ID", derived: "slurm/9.0"},
		{name: "slurm batch script, not srun",
			env: []string{"SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NTASKS=4", "SLURM_NODEID=0",
				"SLURM_TASKS_PER_NODE=4", "SLURM_JOB_NODELIST=gpu7", "SLURM_JOB_ID=5", "FLEET_JOB_SECRET=" + secret},
			want: Env{WorldSize: 4, LocalWorldSize: 4, MasterAddr: "gpu7", MasterPort: 12005, Secret: secret, Source: SourceSlurm},
			warn: "not started by srun"},
		{name: "pytorchjob, training-operator v1",
			env: []string{"MASTER_ADDR=job-master-0", "MASTER_PORT=23456", "WORLD_SIZE=3", "RANK=2",
				"PET_NPROC_PER_NODE=auto", "PET_NODE_RANK=2", "PET_NNODES=3", "PYTHONUNBUFFERED=0"},
			want: Env{Rank: 2, WorldSize: 3, LocalWorldSize: 1, NodeRank: 2, MasterAddr: "job-master-0",
				MasterPort: 23456, Source: SourceKubeflow},
			warn: "no secret"},
		{name: "pytorchjob, old operator",
			env: []string{"MASTER_ADDR=localhost", "MASTER_PORT=23456", "WORLD_SIZE=2", "RANK=0", "FLEET_JOB_SECRET=" + secret},
			want: Env{WorldSize: 2, LocalWorldSize: 1, MasterAddr: "localhost", MasterPort: 23456, Secret: secret,
				Source: SourceKubeflow}},
		{name: "trainjob, trainer v2",
			env: []string{"PET_NNODES=4", "PET_NPROC_PER_NODE=1", "PET_NODE_RANK=3",
				"PET_MASTER_ADDR=job-node-0-0.job", "PET_MASTER_PORT=29400", "FLEET_JOB_SECRET=" + secret},
			want: Env{Rank: 3, WorldSize: 4, LocalWorldSize: 1, NodeRank: 3, MasterAddr: "job-node-0-0.job",
				MasterPort: 29400, Secret: secret, Source: SourceKubeflow}},
		{name: "trainjob, nproc auto",
			env: []string{"PET_NNODES=2", "PET_NPROC_PER_NODE=auto", "PET_NODE_RANK=0",
				"PET_MASTER_ADDR=m", "PET_MASTER_PORT=29400", "FLEET_JOB_SECRET=" + secret},
			want: Env{WorldSize: 2, LocalWorldSize: 1, MasterAddr: "m", MasterPort: 29400, Secret: secret,
				Source: SourceKubeflow},
			warn: "fleet run --nproc-per-node auto"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := FromEnv(envOf(c.env...))
			if err != nil {
				t.Fatal(err)
			}
			if c.derived != "" {
				src, id, _ := strings.Cut(c.derived, "/")
				c.want.Secret = DeriveSecret(src, id)
				if len(e.Secret) != 64 {
					t.Errorf("derived secret %q is not 32 bytes in hex", e.Secret)
				}
			}
			got := e
			got.Warnings = nil
			if got.String() != c.want.String() || got.Secret != c.want.Secret || got.MasterAddr != c.want.MasterAddr ||
				got.MasterPort != c.want.MasterPort || got.Source != c.want.Source || got.NodeRank != c.want.NodeRank {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
			if c.warn == "" && len(e.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", e.Warnings)
			}
			if c.warn != "" && !hasWarning(e, c.warn) {
				t.Errorf("warnings %q lack %q", e.Warnings, c.warn)
			}
			for _, w := range e.Warnings {
				if e.Secret != "" && strings.Contains(w, e.Secret) {
					t.Errorf("a warning shows the secret: %q", w)
				}
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	torch := func(extra ...string) []string {
		base := map[string]string{"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "h", "MASTER_PORT": "29500"}
		for _, kv := range extra {
			k, v, _ := strings.Cut(kv, "=")
			base[k] = v
		}
		var out []string
		for k, v := range base {
			if v != "-" {
				out = append(out, k+"="+v)
			}
		}
		return out
	}
	slurm := func(extra ...string) []string {
		return append([]string{"SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_NTASKS=2", "SLURM_NODEID=0",
			"SLURM_TASKS_PER_NODE=2", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0"}, extra...)
	}
	for _, c := range []struct {
		name string
		env  []string
		want string
	}{
		{"rank not below world", torch("RANK=2"), "RANK=2 is not below WORLD_SIZE=2"},
		{"rank not an integer", torch("RANK=one"), `RANK="one" is not an integer`},
		{"negative rank", torch("RANK=-1"), "RANK=-1: must be at least 0"},
		{"world zero", torch("WORLD_SIZE=0"), "WORLD_SIZE=0: must be at least 1"},
		{"no world size", torch("WORLD_SIZE=-"), "WORLD_SIZE is not set"},
		{"no local world size", torch("LOCAL_WORLD_SIZE=-"), "LOCAL_WORLD_SIZE is not set"},
		{"local rank not below local world", torch("LOCAL_RANK=2"), "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
		{"local world above world", torch("LOCAL_WORLD_SIZE=3", "LOCAL_RANK=0"), "LOCAL_WORLD_SIZE=3 exceeds WORLD_SIZE=2"},
		{"no master addr", torch("MASTER_ADDR=-"), "MASTER_ADDR is not set"},
		{"no master port", torch("MASTER_PORT=-"), "MASTER_PORT is not set"},
		{"port out of range", torch("MASTER_PORT=70000"), "MASTER_PORT=70000 is not a TCP port"},
		{"bad port", torch("MASTER_PORT=http"), `MASTER_PORT="http" is not an integer`},
		{"bad restart count", torch("TORCHELASTIC_RESTART_COUNT=x"), "TORCHELASTIC_RESTART_COUNT"},
		{"bad group rank", torch("GROUP_RANK=-3"), "GROUP_RANK=-3"},
		{"slurm bad ntasks", slurm("SLURM_NTASKS=abc"), `SLURM_NTASKS="abc" is not an integer`},
		{"slurm rank not below", slurm("SLURM_PROCID=2"), "SLURM_PROCID=2 is not below SLURM_NTASKS=2"},
		{"slurm bad node list", slurm("SLURM_JOB_NODELIST=n[1-"), "SLURM_JOB_NODELIST"},
		{"slurm no node list", []string{"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=7", "SLURM_STEP_ID=0"}, "SLURM_JOB_NODELIST is not set"},
		{"slurm node beyond list", slurm("SLURM_NODEID=2", "SLURM_TASKS_PER_NODE=1,1", "SLURM_LOCALID=0"), "SLURM_NODEID=2"},
		{"slurm bad tasks per node", slurm("SLURM_STEP_TASKS_PER_NODE=2(x)"), "SLURM_STEP_TASKS_PER_NODE"},
		{"slurm local id too big", slurm("SLURM_LOCALID=2"), "SLURM_LOCALID=2 is not below SLURM_TASKS_PER_NODE=2"},
		{"slurm no port source", slurm("SLURM_JOB_ID="), "SLURM_JOB_ID is not set"},
		{"slurm bad job id", slurm("SLURM_JOB_ID=x"), `SLURM_JOB_ID="x"`},
		{"pytorchjob, launcher expected", []string{"RANK=0", "WORLD_SIZE=8", "MASTER_ADDR=m", "MASTER_PORT=1", "PET_NPROC_PER_NODE=4"}, "PET_NPROC_PER_NODE=4"},
		{"pytorchjob, bad nproc", []string{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=m", "MASTER_PORT=1", "PET_NPROC_PER_NODE=many"}, "PET_NPROC_PER_NODE"},
		{"pytorchjob, elastic", []string{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=m", "MASTER_PORT=1", "PET_NNODES=1:4"}, `PET_NNODES="1:4"`},
		{"pytorchjob, no rank", []string{"WORLD_SIZE=2", "MASTER_ADDR=m", "MASTER_PORT=1"}, "RANK is not set"},
		{"pytorchjob, no port", []string{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=m"}, "MASTER_PORT is not set"},
		{"trainjob, rank not below", []string{"PET_NNODES=2", "PET_NODE_RANK=2", "PET_MASTER_ADDR=m", "PET_MASTER_PORT=1"}, "PET_NODE_RANK=2 is not below PET_NNODES=2"},
		{"trainjob, no master", []string{"PET_NNODES=2", "PET_NODE_RANK=1", "PET_MASTER_PORT=1"}, "PET_MASTER_ADDR is not set"},
	} {
		_, err := FromEnv(envOf(c.env...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestFromEnvRunRoundTrip builds the environments Run gives its processes
// for random job shapes and reads them back.
func TestFromEnvRunRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 200 {
		o := Options{NProcPerNode: 1 + rng.IntN(8), NNodes: 1 + rng.IntN(5), MaxRestarts: rng.IntN(3),
			MasterAddr: "10.0.0." + strconv.Itoa(rng.IntN(255)), Secret: strconv.FormatUint(rng.Uint64(), 16),
			Env: []string{"RANK=99", "PATH=/bin", "GOMAXPROCS=3", "FLEET_JOB_SECRET=stale"}}
		o.NodeRank = rng.IntN(o.NNodes)
		s := newSupervisor(o)
		local, restart, port := rng.IntN(o.NProcPerNode), rng.IntN(4), 1+rng.IntN(65535)
		env := s.childEnv(local, restart, port)
		e, err := FromEnv(envOf(env...))
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		want := Env{Rank: o.NodeRank*o.NProcPerNode + local, LocalRank: local, WorldSize: o.NNodes * o.NProcPerNode,
			LocalWorldSize: o.NProcPerNode, NodeRank: o.NodeRank, MasterAddr: o.MasterAddr, MasterPort: port,
			RestartCount: restart, Secret: o.Secret, Source: SourceFleetRun}
		if e.String() != want.String() || e.Secret != want.Secret || e.MasterPort != port || len(e.Warnings) > 0 {
			t.Fatalf("got %+v\nwant %+v", e, want)
		}
		if envOf(env...)("GOMAXPROCS") != "3" || envOf(env...)("PATH") != "/bin" {
			t.Fatalf("inherited variables lost: %q", env)
		}
	}
}

func TestSlurmPort(t *testing.T) {
	seen := map[int]bool{}
	for job := 1000; job < 1100; job++ {
		for step := range 3 {
			p := SlurmPort(job, step)
			if p < 12000 || p >= 32000 {
				t.Fatalf("SlurmPort(%d, %d) = %d, outside [12000, 32000)", job, step, p)
			}
			if seen[p] {
				t.Fatalf("SlurmPort(%d, %d) = %d again", job, step, p)
			}
			seen[p] = true
		}
	}
	if SlurmPort(123456, 0) != 15456 || SlurmPort(1<<40, 1<<40) < 12000 {
		t.Error("SlurmPort's formula changed")
	}
}
