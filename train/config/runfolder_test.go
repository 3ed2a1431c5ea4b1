package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeOutTakesTheNextNumber: a numbered folder that another run took
// between the decision and its making moves the run to the next number.
func TestMakeOutTakesTheNextNumber(t *testing.T) {
	root := t.TempDir()
	taken := filepath.Join(root, RunName(1))
	os.Mkdir(taken, 0o755)
	dir, created, err := MakeOut(OutPlan{Dir: taken, New: true})
	if err != nil || !created || dir != filepath.Join(root, RunName(2)) {
		t.Fatalf("MakeOut = %q, %v, %v; want %s made", dir, created, err, RunName(2))
	}
}

// TestDecideOut: without Out a run gets the next numbered folder, and a
// resume the newest; a folder that holds a run is refused without Resume,
// naming what it holds; NewestRun says where there is none.
func TestDecideOut(t *testing.T) {
	root := t.TempDir()
	c := Default()
	c.Runs = root
	p, err := DecideOut(c)
	if err != nil || p.Dir != filepath.Join(root, RunName(1)) || !p.New {
		t.Fatalf("DecideOut in an empty folder = %+v, %v", p, err)
	}
	if _, err := NewestRun(root); err == nil || !strings.Contains(err.Error(), "holds no run-NNN folder") {
		t.Errorf("NewestRun without runs: %v", err)
	}
	os.MkdirAll(filepath.Join(root, RunName(3)), 0o755)
	if p, err = DecideOut(c); err != nil || p.Dir != filepath.Join(root, RunName(4)) {
		t.Errorf("DecideOut after run 3 = %+v, %v", p, err)
	}
	c.Resume = true
	if p, err = DecideOut(c); err != nil || p.Dir != filepath.Join(root, RunName(3)) || p.New {
		t.Errorf("DecideOut resuming = %+v, %v; want run 3", p, err)
	}
	c.Resume, c.Out = false, filepath.Join(root, RunName(3))
	os.WriteFile(filepath.Join(c.Out, ConfigFile), []byte("{}"), 0o644)
	if _, err = DecideOut(c); err == nil || !strings.Contains(err.Error(), "already holds a run ("+ConfigFile+")") ||
		!strings.Contains(err.Error(), "add Resume to continue it") {
		t.Errorf("DecideOut into a run: %v", err)
	}
}
