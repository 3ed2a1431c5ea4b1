package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetml/fleet/monitor/nvml"
	"github.com/fleetml/fleet/monitor/nvml/nvmltest"
	"github.com/fleetml/fleet/monitor/sysstat"
)

func runSmi(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := smiCmd(args, &out, &errOut)
	if err != nil {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), err
}

// sleeper starts a child process to be listed by name, and stops it at the
// end of the test.
func sleeper(t *testing.T) (pid int, name string) {
	t.Helper()
	path, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep program to list")
	}
	cmd := exec.Command(path, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid, "sleep"
}

func TestSmiCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the CPU is read from /proc")
	}
	pid, name := sleeper(t)
	out, err := runSmi(t, "--cpu", "--name", name, "--sample", "100ms")
	if err != nil {
		t.Fatalf("smi: %v\n%s", err, out)
	}
	t.Logf("\n%s", out)
	st, err := sysstat.ReadCPUStat()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := sysstat.ReadMemInfo()
	wantLines := []string{
		`(?m)^No GPU shown: --cpu given$`,
		`(?m)^CPU\s+CORES\s+UTIL\s+MEMORY USED / TOTAL$`,
		fmt.Sprintf(`(?m)^all\s+%d\s+\d+%%\s+[\d.]+ / %s [MG]iB \(\d+%%\)$`, len(st.Cores), regexp.QuoteMeta(fmt.Sprintf("%.1f", float64(m.Total)/unitOf(m.Total)))),
		`(?m)^Cores \(utilisation over the last \d+ms\):$`,
		`(?m)^Processes \(sleep\):$`,
		`(?m)^\s+PID\s+NAME\s+STATE\s+THREADS\s+CPU\s+RSS\s+PEAK RSS$`,
		fmt.Sprintf(`(?m)^\s+%d\s+sleep\s+[SRD]\s+1\s+(\d+%%|-)\s+[\d.]+ [KM]iB\s+[\d.]+ [KM]iB$`, pid),
	}
	for _, c := range st.Cores {
		wantLines = append(wantLines, fmt.Sprintf(`(?m)^ .*\bcpu%d\s+\d+%%`, c.ID))
	}
	for _, re := range wantLines {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %s", re)
		}
	}
}

func unitOf(total uint64) float64 {
	if total >= 10<<30 {
		return 1 << 30
	}
	return 1 << 20
}

