package tprof

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// randomTrace writes a trace of ncpu CPUs: processes that fork, exec,
// map and unmap segments (several programs at the same addresses, so a
// tick is named by the state of its time), rename threads, and tick in
// user and kernel space on every CPU, some ticks at the very time of an
// MTE record, with call stacks if stacks (deep and shallow, kernel and
// user, some cut); each CPU's records in a few chunks. extra is called with
// the first CPU's trace writer after the ticks (to add what the one
// reader must read) and a function that ends that CPU's chunks.
func randomTrace(t *testing.T, seed uint64, ncpu int, stacks bool, extra func(w *trace.Writer, cut func())) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mte := make([]trace.Writer, ncpu)
	tr := make([]trace.Writer, ncpu)
	type chunk struct {
		kind, cpu uint32
		buf       []byte
	}
	var chunks []chunk
	cut := func(cpu int) { // end a chunk of each kind of cpu
		for _, k := range []struct {
			kind uint32
			w    *trace.Writer
		}{{nrm2.ChunkMTE, &mte[cpu]}, {nrm2.ChunkTrace, &tr[cpu]}} {
			if len(k.w.Buf) > 0 {
				chunks = append(chunks, chunk{k.kind, uint32(cpu), k.w.Buf})
				k.w.Buf = nil
			}
		}
	}
	pids := []uint32{100, 200, 300}
	progs := []string{"/bin/alpha", "/bin/beta", "/usr/lib/libgamma.so"}
	for i, p := range pids {
		must(mte[0].Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{uint64(p), 1}, fmt.Sprintf("proc%d", i)))
		must(mte[0].Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 1, []uint64{uint64(p), 0x400000, 0x10000, 0, 5}, progs[i]))
	}
	tm := uint64(10)
	mteTime := make([]uint64, ncpu) // each CPU's buffer in time order
	trTime := make([]uint64, ncpu)
	for step := 0; step < 20000; step++ {
		cpu := rng.IntN(ncpu)
		tm += uint64(rng.IntN(3)) // equal times happen
		if rng.IntN(200) == 0 {
			c := rng.IntN(ncpu)
			at := max(tm, mteTime[c])
			mteTime[c] = at
			p := pids[rng.IntN(len(pids))]
			switch rng.IntN(6) {
			case 0:
				must(mte[c].Write(trace.MajorMTE, trace.MTEExec, trace.LayoutString, at, []uint64{uint64(p), uint64(p)}, progs[rng.IntN(len(progs))]))
				must(mte[c].Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, at, []uint64{uint64(p), 0x400000, 0x10000, 0, 5}, progs[rng.IntN(len(progs))]))
			case 1:
				must(mte[c].Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, at, []uint64{uint64(p), 0x400000, 0x8000, 0x1000, 5}, progs[rng.IntN(len(progs))]))
			case 2:
				must(mte[c].Write(trace.MajorMTE, trace.MTEUnmap, trace.LayoutFixed, at, []uint64{uint64(p), 0x404000, 0x1000}, ""))
			case 3: // a thread named, often first ticking at that very time
				tid := p + 3 + uint32(rng.IntN(40))
				must(mte[c].Write(trace.MajorMTE, trace.MTEThreadName, trace.LayoutString, at, []uint64{uint64(p), uint64(tid)}, fmt.Sprintf("worker%d", rng.IntN(9))))
				if trTime[cpu] <= at && rng.IntN(2) == 0 {
					trTime[cpu] = at
					must(tr[cpu].Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, at, []uint64{uint64(p), uint64(tid), 0x400100, 0}, ""))
				}
			case 4:
				must(mte[c].Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, at, []uint64{uint64(p), 1}, fmt.Sprintf("renamed%d", rng.IntN(9))))
			case 5: // a fork over a live pid (pid reuse)
				must(mte[c].Write(trace.MajorMTE, trace.MTEFork, trace.LayoutFixed, at, []uint64{1, 1, uint64(p), uint64(p), 0}, ""))
			}
			if c == cpu {
				continue
			}
		}
		at := max(tm, trTime[cpu])
		trTime[cpu] = at
		p := pids[rng.IntN(len(pids))]
		tid := p + uint32(rng.IntN(3))
		ip := 0x400000 + uint64(rng.IntN(0x10000))
		flags := uint64(0)
		if rng.IntN(5) == 0 {
			ip, flags = 0xffffffff81000000+uint64(rng.IntN(0x1000)), trace.TprofKernel
		}
		must(tr[cpu].Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, at, []uint64{uint64(p), uint64(tid), ip, flags}, ""))
		if stacks && rng.IntN(4) != 0 {
			// a call stack: the tick's PC, then callers from a few
			// shapes (stacks repeat), kernel PCs first, some cut
			nk := 0
			pcs := []uint64{ip}
			if flags != 0 {
				nk = 1 + rng.IntN(2)
				if nk == 2 {
					pcs = append(pcs, 0xffffffff81000800+uint64(rng.IntN(4))*0x10)
				}
				pcs = append(pcs, 0x400000+uint64(rng.IntN(0x10000)))
				if rng.IntN(3) == 0 {
					nk++ // a user address counted as a kernel frame (real traces have them)
				}
			}
			for d := rng.IntN(4); d > 0; d-- {
				pcs = append(pcs, 0x400000+uint64(rng.IntN(8))*0x1000+0x10)
			}
			fl := uint64(nk) << trace.UnwindKernShift
			if rng.IntN(10) == 0 {
				fl |= trace.UnwindTruncated
			}
			raw := make([]byte, 8*len(pcs))
			for i, pc := range pcs {
				binary.LittleEndian.PutUint64(raw[8*i:], pc)
			}
			must(tr[cpu].Write(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, at, []uint64{uint64(p), uint64(tid), fl}, string(raw)))
		}
		if step%5000 == 4999 {
			cut(cpu)
		}
	}
	if extra != nil {
		extra(&tr[0], func() { cut(0) })
	}
	for c := range ncpu {
		cut(c)
	}
	path := filepath.Join(t.TempDir(), "t.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: uint32(ncpu), RateHz: 1000, KernelRelease: "6.1.0"})
	must(err)
	for _, c := range chunks {
		must(w.WriteChunk(c.kind, c.cpu, c.buf))
	}
	must(w.Close(0, make([]nrm2.CPUStats, ncpu)))
	return path
}

