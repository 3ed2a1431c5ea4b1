//go:build unix

package launch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/testenv"
)

// The test binary is also the processes Run starts: TestMain runs a child
// behaviour when childVar names one, or Run itself when launcherVar is set.
const (
	childVar    = "FLEET_LAUNCH_TEST_CHILD"
	launcherVar = "FLEET_LAUNCH_TEST_LAUNCHER"
	dirVar      = "FLEET_LAUNCH_TEST_DIR"
)

func TestMain(m *testing.M) {
	if os.Getenv(launcherVar) != "" {
		// The processes must not be launchers in turn.
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, launcherVar+"=") {
				env = append(env, kv)
			}
		}
		err := Run(Options{NProcPerNode: 2, Command: []string{os.Args[0]}, Env: env, Grace: 10 * time.Second})
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			fmt.Fprintln(os.Stderr, "launcher:", err)
			os.Exit(ec.ExitCode())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "launcher:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if b := os.Getenv(childVar); b != "" {
		os.Exit(child(b))
	}
	os.Exit(m.Run())
}

// child runs one behaviour and returns its exit status.
func child(behaviour string) int {
	e, err := FromEnv(nil)
	if err != nil {
		fmt.Println("FromEnv:", err)
		return 90
	}
	dir := os.Getenv(dirVar)
	switch behaviour {
	case "env":
		fmt.Printf("source=%s rank=%d local=%d world=%d lws=%d node=%d master=%s restart=%d secret=%s gomaxprocs=%s\n",
			e.Source, e.Rank, e.LocalRank, e.WorldSize, e.LocalWorldSize, e.NodeRank, e.Master(), e.RestartCount,
			e.Secret, os.Getenv("GOMAXPROCS"))
		fmt.Fprintf(os.Stderr, "rank %d to stderr\n", e.Rank)
		return 0
	case "fail-first":
		fmt.Printf("attempt %d secret=%s\n", e.RestartCount, e.Secret)
		if e.Rank == 1 && e.RestartCount == 0 {
			fmt.Fprintln(os.Stderr, "failing on purpose")
			return 3
		}
		return 0
	case "always-fail":
		if e.Rank == 1 {
			return 7
		}
		time.Sleep(60 * time.Second) // stopped by the launcher's SIGTERM
		return 0
	case "slot1-fails":
		// The process on device slot 1 always fails; the others report
		// what they were given.
		if os.Getenv(EnvLocalDevice) == "1" {
			return 4
		}
		fmt.Printf("slot=%s local=%d world=%d elastic=%s restart=%d\n", os.Getenv(EnvLocalDevice), e.LocalRank, e.WorldSize, os.Getenv(EnvElastic), e.RestartCount)
		return 0
	case "stop-staggered":
		// The group agreed to stop: rank 0 exits at once, rank 1 a moment
		// later. No signal may reach rank 1 in between.
		if e.Rank == 0 {
			return ExitStopped
		}
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		select {
		case s := <-sigs:
			fmt.Printf("signalled: %v\n", s)
			return 1
		case <-time.After(1500 * time.Millisecond):
			fmt.Println("finished the step")
			return ExitStopped
		}
	case "hang":
		ready := filepath.Join(dir, "ready")
		if e.Rank == 0 {
			signal.Ignore(syscall.SIGTERM)
			fmt.Printf("pid=%d\n", os.Getpid())
			os.WriteFile(ready, nil, 0o644)
			time.Sleep(60 * time.Second) // only SIGKILL stops it
			return 0
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(ready); err == nil {
				break
			}
		}
		return 5
	case "term":
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		fmt.Println("ready")
		select {
		case s := <-sigs:
			// Count any more that follow: the launcher must pass one on, once.
			n := 1
			for t := time.After(300 * time.Millisecond); ; n++ {
				select {
				case <-sigs:
					continue
				case <-t:
				}
				break
			}
			fmt.Printf("got %v, %d signal(s)\n", s, n)
			return 0
		case <-time.After(30 * time.Second):
			fmt.Println("no signal came")
			return 9
		}
	case "lines":
		// Each line goes out in three writes, straight to the file
		// descriptor, so lines of different ranks would mix if the
		// launcher passed writes rather than lines.
		pad := strings.Repeat(strconv.Itoa(e.Rank), 3000)
		for i := range 150 {
			line := fmt.Sprintf("rank=%d line=%d %s end\n", e.Rank, i, pad)
			third := len(line) / 3
			os.Stdout.Write([]byte(line[:third]))
			os.Stdout.Write([]byte(line[third : 2*third]))
			os.Stdout.Write([]byte(line[2*third:]))
		}
		os.Stdout.Write([]byte("no newline at the end"))
		return 0
	}
	fmt.Println("unknown behaviour", behaviour)
	return 91
}

