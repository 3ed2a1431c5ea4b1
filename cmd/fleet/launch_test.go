package main

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/launch"
)

func TestRunCmd(t *testing.T) {
	var out bytes.Buffer
	err := runCmd([]string{"--nproc-per-node", "3", "--max-restarts", "0", "--",
		"sh", "-c", `echo "r=$RANK w=$WORLD_SIZE l=$LOCAL_RANK n=$GROUP_RANK s=${#FLEET_JOB_SECRET}"; echo "e$RANK" >&2`}, &out, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"[rank 0] r=0 w=3 l=0 n=0 s=64", "[rank 1] r=1 w=3 l=1 n=0 s=64",
		"[rank 2] r=2 w=3 l=2 n=0 s=64", "[rank 2] e2", "fleet run: starting 3 processes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// Without "--", flags end at the command.
	out.Reset()
	if err := runCmd([]string{"--nproc-per-node=2", "sh", "-c", "exit $((RANK * 4))"}, &out, &out); err == nil {
		t.Fatalf("a failing rank gave no error:\n%s", out.String())
	} else {
		var ec interface{ ExitCode() int }
		var ee *launch.ExitError
		if !errors.As(err, &ee) || !errors.As(err, &ec) || ee.Rank != 1 || ec.ExitCode() != 4 {
			t.Errorf("err = %#v, want rank 1 with status 4", err)
		}
		if !strings.Contains(out.String(), "rank 1 (pid") || !strings.Contains(out.String(), "exited with status 4") {
			t.Errorf("no line names the failed rank:\n%s", out.String())
		}
	}
}

func TestRunCmdKubeflowDefaults(t *testing.T) {
	t.Setenv("PET_NPROC_PER_NODE", "2")
	t.Setenv("PET_NNODES", "1")
	t.Setenv("PET_NODE_RANK", "0")
	var out bytes.Buffer
	if err := runCmd([]string{"sh", "-c", "echo ws=$WORLD_SIZE"}, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if strings.Count(out.String(), "ws=2") != 2 {
		t.Errorf("PET_NPROC_PER_NODE=2 did not start 2 processes:\n%s", out.String())
	}

	t.Setenv("PET_NNODES", "1:4")
	if err := runCmd([]string{"true"}, &out, &out); err == nil || !strings.Contains(err.Error(), "PET_NNODES") {
		t.Errorf("elastic PET_NNODES: err = %v", err)
	}
}

func TestRunCmdUsage(t *testing.T) {
	t.Setenv(launch.EnvSecret, "")
	for _, c := range []struct {
		args []string
		want string // in the error or the usage output; "" for errUsage
	}{
		{nil, ""},
		{[]string{"--"}, ""},
		{[]string{"--nproc-per-node", "0", "true"}, ""},
		{[]string{"--nproc-per-node", "many", "true"}, ""},
		{[]string{"--bogus", "true"}, ""},
		{[]string{"--nnodes", "2", "--master-addr", "h", "true"}, launch.EnvSecret},
		{[]string{"--nnodes", "2", "true"}, "--master-addr is required"},
		{[]string{"--nnodes", "2", "--node-rank", "5", "--master-addr", "h", "true"}, "--node-rank 5"},
	} {
		var out bytes.Buffer
		err := runCmd(c.args, &out, &out)
		if c.want == "" {
			if !errors.Is(err, errUsage) {
				t.Errorf("%q: err = %v, want a usage error", c.args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(setting.Message(err, flagName), c.want) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestNprocPerNode(t *testing.T) {
	env := func(cvd string) func(string) string {
		return func(k string) string {
			if k == "CUDA_VISIBLE_DEVICES" {
				return cvd
			}
			return ""
		}
	}
	devs := func(string) ([]string, error) {
		return []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps"}, nil
	}
	none := func(string) ([]string, error) { return nil, nil }
	for _, c := range []struct {
		s, cvd string
		glob   func(string) ([]string, error)
		want   int
	}{
		{"4", "", none, 4},
		{"auto", "", devs, 3},
		{"auto", "", none, 1},
		{"auto", "0,1", devs, 2},
		{"gpu", "GPU-1f2e,GPU-3a4b,GPU-77aa,GPU-0c0d", none, 4},
		{"auto", "-1", devs, 1},
		{"auto", "0,-1,1", devs, 1},
	} {
		got, err := nprocPerNode(c.s, env(c.cvd), c.glob)
		if err != nil || got != c.want {
			t.Errorf("nprocPerNode(%q) with CUDA_VISIBLE_DEVICES=%q = %d, %v; want %d", c.s, c.cvd, got, err, c.want)
		}
	}
	for _, s := range []string{"0", "-2", "x", ""} {
		if _, err := nprocPerNode(s, env(""), none); err == nil {
			t.Errorf("nprocPerNode(%q) accepted", s)
		}
	}
}

func TestResolveCommand(t *testing.T) {
	self := func() (string, error) { return "/opt/bin/fleet", nil }
	for _, c := range []struct{ in, want []string }{
		{[]string{"train", "--lr", "1e-3"}, []string{"/opt/bin/fleet", "train", "--lr", "1e-3"}},
		{[]string{"fleet", "eval", "--out", "o"}, []string{"/opt/bin/fleet", "eval", "--out", "o"}},
		{[]string{"./train", "x"}, []string{"./train", "x"}},
		{[]string{"python3", "train.py"}, []string{"python3", "train.py"}},
	} {
		got, err := resolveCommand(c.in, self)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("resolveCommand(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := resolveCommand([]string{"train"}, func() (string, error) { return "", os.ErrNotExist }); err == nil {
		t.Error("no error when the binary cannot be found")
	}
}