// reportOf is the tprof.out of path, read on every CPU at once or by the
// one reader, and whether the CPUs were read at once.
func reportOf(t *testing.T, path string, parallel bool) (string, bool) {
	t.Helper()
	old, oldPiece := parallelMin, pieceSize
	defer func() { parallelMin, pieceSize = old, oldPiece }()
	parallelMin = 0
	// the smallest pieces: records are cut at many pieces' ends
	pieceSize = trace.MaxRecordSize
	if !parallel {
		parallelMin = 1 << 62
	}
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep := Build(f, a2n.New(nil), nil)
	if rep.RecordErr != nil {
		t.Fatal(rep.RecordErr)
	}
	var b bytes.Buffer
	if err := rep.WritePI(&b); err != nil {
		t.Fatal(err)
	}
	var fo, pp bytes.Buffer
	if err := rep.WriteFolded(&fo); err != nil {
		t.Fatal(err)
	}
	if err := rep.WritePprof(&pp); err != nil {
		t.Fatal(err)
	}
	return b.String() + "\n---- folded\n" + fo.String() + "\n---- pprof\n" + fmt.Sprintf("%x", pp.Bytes()), rep.parallel
}

// Counting every CPU's ticks at once gives the one reader's report, byte
// for byte: the same counts, each tick named by its process's mappings at
// its time (execs, segments, unmaps and forks between ticks, ticks at the
// time of an MTE record), threads named as of their first tick, call
// stacks located in the state of their time and in the order first met.
func TestParallelCountEqualsOneReader(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		ncpu := 2 + int(seed%3)
		stacks := seed%2 == 0
		path := randomTrace(t, seed, ncpu, stacks, nil)
		seq, p1 := reportOf(t, path, false)
		par, p2 := reportOf(t, path, true)
		if p1 || !p2 {
			t.Fatalf("seed %d: read at once %v and %v, want false and true", seed, p1, p2)
		}
		if seq != par {
			t.Fatalf("seed %d (%d CPUs): the reports differ\none reader:\n%s\nat once:\n%s", seed, ncpu, seq, par)
		}
		if !bytes.Contains([]byte(seq), []byte("alpha")) || !bytes.Contains([]byte(seq), []byte("beta")) {
			t.Fatalf("seed %d: the report names neither program:\n%s", seed, seq)
		}
		if hasTree := bytes.Contains([]byte(seq), []byte("Call_Tree")); hasTree != stacks {
			t.Fatalf("seed %d: a call tree %v, want %v", seed, hasTree, stacks)
		}
	}
}

