package facility

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/daemon/kevents"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
	"perfinsp/libperfutil/control"
)

// fakeSource hands the facility's sink to the test, which plays the kernel.
type fakeSource struct{ stopped bool }

func (s *fakeSource) Stop() error { s.stopped = true; return nil }

func newFake(t *testing.T) (*Facility, *Sink, *kevents.Options) {
	t.Helper()
	f := New()
	var sink Sink
	var opts kevents.Options
	f.StartSource = func(o kevents.Options, s Sink) (Source, error) {
		sink, opts = s, o
		return &fakeSource{}, nil
	}
	f.Scan = func(tm uint64, emit func(uint32, []uint64, string)) error {
		emit(trace.MTEProcess, []uint64{42, 1}, "existing")
		emit(trace.MTESegment, []uint64{42, 0x400000, 0x1000, 0, 5}, "/usr/bin/existing")
		return nil
	}
	return f, &sink, &opts
}

// on turns tracing on as a client does: the stream file of wrap and cont
// modes is created by the caller and passed in.
func on(t testing.TB, f *Facility) error {
	t.Helper()
	var stream *os.File
	if f.mode != control.ModeNormal {
		var err error
		if stream, err = control.CreateTraceFile(f.contFile); err != nil {
			t.Fatal(err)
		}
	}
	return f.On(stream, os.Getuid())
}

// get writes the trace to path as a client does (path "" completes a
// stream in place).
func get(t testing.TB, f *Facility, path string) error {
	t.Helper()
	if path == "" {
		return f.Get(nil)
	}
	w, err := control.CreateTraceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return f.Get(w)
}

func ticks(s Sink, cpu, from, n int) {
	for i := from; i < from+n; i++ {
		s.Trace(cpu, trace.MajorTprof, trace.TprofTick, Now(), []uint64{42, 42, uint64(i), 0})
	}
}