// Without --cpu: the GPUs where NVML works, else the CPU and NVML's error.
func TestSmiDefault(t *testing.T) {
	initErr := nvml.Init()
	n := 0
	if initErr == nil {
		n, initErr = nvml.DeviceCount()
		if initErr == nil && n == 0 {
			initErr = nvml.ErrNoDevices
		}
		nvml.Shutdown()
	}
	if initErr != nil && runtime.GOOS != "linux" {
		t.Skip("no GPU, and the CPU is read from /proc")
	}
	out, err := runSmi(t, "--name", "no-such-program", "--sample", "50ms")
	if err != nil {
		t.Fatalf("smi: %v\n%s", err, out)
	}
	t.Logf("\n%s", out)
	if initErr != nil {
		want := "No GPU shown: " + initErr.Error() + "\n"
		if !strings.Contains(out, want) {
			t.Errorf("no reason line %q", want)
		}
		if errors.Is(initErr, nvml.ErrLibraryNotFound) && !strings.Contains(out, "libnvidia-ml.so.1 not found") {
			t.Errorf("the reason does not say libnvidia-ml.so.1 was not found")
		}
		if !strings.Contains(out, "Processes (no-such-program):\n  none running\n") {
			t.Errorf("no empty process list")
		}
		return
	}
	if strings.Contains(out, "No GPU shown") {
		t.Errorf("NVML works but smi shows no GPU")
	}
	for _, re := range []string{
		`(?m)^fleet smi .* driver \d+\.\d+\S*\s+\d+ GPUs?$`,
		`(?m)^GPU\s+NAME\s+UTIL\s+MEM UTIL\s+MEMORY USED / TOTAL\s+TEMP\s+POWER / LIMIT\s+SM CLOCK\s+MEM CLOCK$`,
		`(?m)^Processes:$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %s", re)
		}
	}
	for i := 0; i < n; i++ {
		re := fmt.Sprintf(`(?m)^\s*%d\s+\S.*\s+\d+%%\s+\d+%%\s+[\d.]+ / [\d.]+ GiB \(\d+%%\)\s+\d+°C\s+\d+ / \d+ W\s+\d+ MHz\s+\d+ MHz$`, i)
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no row for GPU %d matching %s", i, re)
		}
	}
}

func TestSmiWatch(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the CPU is read from /proc")
	}
	out, err := runSmi(t, "--cpu", "--watch", "10ms", "--count", "3", "--sample", "20ms")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "fleet smi "); n != 3 {
		t.Errorf("%d reports, want 3:\n%s", n, out)
	}
	// Later reports measure since the previous one: about --watch, not --sample.
	if !regexp.MustCompile(`over the last (1\d|[2-9]\d|\d{3,})ms\)`).MatchString(out) {
		t.Errorf("no report measured over its interval:\n%s", out)
	}
}

func TestSmiUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--watch", "-1s"},
		{"--count", "2"},
		{"--watch", "1s", "--count", "-1"},
		{"--sample", "0s"},
		{"extra"},
		{"--nope"},
	} {
		var out, errOut bytes.Buffer
		if err := smiCmd(args, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("smi %v: %v, want a usage error", args, err)
		}
		if !strings.Contains(errOut.String(), "Usage: fleet smi") {
			t.Errorf("smi %v: no usage on stderr: %q", args, errOut.String())
		}
	}
}

// notifyWriter signals on its first write.
type notifyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() == 0 {
		close(w.first)
	}
	return w.buf.Write(p)
}

// ctrl-C ends --watch without an error.
func TestSmiInterrupt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the CPU is read from /proc")
	}
	w := &notifyWriter{first: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- smiCmd([]string{"--cpu", "--watch", "20ms", "--sample", "10ms"}, w, io.Discard) }()
	select {
	case <-w.first: // the handler is in place once a report is out
	case err := <-done:
		t.Fatalf("smi --watch returned before interrupted: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no report")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("interrupted: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("smi --watch went on after SIGINT")
	}
}

// With the stand-in NVML: the GPU table, and each reason for showing none.
func TestSmiStandIn(t *testing.T) {
	if nvmltest.InChild() {
		return // the tests below run in the child
	}
	dir := nvmltest.Build(t)
	nvmltest.Run(t, dir, "TestSmiStandInGPUs", "FAKE_NVML_PROCS=2")
	nvmltest.Run(t, dir, "TestSmiStandInReason", "FAKE_NVML_INIT=18", "WANT_REASON=nvml: nvmlInit_v2: Driver/library version mismatch (NVML error 18)")
	nvmltest.Run(t, dir, "TestSmiStandInReason", "FAKE_NVML_INIT=9", "WANT_REASON=nvml: nvmlInit_v2: Driver Not Loaded (NVML error 9)")
	nvmltest.Run(t, dir, "TestSmiStandInReason", "FAKE_NVML_COUNT=0", "WANT_REASON="+nvml.ErrNoDevices.Error())
}

func TestSmiStandInGPUs(t *testing.T) {
	if !nvmltest.InChild() {
		t.Skip("runs in a child process with the stand-in NVML")
	}
	out, err := runSmi(t)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out)
	for _, re := range []string{
		`(?m)^fleet smi  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  driver 999\.12\.34  2 GPUs$`,
		`(?m)^GPU  NAME        UTIL  MEM UTIL  MEMORY USED / TOTAL  TEMP  POWER / LIMIT  SM CLOCK  MEM CLOCK$`,
		`(?m)^  0  Fake GPU 0   37%       12%  1\.0 / 80\.0 GiB \(1%\)  41°C    123 / 700 W  1980 MHz   2619 MHz$`,
		`(?m)^  1  Fake GPU 1   38%       13%  2\.0 / 80\.0 GiB \(3%\)  42°C    123 W / N/A  1979 MHz   2620 MHz$`,
		`(?m)^Processes:$`,
		`(?m)^  GPU   PID  NAME +GPU MEMORY$`,
		`(?m)^    0  1000  \S+ +256 MiB$`,
		`(?m)^    0  1001  \S+ +N/A$`,
		`(?m)^    1  2000  \S+ +256 MiB$`,
		`(?m)^    1  2001  \S+ +N/A$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no line matching %s", re)
		}
	}
	if strings.Contains(out, "No GPU shown") {
		t.Error("a reason for no GPU, with GPUs shown")
	}
}

func TestSmiStandInReason(t *testing.T) {
	if !nvmltest.InChild() {
		t.Skip("runs in a child process with the stand-in NVML")
	}
	out, err := runSmi(t, "--sample", "10ms")
	if err != nil {
		t.Fatal(err)
	}
	want := "No GPU shown: " + os.Getenv("WANT_REASON") + "\n"
	if !strings.Contains(out, want) {
		t.Errorf("no line %q in\n%s", want, out)
	}
	if !strings.Contains(out, "Cores (utilisation") {
		t.Errorf("no CPU report:\n%s", out)
	}
}
