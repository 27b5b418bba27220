package a2n

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/format/trace"
)

// within runs fn and fails if it has not returned after limit: the inputs
// below hung or exhausted memory before they were checked.
func within(t *testing.T, limit time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
	}
}

// planted returns a resolver whose pid 55 has anonymous executable memory
// (so its perf map and jitdump are looked up in dir).
func planted(dir string) *Resolver {
	r := New(nil)
	r.PerfMapDir = dir
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{55, 0x7f0000000000, 0x10000, 0, 7}, Str: "//anon"})
	return r
}

// Planted perf maps and jitdumps: a FIFO, a symlink to /dev/zero, a file
// over the size cap, a file owned by another user. Each is refused with one
// warning line, at once, and the address stays resolvable as unnamed JIT
// memory.
func TestPlantedPerfMapAndJitdump(t *testing.T) {
	good := []byte("7f0000001000 40 fn\n")
	cases := []struct {
		name, want string
		plant      func(path string) error
	}{
		{"fifo", "not a regular file (a named pipe (FIFO))", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"dev-zero", "not a regular file (a character device)", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"too-big", "larger than the", func(p string) error { return os.WriteFile(p, bytes.Repeat(good, 1000), 0o644) }},
		{"other-owner", "owned by uid 4242", func(p string) error {
			if err := os.WriteFile(p, good, 0o644); err != nil {
				return err
			}
			return os.Chown(p, 4242, 4242)
		}},
	}
	oldMap, oldJit := MaxPerfMapSize, MaxJitdumpSize
	MaxPerfMapSize, MaxJitdumpSize = 4096, 4096
	t.Cleanup(func() { MaxPerfMapSize, MaxJitdumpSize = oldMap, oldJit })
	for _, c := range cases {
		for _, file := range []string{"perf-55.map", "jit-55.dump"} {
			dir := t.TempDir()
			if err := c.plant(filepath.Join(dir, file)); err != nil {
				if os.Geteuid() != 0 && c.name == "other-owner" {
					t.Skipf("skipped: chown needs root: %v", err)
				}
				t.Fatal(err)
			}
			r := planted(dir)
			var res Result
			within(t, 5*time.Second, c.name+" "+file, func() { res = r.Resolve(55, 0x7f0000001010, false) })
			if res.Symbol != "//anon (no symbols)" {
				t.Fatalf("%s %s: %+v", c.name, file, res)
			}
			p := r.Cache.Problems()
			if len(p) != 1 || !strings.Contains(p[0], c.want) || !strings.Contains(p[0], file) || strings.Contains(p[0], "\n") {
				t.Fatalf("%s %s: warnings %q, want one line with %q", c.name, file, p, c.want)
			}
		}
	}
	// The same files, regular and owned by root or this user, are read.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "perf-55.map"), good, 0o644)
	if res := planted(dir).Resolve(55, 0x7f0000001010, false); res.Symbol != "fn" {
		t.Fatalf("a regular perf map: %+v", res)
	}
}

// Module paths from MTE records and build-id debug files: a FIFO or a
// device is refused at once with one line; the rest still resolves.
func TestPlantedModuleAndDebugFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "libplanted.so")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r := New(nil)
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{66, 0x7f0000000000, 0x10000, 0, 5}, Str: fifo})
	r.Apply(&trace.Record{Major: trace.MajorMTE, Minor: trace.MTESegment, Fixed: []uint64{66, 0x7f1000000000, 0x10000, 0, 5}, Str: "/dev/zero"})
	var a, b Result
	within(t, 5*time.Second, "a FIFO as a module", func() {
		a = r.Resolve(66, 0x7f0000000010, false)
		b = r.Resolve(66, 0x7f1000000010, false)
	})
	if a.Symbol != "libplanted.so+0x10" || b.Symbol != "zero+0x10" {
		t.Fatalf("planted modules: %+v %+v", a, b)
	}
	p := r.Cache.Problems()
	if len(p) != 2 || !strings.Contains(strings.Join(p, "|"), "not a regular file (a named pipe (FIFO))") || !strings.Contains(strings.Join(p, "|"), "a character device") {
		t.Fatalf("warnings %q", p)
	}

	// A FIFO where the build-id debug file of a stripped program would be.
	_, prog := builtSrc(t, "testdata/funcs.c", "-Wl,--build-id")
	f, _ := elf.Open(prog)
	id := buildID(f)
	f.Close()
	root := t.TempDir()
	withDebugRoot(t, root)
	os.MkdirAll(filepath.Join(root, ".build-id", id[:2]), 0o755)
	if err := syscall.Mkfifo(filepath.Join(root, ".build-id", id[:2], id[2:]+".debug"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := stripped(t, prog)
	r2 := New(nil)
	applyAll(r2, loadedAt(t, 67, s, 0x555500000000))
	funcs := codeFuncs(t, prog, "fn_")
	within(t, 5*time.Second, "a FIFO as a debug file", func() {
		for start := range funcs {
			if res := r2.Resolve(67, 0x555500000000+start, false); !strings.Contains(res.Symbol, "(function at") {
				t.Errorf("with a FIFO debug file: %+v", res)
			}
		}
	})
	if p := r2.Cache.Problems(); len(p) != 1 || !strings.Contains(p[0], "debug file") || !strings.Contains(p[0], "a named pipe (FIFO)") {
		t.Fatalf("warnings %q", p)
	}
}