// runChildren runs Run with the test binary as the command.
func runChildren(t *testing.T, behaviour string, o Options) (string, error) {
	t.Helper()
	testenv.NeedSelfExec(t)
	var out testenv.SyncBuffer
	o.Command = []string{os.Args[0]}
	o.Env = append(os.Environ(), childVar+"="+behaviour, dirVar+"="+t.TempDir())
	o.Stdout, o.Stderr = &out, &out
	if o.Signals == nil {
		o.Signals = make(chan os.Signal)
	}
	err := Run(o)
	return out.String(), err
}

func TestRunEnv(t *testing.T) {
	out, err := runChildren(t, "env", Options{NProcPerNode: 3})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	re := regexp.MustCompile(`(?m)^\[rank (\d)\] source=fleet run rank=(\d) local=(\d) world=3 lws=3 node=0 master=127\.0\.0\.1:(\d+) restart=0 secret=([0-9a-f]{64}) gomaxprocs=(\d+)$`)
	m := re.FindAllStringSubmatch(out, -1)
	if len(m) != 3 {
		t.Fatalf("want 3 env lines, got %d:\n%s", len(m), out)
	}
	seen := map[string]bool{}
	for _, l := range m {
		if l[1] != l[2] || l[2] != l[3] {
			t.Errorf("prefix, RANK and LOCAL_RANK disagree: %q", l[0])
		}
		if l[4] != m[0][4] || l[5] != m[0][5] {
			t.Errorf("port or secret differs between ranks: %q", l[0])
		}
		if p, _ := strconv.Atoi(l[6]); p < 1 {
			t.Errorf("GOMAXPROCS %q", l[6])
		}
		seen[l[1]] = true
		if !strings.Contains(out, "[rank "+l[1]+"] rank "+l[1]+" to stderr\n") {
			t.Errorf("rank %s's stderr line is missing", l[1])
		}
	}
	if len(seen) != 3 {
		t.Errorf("ranks seen: %v", seen)
	}

	// A multi-node job: ranks continue from the node's first; the
	// secret and port are the ones given.
	out, err = runChildren(t, "env", Options{NProcPerNode: 2, NNodes: 3, NodeRank: 2, MasterAddr: "127.0.0.1",
		MasterPort: 4567, Secret: "shared-secret-from-the-environment"})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for local := range 2 {
		want := fmt.Sprintf("[rank %d] source=fleet run rank=%d local=%d world=6 lws=2 node=2 master=127.0.0.1:4567 restart=0 secret=shared-secret-from-the-environment",
			4+local, 4+local, local)
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestRunRestartsAfterFailure(t *testing.T) {
	out, err := runChildren(t, "fail-first", Options{NProcPerNode: 2, MaxRestarts: 1, Grace: 5 * time.Second})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"[rank 1] failing on purpose",
		"fleet run: rank 1 (pid ",
		"exited with status 3; stopping the other processes",
		"fleet run: restarting all 2 processes (restart 1 of 1)",
		"[rank 0] attempt 1 ",
		"[rank 1] attempt 1 ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	secrets := regexp.MustCompile(`secret=(\S+)`).FindAllStringSubmatch(out, -1)
	for _, s := range secrets {
		if s[1] != secrets[0][1] {
			t.Errorf("the secret changed across restarts: %q vs %q", s[1], secrets[0][1])
		}
	}
	if len(secrets) < 3 {
		t.Errorf("want at least 3 attempt lines, got %d", len(secrets))
	}
}

// TestRunShrinks: with MinNProc, the process that fails again after a
// restart (slot 1 of 3) is dropped and the other two go on as a group of
// 2, keeping their device slots (0 and 2) with local ranks 0 and 1; without
// MinNProc the group gives up when restarts run out; and MinNProc is
// refused outside [0, NProcPerNode] or across nodes.
func TestRunShrinks(t *testing.T) {
	out, err := runChildren(t, "slot1-fails", Options{NProcPerNode: 3, MinNProc: 2, MaxRestarts: 3, Grace: 5 * time.Second})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"fleet run: rank 1 (device slot 1) failed again after a restart: dropping it, 2 processes go on (--min-nproc 2)",
		"[rank 0] slot=0 local=0 world=2 elastic=1 restart=2",
		"[rank 1] slot=2 local=1 world=2 elastic=1 restart=2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := runChildren(t, "slot1-fails", Options{NProcPerNode: 2, MaxRestarts: 1, Grace: 5 * time.Second}); err == nil {
		t.Error("without --min-nproc the group succeeded though a process always fails")
	}
	for _, o := range []Options{{NProcPerNode: 2, MinNProc: 3}, {NProcPerNode: 2, MinNProc: -1}, {NProcPerNode: 2, MinNProc: 1, NNodes: 2, MasterAddr: "10.0.0.1"}} {
		o.Command = []string{"true"}
		if err := Run(o); err == nil || !strings.Contains(err.Error(), "MinNProc") {
			t.Errorf("%+v: %v, want a refusal naming MinNProc", o, err)
		}
	}
}

// TestRunStopAtStepBoundary: a process that exits with ExitStopped (its
// group agreed to stop after a step) is not a failure: Run leaves the
// others to finish the same step, restarts nothing and exits 75.
func TestRunStopAtStepBoundary(t *testing.T) {
	out, err := runChildren(t, "stop-staggered", Options{NProcPerNode: 2, MaxRestarts: 2, Grace: 20 * time.Second})
	var se *StoppedError
	if !errors.As(err, &se) || se.Rank != 0 || se.ExitCode() != ExitStopped {
		t.Fatalf("err = %v, want a *StoppedError for rank 0\n%s", err, out)
	}
	if !strings.Contains(out, "[rank 1] finished the step") || strings.Contains(out, "signalled") {
		t.Errorf("rank 1 was not left to finish its step:\n%s", out)
	}
	if n := strings.Count(out, "fleet run: starting 2 processes"); n != 1 {
		t.Errorf("%d starts, want 1 (a stop restarts nothing):\n%s", n, out)
	}
}

func TestRunGivesUp(t *testing.T) {
	start := time.Now()
	out, err := runChildren(t, "always-fail", Options{NProcPerNode: 3, MaxRestarts: 2, Grace: 5 * time.Second})
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("err = %v, want an *ExitError\n%s", err, out)
	}
	if ee.Rank != 1 || ee.Status != 7 || ee.Restarts != 2 || ee.ExitCode() != 7 {
		t.Errorf("got %+v", ee)
	}
	if got := err.Error(); got != "rank 1 exited with status 7 (after 2 restarts)" {
		t.Errorf("error %q", got)
	}
	if n := strings.Count(out, "fleet run: starting 3 processes"); n != 3 {
		t.Errorf("%d starts, want 3:\n%s", n, out)
	}
	if !strings.Contains(out, "no restarts left (--max-restarts 2)") {
		t.Errorf("no final line naming the failure:\n%s", out)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("took %v: the sleeping ranks were not stopped", time.Since(start))
	}
}

