package dist

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/testenv"
)

// TestMain lets the test binary play one rank of a job in a child process
// (see TestProcesses).
func TestMain(m *testing.M) {
	if os.Getenv("FLEET_DIST_TEST_CHILD") == "1" {
		os.Exit(childRank())
	}
	os.Exit(m.Run())
}

// rankLoop joins the job, prints the hash of a first all-reduce, then
// all-reduces until an error, which it returns.
func rankLoop(s *Store, out func(string)) error {
	g, err := NewTCPGroup(s, TCPOptions{Timeout: 20 * time.Second, RootCauseWait: time.Second})
	if err != nil {
		return err
	}
	defer g.Close()
	buf := randomFloats(rand.New(rand.NewPCG(uint64(s.Rank()), 9)), 100003)
	if err := g.AllReduce(buf, Avg); err != nil {
		return err
	}
	out(fmt.Sprintf("hash %x", sha256.Sum256(bytesOf(buf))))
	for {
		if err := g.AllReduce(buf, Sum); err != nil {
			return err
		}
	}
}

func childRank() int {
	rank, _ := strconv.Atoi(os.Getenv("FLEET_DIST_TEST_RANK"))
	world, _ := strconv.Atoi(os.Getenv("FLEET_DIST_TEST_WORLD"))
	s, err := NewStore(context.Background(), StoreConfig{Addr: os.Getenv("FLEET_DIST_TEST_ADDR"), Rank: rank, World: world,
		Secret: os.Getenv("FLEET_DIST_TEST_SECRET"), Timeout: 20 * time.Second})
	if err == nil {
		err = rankLoop(s, func(line string) { fmt.Println(line) })
	}
	fmt.Println("error:", err)
	return 0
}

// Four ranks, three of them child processes: all agree bitwise, and when
// one is killed (SIGKILL) mid-all-reduce the others fail within seconds,
// naming it.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	testenv.NeedSelfExec(t)
	const world, victim = 4, 2
	ln := listen(t)
	secret := fmt.Sprintf("proc-%d", rand.Uint64())
	type child struct {
		cmd   *exec.Cmd
		lines chan string
	}
	children := map[int]*child{}
	for r := 1; r < world; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "FLEET_DIST_TEST_CHILD=1", "FLEET_DIST_TEST_RANK="+strconv.Itoa(r),
			"FLEET_DIST_TEST_WORLD="+strconv.Itoa(world), "FLEET_DIST_TEST_ADDR="+ln.Addr().String(), "FLEET_DIST_TEST_SECRET="+secret)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, lines: make(chan string, 16)}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				c.lines <- sc.Text()
			}
			close(c.lines)
		}()
		children[r] = c
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	s, err := NewStore(context.Background(), StoreConfig{Addr: ln.Addr().String(), Rank: 0, World: world, Secret: secret, Timeout: 20 * time.Second, Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hash0 := make(chan string, 1)
	var rank0Err error
	var wg sync.WaitGroup
	wg.Go(func() { rank0Err = rankLoop(s, func(line string) { hash0 <- line }) })

	next := func(r int) string {
		select {
		case l := <-children[r].lines:
			return l
		case <-time.After(20 * time.Second):
			t.Fatalf("rank %d said nothing", r)
		}
		return ""
	}
	want := <-hash0
	for r := 1; r < world; r++ {
		if got := next(r); got != want {
			t.Fatalf("rank %d: %q, rank 0: %q", r, got, want)
		}
	}
	time.Sleep(100 * time.Millisecond) // well into the loop of all-reduces
	killed := time.Now()
	children[victim].cmd.Process.Kill()
	wg.Wait()
	errs := map[int]string{0: fmt.Sprint(rank0Err)}
	for r := 1; r < world; r++ {
		if r != victim {
			errs[r] = next(r)
		}
	}
	if d := time.Since(killed); d > 10*time.Second {
		t.Errorf("the others took %v to fail", d)
	}
	for r, e := range errs {
		t.Logf("rank %d: %s", r, e)
		if !strings.Contains(e, "all-reduce #") || !strings.Contains(e, fmt.Sprintf("rank %d closed its connection", victim)) {
			t.Errorf("rank %d: %s", r, e)
		}
	}
}
