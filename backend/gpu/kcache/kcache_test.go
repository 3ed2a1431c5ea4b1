package kcache

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestKey(t *testing.T) {
	base := Key("src", "sm_90", "12.8", []string{"-a", "-b"})
	if len(base) != 64 {
		t.Fatalf("key %q is not a hex sha256", base)
	}
	if Key("src", "sm_90", "12.8", []string{"-a", "-b"}) != base {
		t.Error("same inputs, different keys")
	}
	for name, k := range map[string]string{
		"source":      Key("src2", "sm_90", "12.8", []string{"-a", "-b"}),
		"arch":        Key("src", "sm_80", "12.8", []string{"-a", "-b"}),
		"version":     Key("src", "sm_90", "11.8", []string{"-a", "-b"}),
		"option":      Key("src", "sm_90", "12.8", []string{"-a"}),
		"order":       Key("src", "sm_90", "12.8", []string{"-b", "-a"}),
		"boundaries":  Key("src", "sm_90", "12.8", []string{"-a-b"}),
		"field shift": Key("srcs", "m_90", "12.8", []string{"-a", "-b"}),
	} {
		if k == base {
			t.Errorf("a different %s gives the same key", name)
		}
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("FLEET_KERNEL_CACHE", "/some/where")
	if d, err := DefaultDir(); err != nil || d != "/some/where" {
		t.Errorf("DefaultDir = %q, %v with FLEET_KERNEL_CACHE set", d, err)
	}
	t.Setenv("FLEET_KERNEL_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	t.Setenv("HOME", "/home/u")
	if d, err := DefaultDir(); err == nil && d != filepath.Join("/xdg", "fleet", "kernels") && d != filepath.Join("/home/u", "Library/Caches", "fleet", "kernels") {
		t.Errorf("DefaultDir = %q", d)
	}
	dir := filepath.Join(t.TempDir(), "nested", "cache")
	t.Setenv("FLEET_KERNEL_CACHE", dir)
	c, err := Open("")
	if err != nil || c.Dir() != dir {
		t.Fatalf("Open(\"\") = %v, %v", c, err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("Open did not create %s", dir)
	}
}

func TestPutGet(t *testing.T) {
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key := Key("src", "sm_90", "12.8", nil)
	if _, err := c.Get(key); err != ErrMiss {
		t.Errorf("empty cache: %v, want ErrMiss", err)
	}
	data := []byte("\x7fELF cubin bytes")
	if err := c.Put(key, data); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(key)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("Get = %q, %v", got, err)
	}
	if err := c.Put(key, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(key); err != nil || len(got) != 0 {
		t.Errorf("empty entry: %q, %v", got, err)
	}
	for _, bad := range []string{"", "../x", "a/b", ".hidden"} {
		if err := c.Put(bad, data); err == nil {
			t.Errorf("Put accepted key %q", bad)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(c.Dir(), "*"+tmpSuffix)); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// TestCorruptEntries damages an entry in each way a crash or a disk can,
// and checks that it is detected, removed and compiled again.
func TestCorruptEntries(t *testing.T) {
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	key := Key("src", "sm_80", "11.8", nil)
	other := Key("other", "sm_80", "11.8", nil)
	data := bytes.Repeat([]byte("cubin"), 100)
	good := encode(key, data)
	for name, content := range map[string][]byte{
		"empty":            {},
		"header cut":       good[:headerSize-3],
		"contents cut":     good[:len(good)-7],
		"flipped byte":     append(append([]byte(nil), good[:len(good)-1]...), good[len(good)-1]^1),
		"bad magic":        append([]byte("XLEETKC1"), good[len(magic):]...),
		"another key":      encode(other, data),
		"longer than said": append(append([]byte(nil), good...), 0),
	} {
		if err := os.WriteFile(c.path(key), content, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := c.Get(key)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrMiss) {
			t.Errorf("%s: Get gave %v, want a *CorruptError", name, err)
			continue
		}
		if _, err := os.Stat(c.path(key)); !os.IsNotExist(err) {
			t.Errorf("%s: damaged entry not removed", name)
		}
		os.WriteFile(c.path(key), content, 0o644)
		compiled := 0
		got, hit, err := c.Load(key, func() ([]byte, error) { compiled++; return data, nil })
		if err != nil || hit || compiled != 1 || !bytes.Equal(got, data) {
			t.Errorf("%s: Load = %d bytes, hit %v, %v, compiled %d times", name, len(got), hit, err, compiled)
		}
		got, hit, err = c.Load(key, func() ([]byte, error) { compiled++; return nil, errors.New("compiled again") })
		if err != nil || !hit || !bytes.Equal(got, data) {
			t.Errorf("%s: after recompiling, Load = %d bytes, hit %v, %v", name, len(got), hit, err)
		}
	}
	t.Log((&CorruptError{Path: "k.cubin", Reason: "checksum mismatch"}).Error())

	// A compile failure is returned, and nothing is stored.
	_, _, err = c.Load(other, func() ([]byte, error) { return nil, errors.New("syntax error") })
	if err == nil || err.Error() != "syntax error" {
		t.Errorf("compile error: %v", err)
	}
	if _, err := c.Get(other); err != ErrMiss {
		t.Errorf("after a failed compile: %v", err)
	}
}

// TestConcurrentWriters has 8 goroutines per key compile and store the same
// kernels over and over while others read: no reader may ever see a damaged
// entry, and no temporary file may be left.
func TestConcurrentWriters(t *testing.T) {
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	payload := func(k int) []byte { return bytes.Repeat([]byte{byte(k), 0xCB, 0x1F}, 50_000+k) }
	keys := []string{Key("a", "sm_90", "12.8", nil), Key("b", "sm_90", "12.8", nil), Key("c", "sm_90", "12.8", nil)}
	var wg sync.WaitGroup
	var bad atomic.Int32
	var compiles atomic.Int32
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 20; round++ {
				for k, key := range keys {
					if round%5 == w%5 {
						if err := c.Put(key, payload(k)); err != nil {
							t.Error(err)
							bad.Add(1)
						}
					}
					got, _, err := c.Load(key, func() ([]byte, error) { compiles.Add(1); return payload(k), nil })
					if err != nil || !bytes.Equal(got, payload(k)) {
						t.Errorf("Load %d: %d bytes, %v", k, len(got), err)
						bad.Add(1)
					}
					if got, err := c.Get(key); err != nil && err != ErrMiss || err == nil && !bytes.Equal(got, payload(k)) {
						t.Errorf("Get %d: %d bytes, %v", k, len(got), err)
						bad.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		return
	}
	t.Logf("%d compilations for %d keys by 8 writers", compiles.Load(), len(keys))
	if m, _ := filepath.Glob(filepath.Join(c.Dir(), ".*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// TestConcurrentProcesses runs 8 processes (this test binary again) that
// store and load the same entries at once.
func TestConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for i := 0; i < 8; i++ {
		cmd := exec.Command(exe, "-test.run=^TestHelperProcess$", "-test.v")
		cmd.Env = append(os.Environ(), "FLEET_KCACHE_HELPER="+dir, "FLEET_KCACHE_HELPER_ID="+strconv.Itoa(i))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &out)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("process %d: %v\n%s", i, err, outs[i])
		}
	}
	c, _ := Open(dir)
	for k := 0; k < 4; k++ {
		if got, err := c.Get(helperKey(k)); err != nil || !bytes.Equal(got, helperPayload(k)) {
			t.Errorf("entry %d after the processes: %d bytes, %v", k, len(got), err)
		}
	}
}

func helperKey(k int) string {
	return Key(fmt.Sprint("kernel", k), "sm_90", "12.8", []string{"-std=c++17"})
}

func helperPayload(k int) []byte {
	h := sha256.Sum256([]byte{byte(k)})
	return bytes.Repeat(h[:], 4000+k)
}

// TestHelperProcess is one of TestConcurrentProcesses's processes.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv("FLEET_KCACHE_HELPER")
	if dir == "" {
		t.Skip("run by TestConcurrentProcesses")
	}
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for round := 0; time.Now().Before(deadline) || round < 10; round++ {
		for k := 0; k < 4; k++ {
			if round%3 == 0 {
				if err := c.Put(helperKey(k), helperPayload(k)); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.Get(helperKey(k))
			if err != nil && err != ErrMiss {
				t.Fatalf("round %d key %d: %v", round, k, err)
			}
			if err == nil && !bytes.Equal(got, helperPayload(k)) {
				t.Fatalf("round %d key %d: wrong contents", round, k)
			}
			got, _, err = c.Load(helperKey(k), func() ([]byte, error) { return helperPayload(k), nil })
			if err != nil || !bytes.Equal(got, helperPayload(k)) {
				t.Fatalf("round %d key %d: Load: %v", round, k, err)
			}
		}
	}
}

func TestSweepOldTemporaries(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, ".abc.123"+tmpSuffix)
	fresh := filepath.Join(dir, ".abc.456"+tmpSuffix)
	os.WriteFile(old, []byte("x"), 0o644)
	os.WriteFile(fresh, []byte("x"), 0o644)
	long := time.Now().Add(-2 * time.Hour)
	os.Chtimes(old, long, long)
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Error("a temporary file from two hours ago was kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("a fresh temporary file (another writer's) was removed")
	}
}
