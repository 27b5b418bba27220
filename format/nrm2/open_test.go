package nrm2

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostile plants inputs a trace reader must refuse at once and returns
// them by name: a FIFO nobody writes, /dev/zero, a directory, a symbolic
// link to /dev/zero, an empty file and a sparse 64 GiB file that is not a
// trace.
func hostile(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	in := map[string]string{
		"dev-zero":  "/dev/zero",
		"directory": dir,
	}
	fifo := filepath.Join(dir, "fifo.nrm2")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	in["fifo"] = fifo
	link := filepath.Join(dir, "zero.nrm2")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	in["symlink to /dev/zero"] = link
	empty := filepath.Join(dir, "empty.nrm2")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	in["empty"] = empty
	huge := filepath.Join(dir, "huge.nrm2")
	fh, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fh.WriteString("\x7fELF not a trace")
	if err == nil {
		err = fh.Truncate(64 << 30)
	}
	fh.Close()
	if err != nil {
		t.Fatalf("sparse file: %v", err)
	}
	in["huge non-trace file"] = huge
	return in
}

// TestOpenRefusesHostileInputs: every planted input gives a one-line error
// naming the problem within a second, and none blocks or reads without
// bound (a hang fails the test after 20 s instead of hanging it).
func TestOpenRefusesHostileInputs(t *testing.T) {
	wantMsg := map[string]string{
		"dev-zero":             "character device",
		"directory":            "directory",
		"fifo":                 "named pipe",
		"symlink to /dev/zero": "character device",
		"empty":                "empty",
		"huge non-trace file":  "not a perfinsp trace file",
	}
	for name, path := range hostile(t) {
		for _, opt := range []Options{{}, {Salvage: true}} {
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				f, err := OpenWith(path, opt)
				if f != nil {
					f.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: OpenWith(%+v) still running after 20 s", name, opt)
			}
			took := time.Since(start)
			if err == nil {
				t.Fatalf("%s: opened", name)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.Contains(msg, wantMsg[name]) || !strings.Contains(msg, path) {
				t.Fatalf("%s: want one line naming %q and the path, got %q", name, wantMsg[name], msg)
			}
			if took > time.Second {
				t.Fatalf("%s: took %v", name, took)
			}
		}
	}
}

// TestManyCPUsMergeInTimeOrder checks the heap merge used past a few
// streams: 12 CPUs' ticks come out in time order, all of them.
func TestManyCPUsMergeInTimeOrder(t *testing.T) {
	b := buildTrace(t, 12, 300, 16<<10)
	b.index(t)
	f, err := Parse(b.data)
	if err != nil {
		t.Fatal(err)
	}
	got := ids(t, f) // checks the time order
	exp := want(b, func(tick) bool { return true })
	if msg := sameIDs(sorted(got), exp); msg != "" {
		t.Fatal(msg)
	}
	if sort.SliceIsSorted(got, func(i, j int) bool { return got[i] < got[j] }) {
		t.Fatal("the ticks came out CPU by CPU, not merged")
	}
}