// Zero padding that ends a chunk before its end (a segment's unused
// space) is read past, whichever piece it starts in, and the CPU's next
// chunk is read; a non-zero byte after it is left to the one reader,
// which reports it.
func TestParallelCountPadding(t *testing.T) {
	padded := func(w *trace.Writer, cut func(), tail byte) {
		w.Buf = append(w.Buf, make([]byte, 3*trace.MaxRecordSize+100)...)
		w.Buf[len(w.Buf)-1] = tail
		cut()
		for i := range 50 {
			w.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 1<<30+uint64(i), []uint64{100, 100, 0x400010, 0}, "")
		}
	}
	path := randomTrace(t, 11, 2, true, func(w *trace.Writer, cut func()) { padded(w, cut, 0) })
	seq, _ := reportOf(t, path, false)
	par, p := reportOf(t, path, true)
	if !p || seq != par {
		t.Errorf("zero padding: read at once %v, reports equal %v; want true, true", p, seq == par)
	}
	if !strings.Contains(seq, "TKS") || !strings.Contains(par, "Total Ticks") {
		t.Fatalf("no report:\n%s", par)
	}
	path = randomTrace(t, 11, 2, true, func(w *trace.Writer, cut func()) { padded(w, cut, 1) })
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := parallelMin
	defer func() { parallelMin = old }()
	parallelMin = 0
	rep := Build(f, a2n.New(nil), nil)
	if rep.parallel || rep.RecordErr == nil {
		t.Errorf("a byte after the padding: read at once %v, error %v; want the one reader's error", rep.parallel, rep.RecordErr)
	}
}

// A trace the CPUs cannot be read apart for is read by the one reader:
// a JIT record in a trace buffer, a time that goes back.
func TestParallelCountFallsBack(t *testing.T) {
	cases := map[string]func(w *trace.Writer, cut func()){
		"jit": func(w *trace.Writer, _ func()) {
			w.Write(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, 1<<30, []uint64{100, 100, 0x500000, 0x100}, "m")
		},
		"time goes back": func(w *trace.Writer, _ func()) {
			w.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, 5, []uint64{100, 100, 0x400010, 0}, "")
		},
	}
	for name, extra := range cases {
		path := randomTrace(t, 9, 2, true, extra)
		seq, _ := reportOf(t, path, false)
		par, p := reportOf(t, path, true)
		if p {
			t.Errorf("%s: the CPUs were read at once", name)
		}
		if seq != par {
			t.Errorf("%s: the reports differ", name)
		}
	}
}

// labelAll makes the label of every cell's process and thread from the
// report's list of threads (the writers only read the tables after it).
func TestLabelAllCoversEveryCell(t *testing.T) {
	path := randomTrace(t, 3, 3, false, nil)
	old := parallelMin
	defer func() { parallelMin = old }()
	parallelMin = 0
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep := Build(f, a2n.New(nil), nil)
	if len(rep.threads) == 0 || len(rep.threads) >= len(rep.cells) {
		t.Fatalf("%d threads listed for %d cells", len(rep.threads), len(rep.cells))
	}
	rep.labelAll()
	for _, c := range rep.cells {
		if _, ok := rep.procLabels[c.pid]; !ok {
			t.Fatalf("no label made for process %d", c.pid)
		}
		if _, ok := rep.threadLabels[[2]uint32{c.pid, c.tid}]; !ok {
			t.Fatalf("no label made for thread %d/%d", c.pid, c.tid)
		}
	}
}

