package main

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// itraceTrace writes an ITrace trace of one thread (pid 900) whose code
// is mapped from module at 0x400000: main at 0x401000 calls f at
// 0x402000, which calls itself depth-1 times; main and each f but the
// deepest run 3 instructions before their call, each f 2 up to its
// return, main 2 after it. It returns the trace's path.
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

// TestDeepRecursionReportsLinear: --itrace-folded and --itrace-pprof of a
// recursion twice as deep allocate about twice as much, not four times (a
// string per stack made them grow with the square of the depth: 6.9 GB
// at depth 10,000), and stay exact: one folded line per depth, its stack
// depth+2 frames long, and the pprof samples sum to the instructions.
func TestDeepRecursionReportsLinear(t *testing.T) {
	allocs := map[int]uint64{}
	for _, depth := range []int{1500, 3000} {
		dir := t.TempDir()
		path := itraceTrace(t, dir, "/nonexistent/deep", depth)
		folded, pb := filepath.Join(dir, "f.folded"), filepath.Join(dir, "p.pb.gz")
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, errs, code := runPost(t, dir, "-r", path, "--itrace-folded", folded, "--itrace-pprof", pb); code != 0 {
			t.Fatalf("post: exit %d: %s", code, errs)
		}
		runtime.ReadMemStats(&after)
		allocs[depth] = after.TotalAlloc - before.TotalAlloc
		t.Logf("depth %d: %d MB allocated", depth, allocs[depth]>>20)

		f, err := os.Open(folded)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		lines, deepest := 0, 0
		var sum uint64
		for sc.Scan() {
			l := sc.Text()
			i := strings.LastIndexByte(l, ' ')
			n, err := strconv.ParseUint(l[i+1:], 10, 64)
			if err != nil || !strings.HasPrefix(l, "pid 900;deep+0x10") {
				t.Fatalf("folded line %.100q", l)
			}
			sum += n
			lines++
			deepest = max(deepest, strings.Count(l[:i], ";")+1)
		}
		f.Close()
		// 3 instructions before each of the depth calls, 2 after each
		// of the depth returns, 2 at the end. The module is unread, so
		// each address is its own function: the blocks after a return
		// at f+8 are leaves of their own under the caller's stack, and
		// main+8, at depth 0, a root of its own. Lines: main, each depth
		// of f, depth-1 f+8 leaves and main+8; the deepest stack: pid,
		// main, depth f's.
		if want := uint64(5*depth + 2); lines != 2*depth+1 || deepest != depth+2 || sum != want {
			t.Fatalf("depth %d: %d folded lines (want %d), deepest %d frames (want %d), %d instructions (want %d)", depth, lines, 2*depth+1, deepest, depth+2, sum, want)
		}
		p := readProfile(t, pb)
		var total int64
		longest := 0
		for _, s := range p.Sample {
			total += s.Value[0]
			longest = max(longest, len(s.Location))
		}
		if total != int64(sum) || longest != depth+1 {
			t.Fatalf("pprof: %d instructions (want %d), longest stack %d (want %d)", total, sum, longest, depth+1)
		}
	}
	if allocs[3000] > 3*allocs[1500] {
		t.Fatalf("twice the depth allocated %.1f times as much (%d MB, then %d MB): quadratic", float64(allocs[3000])/float64(allocs[1500]), allocs[1500]>>20, allocs[3000]>>20)
	}
}