func TestRunKillsHangingProcess(t *testing.T) {
	start := time.Now()
	out, err := runChildren(t, "hang", Options{NProcPerNode: 2, Grace: 300 * time.Millisecond})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || ee.Status != 5 {
		t.Fatalf("err = %v, want rank 1 with status 5\n%s", err, out)
	}
	if !strings.Contains(out, "fleet run: rank 0 still running 300ms after being asked to stop: killing") {
		t.Errorf("the hanging rank was not killed:\n%s", out)
	}
	m := regexp.MustCompile(`\[rank 0\] pid=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no pid line:\n%s", out)
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("rank 0 (pid %d) still exists: %v", pid, err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestRunLinesWhole(t *testing.T) {
	out, err := runChildren(t, "lines", Options{NProcPerNode: 3})
	if err != nil {
		t.Fatalf("%v", err)
	}
	line := regexp.MustCompile(`^\[rank (\d)\] rank=(\d) line=(\d+) (\d+) end$`)
	count := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if strings.HasPrefix(l, "fleet run: ") {
			continue
		}
		if strings.HasSuffix(l, "] no newline at the end") {
			count["tail"]++
			continue
		}
		m := line.FindStringSubmatch(l)
		if m == nil || m[1] != m[2] || len(m[4]) != 3000 || strings.Trim(m[4], m[1]) != "" {
			t.Fatalf("mixed or unprefixed line: %.200q", l)
		}
		if n, _ := strconv.Atoi(m[3]); n != count[m[1]] {
			t.Fatalf("rank %s: line %d came after %d lines", m[1], n, count[m[1]])
		}
		count[m[1]]++
	}
	for r := range 3 {
		if count[strconv.Itoa(r)] != 150 {
			t.Errorf("rank %d: %d lines, want 150", r, count[strconv.Itoa(r)])
		}
	}
	if count["tail"] != 3 {
		t.Errorf("%d unterminated last lines, want 3", count["tail"])
	}
}

func TestLineWriterLongLines(t *testing.T) {
	var b bytes.Buffer
	lw := newLineWriter(&output{mu: new(sync.Mutex), w: &b}, "[rank 9] ")
	long := strings.Repeat("x", 2*maxLine+10)
	lw.Write([]byte("a\nb"))
	lw.Write([]byte(long))
	lw.Write([]byte("\nc"))
	lw.flush()
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []string{"a", "b" + long[:maxLine-1], long[maxLine-1 : 2*maxLine-1], long[2*maxLine-1:], "c"}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != "[rank 9] "+want[i] {
			t.Errorf("line %d: %.40q…, want %.40q…", i, got[i], "[rank 9] "+want[i])
		}
	}
}

// TestRunForwardsSIGTERM sends SIGTERM to a launcher process (the test
// binary running Run) and checks each of its processes got it once.
func TestRunForwardsSIGTERM(t *testing.T) {
	testenv.NeedSelfExec(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), launcherVar+"=1", childVar+"=term")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testenv.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var out []string
	ready := 0
	timeout := time.After(20 * time.Second)
	for ready < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("launcher ended early: %q\n%s", out, stderr.String())
			}
			out = append(out, l)
			if strings.HasSuffix(l, "] ready") {
				ready++
			}
		case <-timeout:
			t.Fatalf("the processes never got ready: %q\n%s", out, stderr.String())
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	for l := range lines {
		out = append(out, l)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("launcher exit: %v, want status %d\n%s", err, 128+int(syscall.SIGTERM), stderr.String())
	}
	all := strings.Join(out, "\n")
	for r := range 2 {
		if want := fmt.Sprintf("[rank %d] got terminated, 1 signal(s)", r); !strings.Contains(all, want) {
			t.Errorf("missing %q in\n%s\n%s", want, all, stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "fleet run: terminated: passing it on") {
		t.Errorf("the launcher did not say it forwarded the signal:\n%s", stderr.String())
	}
}

func TestRunOptionErrors(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{NProcPerNode: 1}, "no command"},
		{Options{NProcPerNode: 0, Command: []string{"true"}}, "NProcPerNode 0"},
		{Options{NProcPerNode: 1, NNodes: 2, MasterAddr: "h", Command: []string{"true"}}, EnvSecret + " must be set"},
		{Options{NProcPerNode: 1, NNodes: 2, Secret: "s", Command: []string{"true"}}, "MasterAddr is required"},
		{Options{NProcPerNode: 1, NNodes: 2, NodeRank: 2, Command: []string{"true"}}, "NodeRank 2"},
		{Options{NProcPerNode: 1, MaxRestarts: -1, Command: []string{"true"}}, "MaxRestarts -1"},
		{Options{NProcPerNode: 1, MasterPort: 65536, Command: []string{"true"}}, "MasterPort 65536"},
		{Options{NProcPerNode: 1, Command: []string{"/no/such/program-xyz"}}, "/no/such/program-xyz"},
	} {
		c.o.Stdout, c.o.Stderr = io.Discard, io.Discard
		c.o.Signals = make(chan os.Signal)
		if err := Run(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%+v) = %v, want an error with %q", c.o, err, c.want)
		}
	}
}

// TestRunSeparateStreams checks standard output and error stay apart.
func TestRunSeparateStreams(t *testing.T) {
	testenv.NeedSelfExec(t)
	var stdout, stderr testenv.SyncBuffer
	err := Run(Options{NProcPerNode: 2, Command: []string{os.Args[0]}, Env: append(os.Environ(), childVar+"=env"),
		Stdout: &stdout, Stderr: &stderr, Signals: make(chan os.Signal)})
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		e := fmt.Sprintf("[rank %d] rank %d to stderr\n", r, r)
		if !strings.Contains(stderr.String(), e) || strings.Contains(stdout.String(), e) {
			t.Errorf("%q should be on stderr only", e)
		}
		o := fmt.Sprintf("[rank %d] source=fleet run rank=%d ", r, r)
		if !strings.Contains(stdout.String(), o) || strings.Contains(stderr.String(), o) {
			t.Errorf("%q should be on stdout only", o)
		}
	}
	if !strings.HasPrefix(stderr.String(), "fleet run: starting 2 processes") {
		t.Errorf("the launcher's lines belong on stderr:\n%s", stderr.String())
	}
}