// A count of more ticks than an entry holds is kept in several entries:
// with entries of at most two ticks each way of counting (every CPU at
// once, the one reader, naming at once) gives its own report unchanged.
func TestCountsOverEntryMax(t *testing.T) {
	// two processes on two CPUs, ticking at a few addresses hundreds of
	// times each, a remap between
	var m trace.Writer
	tr := make([]trace.Writer, 2)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []uint64{100, 200} {
		must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{p, 1}, fmt.Sprintf("proc%d", p)))
		must(m.Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 1, []uint64{p, 0x400000, 0x10000, 0, 5}, "/bin/alpha"))
	}
	must(m.Write(trace.MajorMTE, trace.MTESegment, trace.LayoutString, 3000, []uint64{200, 0x400000, 0x10000, 0, 5}, "/bin/beta"))
	for tm := uint64(2); tm < 6000; tm++ {
		cpu := tm % 2
		p := 100 + 100*(tm/2%2)
		ip := 0x400000 + 0x100*(tm%5)
		flags := uint64(0)
		if tm%7 == 0 {
			ip, flags = 0xffffffff81000000+0x10*(tm%3), trace.TprofKernel
		}
		must(tr[cpu].Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{p, p + tm%2, ip, flags}, ""))
	}
	path := filepath.Join(t.TempDir(), "t.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 2, RateHz: 1000, KernelRelease: "6.1.0"})
	must(err)
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	for cpu := range tr {
		must(w.WriteChunk(nrm2.ChunkTrace, uint32(cpu), tr[cpu].Buf))
	}
	must(w.Close(0, make([]nrm2.CPUStats, 2)))
	atOnce := func() string {
		f, err := nrm2.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		rep := Build(f, a2n.New(nil), func(*trace.Record, *a2n.Result) {})
		var b bytes.Buffer
		if err := rep.WritePI(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	par, p := reportOf(t, path, true)
	seq, _ := reportOf(t, path, false)
	one := atOnce()
	if !p {
		t.Fatal("the trace was not read on every CPU at once")
	}
	old := entryMax
	defer func() { entryMax = old }()
	entryMax = 2
	par2, _ := reportOf(t, path, true)
	seq2, _ := reportOf(t, path, false)
	one2 := atOnce()
	for _, c := range []struct{ name, a, b string }{{"every CPU at once", par, par2}, {"one reader", seq, seq2}, {"naming at once", one, one2}} {
		if c.a != c.b {
			t.Errorf("%s: entries of two ticks change the report\n%s\n---- with them\n%s", c.name, c.a, c.b)
		}
	}
	if !strings.Contains(one, "alpha") {
		t.Fatalf("the report names no program:\n%s", one)
	}
}

// The stacks of threads switched out to wait (UNWIND_SWITCH) are no
// tick's: a trace with them gives the report of the trace without them,
// read by the one reader or on every CPU at once.
func TestSwitchStacksAreNoTicks(t *testing.T) {
	plain := randomTrace(t, 2, 2, true, nil)
	with := randomTrace(t, 2, 2, true, func(w *trace.Writer, cut func()) {
		raw := make([]byte, 16)
		binary.LittleEndian.PutUint64(raw, 0xffffffff81000800)
		binary.LittleEndian.PutUint64(raw[8:], 0x400010)
		for i := range 50 {
			if err := w.Write(trace.MajorUnwind, trace.UnwindSwitch, trace.LayoutBytes, 1<<40+uint64(i), []uint64{100, 100, 1 << trace.UnwindKernShift}, string(raw)); err != nil {
				t.Fatal(err)
			}
		}
	})
	for _, parallel := range []bool{false, true} {
		a, _ := reportOf(t, plain, parallel)
		b, _ := reportOf(t, with, parallel)
		a = strings.ReplaceAll(a, plain, "t.nrm2") // the header names the file
		b = strings.ReplaceAll(b, with, "t.nrm2")
		if a != b {
			t.Fatalf("parallel %v: switch stacks changed the report\nwithout:\n%.3000s\nwith:\n%.3000s", parallel, a, b)
		}
	}
}