func decode(t *testing.T, path string) (f *nrm2.File, seq []uint64, mte int, lostRecs uint64) {
	t.Helper()
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Records(func(r *trace.Record) error {
		switch {
		case r.Major == trace.MajorTprof:
			seq = append(seq, r.Field(2))
		case r.Major == trace.MajorMTE:
			mte++
		case r.Major == trace.MajorSys && r.Minor == trace.SysLost:
			lostRecs += r.Field(0)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return
}

func TestNormalModeStopsWhenFull(t *testing.T) {
	f, sink, opts := newFake(t)
	if err := f.Init(control.Config{TraceBufSize: 4096, MTEBufSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	if opts.RateHz != control.DefaultRateHz {
		t.Fatalf("tprof rate %d passed to the sources", opts.RateHz)
	}
	ticks(*sink, 0, 0, 2000)
	testenv.WaitFor(t, "tracing to stop", func() bool { return f.State() != control.StateOn })
	st, _ := f.Info()
	if st.State != control.StateOff || !st.StoppedFull || !st.CPUs[0].Full {
		t.Fatalf("after filling: %+v", st)
	}
	path := filepath.Join(t.TempDir(), "n.nrm2")
	if err := get(t, f, path); err != nil {
		t.Fatal(err)
	}
	file, seq, mte, _ := decode(t, path)
	if file.Header.Flags&nrm2.FlagBufferFull == 0 {
		t.Fatal("file flags lack buffer-full")
	}
	if mte != 2 {
		t.Fatalf("%d MTE records, want the 2 from the scan", mte)
	}
	if uint64(len(seq)) != st.CPUs[0].Records-3 { // minus SYSINFO, TRACE_ON and BUFFER_FULL
		t.Fatalf("%d ticks in the file, %d records counted", len(seq), st.CPUs[0].Records)
	}
	// The BUFFER_FULL record docs/trace-format.md promises is in the file,
	// after the last tick of the CPU that filled.
	fulls, last := 0, uint64(0)
	_ = file.Records(func(r *trace.Record) error {
		switch {
		case r.Major == trace.MajorSys && r.Minor == trace.SysBufFull && r.CPU == 0 && r.Field(0) == 0:
			fulls++
			if r.Time < last {
				t.Errorf("BUFFER_FULL before the last tick")
			}
		case r.Major == trace.MajorTprof:
			last = r.Time
		}
		return nil
	})
	if fulls != 1 {
		t.Fatalf("%d BUFFER_FULL records in the file, want 1", fulls)
	}
	for i, v := range seq {
		if v != uint64(i) {
			t.Fatalf("tick %d is %d: normal mode keeps the first records", i, v)
		}
	}
	if st.CPUs[0].Lost == 0 {
		t.Fatal("no records counted lost after the buffer filled")
	}
}

func TestWrapModeKeepsNewestAndAllMTE(t *testing.T) {
	f, sink, _ := newFake(t)
	dir := t.TempDir()
	if err := f.SetMode(control.ModeWrap, filepath.Join(dir, "stream.nrm2")); err != nil {
		t.Fatal(err)
	}
	if err := f.Init(control.Config{TraceBufSize: 4096, MTEBufSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	ticks(*sink, 1, 0, n)
	// Far more MTE than the 4K MTE buffer holds: it must all reach the file.
	for i := 0; i < 500; i++ {
		(*sink).MTE(1, trace.MTEThreadName, Now(), []uint64{42, uint64(1000 + i)}, "thread-name-xxxxxxxx")
		if i%10 == 0 { // let the drainer take the full MTE segments, as time passes in a real trace
			testenv.WaitFor(t, "the MTE drain", func() bool { st, _ := f.Info(); return st.CPUs[1].MTEUsed < 1024 })
		}
	}
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "final.nrm2")
	if err := get(t, f, out); err != nil {
		t.Fatal(err)
	}
	file, seq, mte, _ := decode(t, out)
	if mte != 502 {
		t.Fatalf("%d MTE records in the file, want 502: wrap mode must never lose MTE", mte)
	}
	if len(seq) == 0 || seq[len(seq)-1] != n-1 {
		t.Fatalf("newest tick missing (%d ticks)", len(seq))
	}
	for i := 1; i < len(seq); i++ {
		if seq[i] != seq[i-1]+1 {
			t.Fatalf("ticks not a contiguous newest run at %d", i)
		}
	}
	// Every record written on CPU 1 (the ticks, TRACE_ON, TRACE_OFF) is
	// either held or counted lost.
	if got := file.Stats[1].Records + file.Stats[1].Lost; got != n+2 {
		t.Fatalf("CPU 1: %d held + %d lost = %d, wrote %d", file.Stats[1].Records, file.Stats[1].Lost, got, n+2)
	}
	if file.Stats[1].Lost < uint64(n-len(seq)) {
		t.Fatalf("lost %d, but %d ticks were overwritten", file.Stats[1].Lost, n-len(seq))
	}
}

func TestContModeLosesNothing(t *testing.T) {
	f, sink, _ := newFake(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "cont.nrm2")
	if err := f.SetMode(control.ModeCont, path); err != nil {
		t.Fatal(err)
	}
	if err := f.Init(control.Config{TraceBufSize: 256 << 10, MTEBufSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	const n = 100000 // about 12 times the buffer
	for i := 0; i < n; i += 1000 {
		ticks(*sink, 0, i, 1000)
		// a producer slower than memory, as a real one is: wait for the drain
		testenv.WaitFor(t, "the drain", func() bool { st, _ := f.Info(); return st.CPUs[0].Used < 128<<10 })
	}
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	file, seq, _, lost := decode(t, path)
	if len(seq) != n || lost != 0 || file.Stats[0].Lost != 0 {
		t.Fatalf("cont mode: %d of %d ticks, %d lost", len(seq), n, file.Stats[0].Lost)
	}
	for i, v := range seq {
		if v != uint64(i) {
			t.Fatalf("tick %d is %d", i, v)
		}
	}
	// get to another name copies the finished file.
	if err := get(t, f, filepath.Join(dir, "copy.nrm2")); err != nil {
		t.Fatal(err)
	}
}

func TestGuards(t *testing.T) {
	f, sink, _ := newFake(t)
	path := filepath.Join(t.TempDir(), "g.nrm2")
	if err := get(t, f, path); err == nil || !strings.Contains(err.Error(), "no trace") {
		t.Fatalf("get before on: %v", err)
	}
	if err := on(t, f); err != nil { // on before init: defaults
		t.Fatal(err)
	}
	st, _ := f.Info()
	if st.TraceBufSize != control.DefaultTraceBufSize || st.MTEBufSize != control.DefaultMTEBufSize {
		t.Fatalf("defaults not used: %+v", st)
	}
	ticks(*sink, 0, 0, 10)
	if err := get(t, f, path); err == nil {
		t.Fatal("get while on accepted")
	}
	if err := f.Init(control.Config{}); err == nil {
		t.Fatal("init while on accepted")
	}
	if err := f.Hook(Writer{Root: true}, 0, Now(), 0x10, 1, nil, ""); err == nil {
		t.Fatal("hook with a facility major accepted")
	}
	if err := f.Hook(Writer{Root: true}, 1, Now(), 0x100, 7, []uint32{1, 2}, ""); err != nil {
		t.Fatal(err)
	}
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != ErrUnsaved {
		t.Fatalf("on over an unsaved trace: %v", err)
	}
	if err := f.Init(control.Config{}); !errors.Is(err, control.ErrUnsaved) {
		t.Fatalf("init over an unsaved trace: %v", err)
	}
	if err := f.SetMode(control.ModeNormal, ""); !errors.Is(err, control.ErrUnsaved) {
		t.Fatalf("mode over an unsaved trace: %v", err)
	}
	// A FIFO (or any non-regular file) passed to get is refused at once,
	// never written to (a writer would block with the facility locked).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := f.Get(w); !errors.Is(err, control.ErrBadFile) {
		t.Fatalf("get into a pipe: %v", err)
	}
	if err := get(t, f, path); err != nil {
		t.Fatal(err)
	}
	_, seq, _, _ := decode(t, path)
	if len(seq) != 10 {
		t.Fatalf("%d ticks survived, want 10", len(seq))
	}
	hooks := 0
	file, _ := nrm2.Open(path)
	_ = file.Records(func(r *trace.Record) error {
		if r.Major == 0x100 && r.Minor == 7 && r.Field(1) == 2 {
			hooks++
		}
		return nil
	})
	if hooks != 1 {
		t.Fatalf("%d hook records", hooks)
	}
	if err := on(t, f); err != nil {
		t.Fatalf("on after get: %v", err)
	}
	if err := f.Free(); err != nil {
		t.Fatal(err)
	}
	if f.State() != control.StateFree {
		t.Fatal("free did not free")
	}
}

// BenchmarkContDrain measures how many records per second continuous mode
// drains to a file with nothing lost: records go in through the sink as the
// kernel sources would deliver them, from two CPUs at once.
func BenchmarkContDrain(b *testing.B) {
	f := New()
	var sink Sink
	f.StartSource = func(o kevents.Options, s Sink) (Source, error) { sink = s; return &fakeSource{}, nil }
	f.Scan = func(uint64, func(uint32, []uint64, string)) error { return nil }
	path := filepath.Join(b.TempDir(), "bench.nrm2")
	if err := f.SetMode(control.ModeCont, path); err != nil {
		b.Fatal(err)
	}
	if err := f.Init(control.Config{TraceBufSize: 4 << 20, MTEBufSize: 64 << 10}); err != nil {
		b.Fatal(err)
	}
	if err := on(b, f); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	done := make(chan struct{})
	for cpu := 0; cpu < 2; cpu++ {
		go func(cpu int) {
			fields := []uint64{42, 42, 0, 0}
			for i := 0; i < b.N/2; i++ {
				fields[2] = uint64(i)
				sink.Trace(cpu, trace.MajorTprof, trace.TprofTick, Now(), fields)
			}
			done <- struct{}{}
		}(cpu)
	}
	<-done
	<-done
	if err := f.Off(); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	st, _ := f.Info()
	var recs, lost uint64
	for _, c := range st.CPUs {
		recs += c.Records
		lost += c.Lost
	}
	b.ReportMetric(float64(recs)/el.Seconds(), "records/s")
	b.ReportMetric(float64(lost), "lost")
}

func TestIdle(t *testing.T) {
	f, sink, _ := newFake(t)
	if !f.Idle() {
		t.Fatal("a new facility is not idle")
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	ticks(*sink, 0, 0, 3)
	if f.Idle() {
		t.Fatal("idle while tracing")
	}
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	if f.Idle() {
		t.Fatal("idle while holding an unsaved trace: the daemon would exit and lose it")
	}
	if err := get(t, f, filepath.Join(t.TempDir(), "i.nrm2")); err != nil {
		t.Fatal(err)
	}
	if !f.Idle() {
		t.Fatal("not idle after the trace was written")
	}
}

// A full file system in continuous mode: the write error shows in Info at
// once, records that cannot be written are counted as lost, and the file
// ends on a complete chunk with its statistics and END chunk (the writer
// keeps their room allocated), so it reads back.
func TestContModeFullDisk(t *testing.T) {
	testenv.NeedRoot(t, "to mount a small tmpfs")
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a 1 MB tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	f, sink, _ := newFake(t)
	path := filepath.Join(dir, "cont.nrm2")
	if err := f.SetMode(control.ModeCont, path); err != nil {
		t.Fatal(err)
	}
	if err := f.Init(control.Config{TraceBufSize: 64 << 10, MTEBufSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	sent := 0
	for i := 0; ; i++ {
		ticks(*sink, 0, sent, 200)
		sent += 200
		testenv.WaitFor(t, "the drain", func() bool { st, _ := f.Info(); return st.CPUs[0].Used < 16<<10 })
		if st, _ := f.Info(); st.StreamError != "" {
			if !strings.Contains(st.StreamError, "no space") {
				t.Fatalf("stream error: %s", st.StreamError)
			}
			break
		}
		if i > 10000 {
			t.Fatal("the 1 MB file system never filled")
		}
	}
	ticks(*sink, 0, sent, 5000) // after the error: counted, not written
	sent += 5000
	err := f.Off()
	if err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("off after a full disk: %v", err)
	}
	file, seq, _, lostRecs := decode(t, path)
	if file.Header.Flags&nrm2.FlagWriteError == 0 || file.Header.Flags&nrm2.FlagComplete == 0 {
		t.Fatalf("header flags %#x: want write-error and complete", file.Header.Flags)
	}
	lost := file.Stats[0].Lost
	writeFail := uint64(0)
	_ = file.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorSys && r.Minor == trace.SysLost && r.Field(1) == trace.LostWriteFail && r.CPU == 0 {
			writeFail += r.Field(0)
		}
		return nil
	})
	// The write-failed LOST record counts the CPU's trace and MTE records.
	if writeFail == 0 || writeFail > lost+file.Stats[0].MTELost || lostRecs < writeFail {
		t.Fatalf("LOST records of reason write-failed count %d (stats lost %d + %d MTE, all LOST records %d)", writeFail, lost, file.Stats[0].MTELost, lostRecs)
	}
	if uint64(len(seq))+lost < uint64(sent) || lost == 0 {
		t.Fatalf("%d ticks in the file + %d counted lost < %d sent", len(seq), lost, sent)
	}
	for i, v := range seq {
		if v != uint64(i) {
			t.Fatalf("tick %d is %d: the file must hold the first ticks, in order", i, v)
		}
	}
	t.Logf("1 MB file system: %d ticks written, %d counted lost", len(seq), lost)
}

// Wrap and cont cycles with mode changes in between leave no stream file
// descriptor behind (a wrap stream leaked one per mode change).
func TestStreamsDoNotLeakDescriptors(t *testing.T) {
	f, sink, _ := newFake(t)
	dir := t.TempDir()
	count := func() int { ents, _ := os.ReadDir("/proc/self/fd"); return len(ents) }
	before := count()
	for i := 0; i < 5; i++ {
		for _, mode := range []int{control.ModeWrap, control.ModeCont} {
			path := filepath.Join(dir, "s.nrm2")
			if err := f.SetMode(mode, path); err != nil {
				t.Fatal(err)
			}
			if err := f.Init(control.Config{TraceBufSize: 4096, MTEBufSize: 4096}); err != nil {
				t.Fatal(err)
			}
			if err := on(t, f); err != nil {
				t.Fatal(err)
			}
			ticks(*sink, 0, 0, 100)
			if err := f.Off(); err != nil {
				t.Fatal(err)
			}
			if err := get(t, f, ""); err != nil {
				t.Fatal(err)
			}
			if err := f.SetMode(control.ModeNormal, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Free(); err != nil {
		t.Fatal(err)
	}
	if after := count(); after > before {
		t.Fatalf("%d descriptors open after 10 stream cycles, %d before", after, before)
	}
}

// --on-write-error stop: the first write error stops tracing, and the file
// is complete up to its last chunk.
func TestContModeFullDiskStops(t *testing.T) {
	testenv.NeedRoot(t, "to mount a small tmpfs")
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a 1 MB tmpfs: %v", err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	f, sink, _ := newFake(t)
	path := filepath.Join(dir, "cont.nrm2")
	if err := f.SetMode(control.ModeCont, path); err != nil {
		t.Fatal(err)
	}
	if err := f.SetStopOnWriteError(true); err != nil {
		t.Fatal(err)
	}
	if err := f.Init(control.Config{TraceBufSize: 64 << 10, MTEBufSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	for i := 0; f.State() == control.StateOn; i++ {
		ticks(*sink, 0, i*200, 200)
		testenv.WaitFor(t, "the drain", func() bool { st, _ := f.Info(); return st.State != control.StateOn || st.CPUs[0].Used < 16<<10 })
		if i > 10000 {
			t.Fatal("tracing never stopped on the full file system")
		}
	}
	st, _ := f.Info()
	if !strings.Contains(st.Note, "tracing stopped") {
		t.Fatalf("note after the stop: %q", st.Note)
	}
	file, _, _, _ := decode(t, path)
	if file.Header.Flags&nrm2.FlagWriteError == 0 || file.Header.Flags&nrm2.FlagComplete == 0 {
		t.Fatalf("header flags %#x: want write-error and complete", file.Header.Flags)
	}
}

// A stack record and a sample cost the agent no allocation once tracing is
// on (the agent writes one per tick and one per wait).
func TestRecordsWithoutAllocation(t *testing.T) {
	f, sink, _ := newFake(t)
	if err := f.Init(control.Config{TraceBufSize: 1 << 20, MTEBufSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	pcs := make([]uint64, 40)
	for i := range pcs {
		pcs[i] = 0x400000 + uint64(i)*16
	}
	fields := []uint64{42, 42, 0x401000, 0}
	n := testing.AllocsPerRun(1000, func() {
		(*sink).SwitchStack(0, Now(), 42, 42, pcs, 3, false, false)
		(*sink).Trace(0, trace.MajorTprof, trace.TprofTick, Now(), fields)
	})
	if n != 0 {
		t.Errorf("%.1f allocations per stack and sample, want 0", n)
	}
}

// BenchmarkSwitchStack: the agent's cost of one wait-stack record of 40
// frames.
func BenchmarkSwitchStack(b *testing.B) {
	f := New()
	var sink Sink
	f.StartSource = func(o kevents.Options, s Sink) (Source, error) { sink = s; return &fakeSource{}, nil }
	f.Scan = func(uint64, func(uint32, []uint64, string)) error { return nil }
	if err := f.Init(control.Config{TraceBufSize: 64 << 20, MTEBufSize: 1 << 20}); err != nil {
		b.Fatal(err)
	}
	if err := on(b, f); err != nil {
		b.Fatal(err)
	}
	pcs := make([]uint64, 40)
	for i := range pcs {
		pcs[i] = 0x400000 + uint64(i)*16
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sink.SwitchStack(0, Now(), 42, 42, pcs, 3, false, false)
	}
}

// slowReaderSource is a source whose reader runs without the real-time
// priority it asked for (kevents.Session.ReaderError).
type slowReaderSource struct{ fakeSource }

func (s *slowReaderSource) ReaderError() error {
	return errors.New("the ring reader's real-time priority (SCHED_FIFO 1): operation not permitted")
}

// swtrace info says when the records' reader has no real-time thread (a
// switch-heavy load may then fill its rings), beside the process scan's
// error; a later init forgets both.
func TestInfoNotesAReaderWithoutPriority(t *testing.T) {
	f := New()
	f.StartSource = func(o kevents.Options, s Sink) (Source, error) { return &slowReaderSource{}, nil }
	f.Scan = func(uint64, func(uint32, []uint64, string)) error { return errors.New("no /proc") }
	if err := f.Init(control.Config{TraceBufSize: 64 << 10, MTEBufSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Info()
	if !strings.Contains(st.Note, "real-time priority") || !strings.Contains(st.Note, "process scan: no /proc") {
		t.Fatalf("note %q: want the reader's priority and the scan's error", st.Note)
	}
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	if err := f.Free(); err != nil {
		t.Fatal(err)
	}
	if err := f.Init(control.Config{TraceBufSize: 64 << 10, MTEBufSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Info(); st.Note != "" {
		t.Fatalf("note after a new init: %q", st.Note)
	}
}

// TestITraceOnlyNamesTracedProcesses: with ITrace's records alone, the
// MTE records are those of the processes ITrace traces (described from
// /proc as a session starts) and of their children; the forks
// and mappings of every other process of a busy machine are not written,
// so they neither fill the MTE buffers (stopping the trace) nor lose the
// traced processes' own.
func TestITraceOnlyNamesTracedProcesses(t *testing.T) {
	f, sink, _ := newFake(t)
	if err := f.Init(control.Config{TraceBufSize: 64 << 10, MTEBufSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if err := f.Disable([]uint16{trace.MajorTprof}); err != nil {
		t.Fatal(err)
	}
	if err := f.Enable([]uint16{trace.MajorITraceU, trace.MajorITraceK}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	const other, child = 999999, 999998
	self := uint32(os.Getpid())
	s := *sink
	// 10,000 mappings of another process: 64 KB of MTE buffer would hold
	// about a tenth of them.
	for i := 0; i < 10000; i++ {
		s.MTE(0, trace.MTESegment, Now(), []uint64{other, uint64(0x400000 + i*0x1000), 0x1000, 0, 5}, "/usr/lib/other/libbusy.so")
	}
	s.(interface{ Scope([]int) }).Scope([]int{int(self)}) // as an ITrace session starts
	s.Trace(0, trace.MajorITraceU, trace.ITraceStart, Now(), []uint64{uint64(self), uint64(self), 0x401000, 0})
	s.MTE(0, trace.MTEFork, Now(), []uint64{uint64(self), uint64(self), child, child, 0}, "")
	s.MTE(0, trace.MTESegment, Now(), []uint64{child, 0x500000, 0x1000, 0, 5}, "/usr/lib/child.so")
	s.MTE(0, trace.MTESegment, Now(), []uint64{other, 0x500000, 0x1000, 0, 5}, "/usr/lib/other/late.so")
	if err := f.Off(); err != nil {
		t.Fatalf("off: %v (a buffer filled?)", err)
	}
	path := filepath.Join(t.TempDir(), "i.nrm2")
	if err := get(t, f, path); err != nil {
		t.Fatal(err)
	}
	file, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	pids := map[uint64]int{}
	var named, mapped, childMapped bool
	_ = file.Records(func(r *trace.Record) error {
		if r.Major != trace.MajorMTE {
			return nil
		}
		pid := r.Field(0)
		if r.Minor == trace.MTEFork {
			pid = r.Field(2)
		}
		pids[pid]++
		switch {
		case r.Minor == trace.MTEProcess && pid == uint64(self):
			named = true
		case r.Minor == trace.MTESegment && pid == uint64(self) && r.Str == exe:
			mapped = true
		case r.Minor == trace.MTESegment && pid == child:
			childMapped = true
		}
		return nil
	})
	if pids[other] != 0 || pids[42] != 0 {
		t.Errorf("MTE records of processes ITrace does not trace: %d of %d (/proc scan: %d)", pids[other], other, pids[42])
	}
	if !named || !mapped || !childMapped {
		t.Errorf("traced process named %v, its executable %s mapped %v; its child's mapping %v (MTE records by pid %v)", named, exe, mapped, childMapped, pids)
	}
}

// flushSource is a source whose rings hold records until Flush delivers
// them (kevents.Session's reader runs on its own schedule).
type flushSource struct {
	fakeSource
	flush func()
}

func (s *flushSource) Flush() { s.flush() }

// TestScopeKeepsMTEInOrder: a process brought into an ITrace-only trace's
// scope is described after the records the source still held are
// delivered (here a fork of it, stamped before), so its CPU's MTE buffer
// stays in time order: read in order, the fork comes before the
// description it would otherwise undo.
func TestScopeKeepsMTEInOrder(t *testing.T) {
	f, sink, _ := newFake(t)
	self := uint64(os.Getpid())
	forked := Now()
	f.StartSource = func(o kevents.Options, s Sink) (Source, error) {
		*sink = s
		return &flushSource{flush: func() {
			s.MTE(0, trace.MTEFork, forked, []uint64{uint64(os.Getppid()), uint64(os.Getppid()), self, self, 0}, "")
		}}, nil
	}
	if err := f.Init(control.Config{TraceBufSize: 64 << 10, MTEBufSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if err := f.Disable([]uint16{trace.MajorTprof}); err != nil {
		t.Fatal(err)
	}
	if err := f.Enable([]uint16{trace.MajorITraceU}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	(*sink).(interface{ Scope([]int) }).Scope([]int{int(self)})
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "s.nrm2")
	if err := get(t, f, path); err != nil {
		t.Fatal(err)
	}
	file, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var seq []string
	last := uint64(0)
	for _, st := range file.BufferStreams() {
		if st.Kind != nrm2.ChunkMTE || st.CPU != 0 {
			continue
		}
		for _, c := range st.Chunks {
			r := trace.NewReader(c.Data, c.Offset, 0, true, 0)
			var rec trace.Record
			for {
				ok, err := r.NextInto(&rec)
				if err != nil || !ok {
					break
				}
				if rec.Major != trace.MajorMTE {
					continue
				}
				if rec.Time < last {
					t.Errorf("MTE record %v at %d after one at %d: CPU 0's MTE buffer out of time order", trace.Lookup(rec.Major, rec.Minor).Name, rec.Time, last)
				}
				last = rec.Time
				seq = append(seq, trace.Lookup(rec.Major, rec.Minor).Name)
			}
		}
	}
	if len(seq) < 2 || seq[0] != "MTE_FORK" {
		t.Fatalf("CPU 0's MTE records %v: want the fork, then the description", seq)
	}
}

// TestITraceRecordsDoNotWidenScope: the ITrace records come from a tracer
// that runs as the caller (not trusted): one naming a process the
// session was not started on makes the agent neither describe that
// process from /proc nor keep its MTE records. Only Scope (called by the
// ITrace manager after its rights checks) does.
func TestITraceRecordsDoNotWidenScope(t *testing.T) {
	f, sink, _ := newFake(t)
	if err := f.Init(control.Config{TraceBufSize: 64 << 10, MTEBufSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if err := f.Disable([]uint16{trace.MajorTprof}); err != nil {
		t.Fatal(err)
	}
	if err := f.Enable([]uint16{trace.MajorITraceU, trace.MajorITraceK}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	s := *sink
	other := uint64(os.Getpid()) // a live process, as a forged record would name
	s.Trace(0, trace.MajorITraceU, trace.ITraceStart, Now(), []uint64{other, other, 0x401000, 0})
	s.Trace(0, trace.MajorITraceU, trace.ITraceThread, Now(), []uint64{other, other})
	s.MTE(0, trace.MTESegment, Now(), []uint64{other, 0x500000, 0x1000, 0, 5}, "/usr/lib/after.so")
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "w.nrm2")
	if err := get(t, f, path); err != nil {
		t.Fatal(err)
	}
	_, _, mte, _ := decode(t, path)
	if mte != 0 {
		t.Fatalf("%d MTE records after ITrace records of a process no session was started on, want none", mte)
	}
}

// held is the heap memory the Go runtime holds from the system.
func held() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapSys - m.HeapReleased
}

// free gives the buffers' memory back to the system at once: after a trace
// of 64 MB and free, the process holds less than a tenth of it more than
// before the trace (what the test process held then, the earlier tests'
// leftovers included, is its own; their goroutines' garbage moves the heap
// by a few MB, which the trace's size keeps well inside the bound).
func TestFreeReturnsMemory(t *testing.T) {
	debug.FreeOSMemory()
	base := held()
	f, sink, _ := newFake(t)
	if err := f.Init(control.Config{TraceBufSize: 48 << 20, MTEBufSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	fields := []uint64{42, 42, 0x401000, 0}
	for cpu := 0; cpu < 2 && cpu < f.CPUs(); cpu++ {
		for i := 0; i < (32<<20)/32; i++ {
			(*sink).Trace(cpu, trace.MajorTprof, trace.TprofTick, Now(), fields)
		}
	}
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	before := held()
	if before < 48<<20 {
		t.Fatalf("the trace holds %d bytes, want over 48 MB", before)
	}
	if err := f.Free(); err != nil {
		t.Fatal(err)
	}
	if after := held(); after > base+64<<20/10 {
		t.Fatalf("%d bytes held after free (%d with the trace, %d before it), want under a tenth of the 64 MB trace more than before it",
			after, before, base)
	}
}

// BenchmarkTickSample: the agent's cost of one tprof sample record (a
// wrap-mode buffer: the records' own cost, not the first touch of fresh
// memory).
func BenchmarkTickSample(b *testing.B) {
	f := New()
	var sink Sink
	f.StartSource = func(o kevents.Options, s Sink) (Source, error) { sink = s; return &fakeSource{}, nil }
	f.Scan = func(uint64, func(uint32, []uint64, string)) error { return nil }
	if err := f.SetMode(control.ModeWrap, filepath.Join(b.TempDir(), "w.nrm2")); err != nil {
		b.Fatal(err)
	}
	if err := f.Init(control.Config{TraceBufSize: 1 << 20, MTEBufSize: 1 << 20}); err != nil {
		b.Fatal(err)
	}
	if err := on(b, f); err != nil {
		b.Fatal(err)
	}
	defer f.Free()
	fields := []uint64{4242, 4243, 0x401000, 0}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sink.Trace(0, trace.MajorTprof, trace.TprofTick, uint64(i), fields)
	}
}

// Without scheduler or interrupt records the sources' reader waits in the
// runtime's poller (Options.Poll), and in normal mode holds the records
// undecoded until asked (Options.Hold); with them, it is the real-time
// reader (no Poll).
func TestReaderPoll(t *testing.T) {
	for _, c := range []struct {
		mode   int
		majors []uint16
		poll   time.Duration
		hold   bool
	}{
		{control.ModeNormal, []uint16{trace.MajorTprof}, ReaderPoll, true},
		{control.ModeNormal, []uint16{trace.MajorTprof, trace.MajorUnwind}, ReaderPoll, true},
		{control.ModeWrap, []uint16{trace.MajorTprof}, ReaderPoll, false},
		{control.ModeNormal, []uint16{trace.MajorTprof, trace.MajorDispatch}, 0, false},
		{control.ModeNormal, []uint16{trace.MajorInterrupt}, 0, false},
	} {
		f, _, opts := newFake(t)
		if c.mode != control.ModeNormal {
			if err := f.SetMode(c.mode, filepath.Join(t.TempDir(), "w.nrm2")); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Enable(c.majors); err != nil {
			t.Fatal(err)
		}
		if err := on(t, f); err != nil {
			t.Fatal(err)
		}
		if opts.Poll != c.poll || opts.Hold != c.hold {
			t.Errorf("mode %d, record types %v: reader poll %v, hold %v; want %v, %v", c.mode, c.majors, opts.Poll, opts.Hold, c.poll, c.hold)
		}
		_ = f.Free()
	}
}

// holdSource holds ticks as a session with kevents.Options.Hold does:
// delivered on Flush (and Stop), or as they come once Unhold is called.
type holdSource struct {
	fakeSource
	sink    Sink
	held    []uint64 // tick times
	flushes int
	unheld  bool
}

func (s *holdSource) tick(t uint64) {
	if s.unheld {
		s.sink.Trace(0, trace.MajorTprof, trace.TprofTick, t, []uint64{42, 42, t, 0})
		return
	}
	s.held = append(s.held, t)
}

func (s *holdSource) Flush() {
	s.flushes++
	for _, t := range s.held {
		s.sink.Trace(0, trace.MajorTprof, trace.TprofTick, t, []uint64{42, 42, t, 0})
	}
	s.held = nil
}

func (s *holdSource) Stop() error { s.Flush(); return s.fakeSource.Stop() }
func (s *holdSource) Unhold()     { s.unheld = true; s.Flush() }

// In normal mode the sources hold their records (Options.Hold); a hook or
// JProf record has them delivered before it goes in, info counts them,
// and an ITrace session's scope ends the holding: every CPU's buffer
// stays in time order.
func TestHeldRecordsKeepTimeOrder(t *testing.T) {
	f, _, opts := newFake(t)
	src := &holdSource{}
	f.StartSource = func(o kevents.Options, s Sink) (Source, error) {
		*opts, src.sink = o, s
		return src, nil
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	if !opts.Hold {
		t.Fatal("normal-mode tprof: the sources are not asked to hold")
	}
	t0 := Now()
	src.tick(t0 + 1)
	if err := f.Hook(Writer{Root: true}, 0, t0+2, 0x100, 7, []uint32{1}, ""); err != nil {
		t.Fatal(err)
	}
	src.tick(t0 + 3)
	if _, err := f.JProf(Writer{Root: true}, 0, t0+4, trace.MajorJITLoad, trace.JITLoad, []uint64{42, 43, 0x1000, 0x10}, "m"); err != nil {
		t.Fatal(err)
	}
	src.tick(t0 + 5)
	st, _ := f.Info()
	if src.flushes != 3 || st.CPUs[0].Records < 6 { // SYSINFO, TRACE_ON, 3 ticks, hook, JIT
		t.Fatalf("%d flushes, %d records counted by info; want 3 and the held tick counted", src.flushes, st.CPUs[0].Records)
	}
	(*sink)(f).Scope([]int{os.Getpid()})
	if !src.unheld {
		t.Fatal("an ITrace scope did not end the holding")
	}
	src.tick(t0 + 6)
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "h.nrm2")
	if err := get(t, f, path); err != nil {
		t.Fatal(err)
	}
	file, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var order []uint64
	err = file.Records(func(r *trace.Record) error {
		if r.CPU == 0 && r.Time > t0 && r.Time <= t0+6 && !r.MTE {
			order = append(order, r.Time-t0)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[1 2 3 4 5 6]" {
		t.Fatalf("CPU 0's records at t0+%v, want t0+1 to t0+6 in order", order)
	}
}

// Held records that fill a normal-mode buffer when info asks for them stop
// tracing before info answers: the caller is told at once.
func TestHeldRecordsFillingStopAtInfo(t *testing.T) {
	f, _, opts := newFake(t)
	src := &holdSource{}
	f.StartSource = func(o kevents.Options, s Sink) (Source, error) {
		*opts, src.sink = o, s
		return src, nil
	}
	if err := f.Init(control.Config{TraceBufSize: 4096, MTEBufSize: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	t0 := Now()
	for i := uint64(1); i <= 2000; i++ {
		src.tick(t0 + i)
	}
	st, _ := f.Info()
	if st.State != control.StateOff || !st.StoppedFull || !strings.Contains(st.Note, "a buffer filled") {
		t.Fatalf("info after held records filled the buffer: state %s, stopped full %v, note %q", st.State, st.StoppedFull, st.Note)
	}
}
