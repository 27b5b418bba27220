package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/libperfutil/nrm2"
	"perfinsp/libperfutil/trace"
)

// itraceTrace writes an ITrace trace of one thread (pid 900) whose code
// is mapped from module at 0x400000: main at 0x401000 calls f at
// 0x402000, which calls itself depth-1 times; each frame runs 3
// instructions before its call and 2 after its return. It returns the
// trace's path.
func itraceTrace(t *testing.T, dir, module string, depth int) string {
	t.Helper()
	var m, tr trace.Writer
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const pid, base, mainAt, fAt = 900, 0x400000, 0x401000, 0x402000
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{pid, 1}, "deep"))
	must(m.Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 2, []uint64{pid, base, 0x10000, 0, 5}, module))
	n := 0
	w := func(major uint16, minor uint32, f ...uint64) {
		must(tr.Write(major, minor, trace.LayoutFixed, uint64(10+n), f, ""))
		n++
	}
	U := trace.MajorITraceU
	w(U, trace.ITraceStart, pid, pid, mainAt, 0)
	w(U, trace.ITraceCall, fAt, 3, 3) // main: 3, the call at main+3
	for i := 1; i < depth; i++ {
		w(U, trace.ITraceCall, fAt, 3, 3) // f: 3, the recursive call at f+3
	}
	for i := 1; i < depth; i++ {
		w(U, trace.ITraceReturn, fAt+8, 2, 1) // f: 2 (its ret at f+1 of the block), back in f after its call
	}
	w(U, trace.ITraceReturn, mainAt+8, 2, 1) // the outermost f returns to main
	w(U, trace.ITraceEnd, pid, pid, 2, 1, trace.ITraceEndExit)
	path := filepath.Join(dir, "itrace.nrm2")
	f, err := nrm2.Create(path, nrm2.Header{NCPUs: 1, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	must(f.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	must(f.WriteChunk(nrm2.ChunkTrace, 0, tr.Buf))
	must(f.Close(0, []nrm2.CPUStats{{Records: uint64(n + 2)}}))
	return path
}

// postWithin runs post and fails the test if it has not finished within
// limit (a hang would otherwise hold the test binary until its timeout).
func postWithin(t *testing.T, limit time.Duration, dir string, args ...string) (string, string, int) {
	t.Helper()
	type result struct {
		out, errs string
		code      int
	}
	done := make(chan result, 1)
	go func() {
		o, e, c := runPost(t, dir, args...)
		done <- result{o, e, c}
	}()
	select {
	case r := <-done:
		return r.out, r.errs, r.code
	case <-time.After(limit):
		t.Fatalf("post %s: still running after %v", strings.Join(args, " "), limit)
	}
	return "", "", 0
}

// TestITraceModuleIsFIFO: a trace naming a FIFO as the module of its
// ITrace addresses costs post nothing: -itrace, -arc and --callgrind
// finish promptly (the module is refused unread, its addresses named
// module+offset) and say why the module was not read.
func TestITraceModuleIsFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "lib.so")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	path := itraceTrace(t, dir, fifo, 3)
	cg := filepath.Join(dir, "cg.out")
	_, errs, code := postWithin(t, 20*time.Second, dir, "-r", path, "-itrace", "-arc", "--callgrind", cg)
	if code != 0 {
		t.Fatalf("post: exit %d: %s", code, errs)
	}
	if !strings.Contains(errs, "named pipe") {
		t.Errorf("post does not say the module is a FIFO: %s", errs)
	}
	rep, err := os.ReadFile(filepath.Join(dir, "itrace.out"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rep), "lib.so+0x2000") {
		t.Fatalf("itrace.out does not name f as lib.so+0x2000:\n%s", rep)
	}
	if fi, err := os.Stat(cg); err != nil || fi.Size() == 0 {
		t.Fatalf("callgrind file: %v", err)
	}
}
