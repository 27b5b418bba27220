package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/libperfutil/control"
)

// spin burns CPU in this process for d.
func spin(d time.Duration) uint64 {
	var x uint64 = 1
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for i := 0; i < 10000; i++ {
			x = x*6364136223846793005 + 1
		}
	}
	return x
}

func sums(st []nrm2.CPUStats) (recs, lost, mrecs, mlost uint64, full uint32) {
	for _, s := range st {
		recs += s.Records
		lost += s.Lost
		mrecs += s.MTERecords
		mlost += s.MTELost
		full |= s.Full
	}
	return
}

func total(v []uint64) (n uint64) {
	for _, x := range v {
		n += x
	}
	return
}

// runMode traces a busy second with 8K (trace) / 16K (MTE) buffers per CPU.
func runMode(f control.Facility, mode int, file string) (*summary, int, error) {
	if err := f.Free(); err != nil {
		return nil, 0, err
	}
	if err := f.SetMode(mode, file); err != nil {
		return nil, 0, fmt.Errorf("mode %s: %w", control.ModeName(mode), err)
	}
	if err := f.Init(control.Config{TraceBufSize: 8 << 10, MTEBufSize: 16 << 10}); err != nil {
		return nil, 0, err
	}
	if err := f.Enable([]uint16{trace.MajorTprof, trace.MajorDispatch, trace.MajorInterrupt}); err != nil {
		return nil, 0, err
	}
	if err := f.SetRate(2000, ""); err != nil {
		return nil, 0, err
	}
	if err := f.On(); err != nil {
		return nil, 0, fmt.Errorf("on: %w", err)
	}
	hooks := 0
	for i := 0; i < 50; i++ {
		if f.Hook(0x100, uint32(i), []uint32{uint32(i), 0xabcd}, "") == nil {
			hooks++
		}
	}
	_ = spin(1500 * time.Millisecond)
	st, err := f.Info()
	if err != nil {
		return nil, 0, err
	}
	if mode == control.ModeNormal && !st.StoppedFull {
		return nil, 0, fmt.Errorf("normal mode: 8K buffers and 2000 Hz for 1.5 s did not fill (info: %+v)", st.CPUs)
	}
	if err := f.Off(); err != nil {
		return nil, 0, fmt.Errorf("off: %w", err)
	}
	out := "/tmp/mode.nrm2"
	if err := f.Get(out); err != nil {
		return nil, 0, fmt.Errorf("get: %w", err)
	}
	s, err := load(out)
	return s, hooks, err
}

func modes() error {
	f, err := control.Open("kmod")
	if err != nil {
		return err
	}
	defer f.Close()
	defer f.Disable([]uint16{trace.MajorDispatch, trace.MajorInterrupt})

	// normal: stops when a buffer fills, everything held is in the file.
	s, hooks, err := runMode(f, control.ModeNormal, "")
	if err != nil {
		return fmt.Errorf("normal: %w", err)
	}
	userRecs := s.count(0x100, 0)
	for i := uint32(1); i < 50; i++ {
		userRecs += s.count(0x100, i)
	}
	fmt.Printf("modes: normal: %d TraceHook records accepted, %d in the file; %d DISPATCH, %d SOFTIRQ_ENTRY, %d IRQ_ENTRY records\n",
		hooks, userRecs, s.count(trace.MajorDispatch, trace.DispatchSwitch), s.count(trace.MajorInterrupt, trace.IntrSoft), s.count(trace.MajorInterrupt, trace.IntrHard))
	if hooks == 0 || userRecs != hooks {
		return fmt.Errorf("normal: %d hook records accepted but %d in the file", hooks, userRecs)
	}
	if s.count(trace.MajorDispatch, trace.DispatchSwitch) == 0 || s.count(trace.MajorInterrupt, trace.IntrSoft) == 0 {
		return fmt.Errorf("normal: dispatch or interrupt records missing")
	}
	recs, lost, mrecs, mlost, full := sums(s.f.Stats)
	fmt.Printf("modes: normal: %d trace + %d MTE records in the file, stats %d + %d, lost %d + %d, full flags %#x, header flags %#x\n",
		total(s.traceRecs), total(s.mteRecs), recs, mrecs, lost, mlost, full, s.f.Header.Flags)
	if full == 0 || s.f.Header.Flags&nrm2.FlagBufferFull == 0 {
		return fmt.Errorf("normal: no buffer marked full")
	}
	if recs != total(s.traceRecs) || mrecs != total(s.mteRecs) {
		return fmt.Errorf("normal: statistics and file disagree")
	}
	// the buffer that filled says so in the trace (docs/trace-format.md)
	nfull := s.count(trace.MajorSys, trace.SysBufFull)
	fmt.Printf("modes: normal: %d BUFFER_FULL records\n", nfull)
	if nfull == 0 {
		return fmt.Errorf("normal: a buffer filled but the file has no BUFFER_FULL record")
	}
	if err := postShows("/tmp/mode.nrm2", "BUFFER_FULL"); err != nil {
		return fmt.Errorf("normal: %w", err)
	}
	if total(s.traceRecs) == 0 || uint64(s.f.Header.TraceBufSize) < 8<<10 {
		return fmt.Errorf("normal: nothing recorded")
	}
	// nothing is written after the buffer filled: the file holds at most one buffer per CPU
	for cpu, c := range s.f.Chunks {
		_ = cpu
		if c.Kind == nrm2.ChunkTrace && len(c.Data) > int(s.f.Header.SegmentSize) {
			return fmt.Errorf("normal: a segment of %d bytes is larger than the %d-byte segment size", len(c.Data), s.f.Header.SegmentSize)
		}
	}

	// wrap: the trace ring keeps the newest records; MTE is never lost.
	wfile := "/tmp/wrap-stream.nrm2"
	s, _, err = runMode(f, control.ModeWrap, wfile)
	if err != nil {
		return fmt.Errorf("wrap: %w", err)
	}
	recs, lost, mrecs, mlost, _ = sums(s.f.Stats)
	fmt.Printf("modes: wrap: %d trace + %d MTE records in the file, stats %d + %d, lost (overwritten) %d, MTE lost %d, TRACE_OFF records %d\n",
		total(s.traceRecs), total(s.mteRecs), recs, mrecs, lost, mlost, s.count(trace.MajorSys, trace.SysTraceOff))
	if lost == 0 {
		return fmt.Errorf("wrap: nothing was overwritten with 8K buffers")
	}
	if mlost != 0 {
		return fmt.Errorf("wrap: %d MTE records lost: MTE must never be overwritten", mlost)
	}
	if recs != total(s.traceRecs) || mrecs != total(s.mteRecs) {
		return fmt.Errorf("wrap: statistics (%d/%d) and file (%d/%d) disagree", recs, mrecs, total(s.traceRecs), total(s.mteRecs))
	}
	if s.count(trace.MajorSys, trace.SysTraceOff) == 0 {
		return fmt.Errorf("wrap: the newest records (TRACE_OFF) are not in the file")
	}
	if s.count(trace.MajorSys, trace.SysTraceOn) != 0 {
		return fmt.Errorf("wrap: the oldest records (TRACE_ON) should have been overwritten")
	}
	if _, err := os.Stat(wfile); err == nil {
		return fmt.Errorf("wrap: get should have moved the stream file %s", wfile)
	}

	// cont: every segment is drained; the file is larger than the buffers.
	cfile := "/tmp/cont-stream.nrm2"
	s, _, err = runMode(f, control.ModeCont, cfile)
	if err != nil {
		return fmt.Errorf("cont: %w", err)
	}
	recs, lost, mrecs, mlost, _ = sums(s.f.Stats)
	var traceBytes int
	for _, c := range s.f.Chunks {
		if c.Kind == nrm2.ChunkTrace {
			traceBytes += len(c.Data)
		}
	}
	fmt.Printf("modes: cont: %d trace + %d MTE records in the file (%d trace bytes, buffers %d bytes per CPU), stats %d + %d, lost %d + %d (LOST records report %d)\n",
		total(s.traceRecs), total(s.mteRecs), traceBytes, s.f.Header.TraceBufSize, recs, mrecs, lost, mlost, s.lostInFile)
	if recs != total(s.traceRecs) || mrecs != total(s.mteRecs) {
		return fmt.Errorf("cont: statistics (%d/%d) and file (%d/%d) disagree", recs, mrecs, total(s.traceRecs), total(s.mteRecs))
	}
	if uint64(traceBytes) <= uint64(s.f.Header.NCPUs)*s.f.Header.TraceBufSize {
		return fmt.Errorf("cont: %d trace bytes drained, no more than the buffers hold: segments were not handed over", traceBytes)
	}
	if s.lostInFile > lost+mlost {
		return fmt.Errorf("cont: LOST records report %d, more than the %d counted", s.lostInFile, lost+mlost)
	}
	if !s.f.Complete {
		return fmt.Errorf("cont: stream file not finalized")
	}
	if err := f.Free(); err != nil {
		return err
	}
	if err := f.SetMode(control.ModeNormal, ""); err != nil {
		return err
	}
	fmt.Println("modes: ok")
	return nil
}

// postShows checks that post -show prints a record named name from file
// (when the VM image has post).
func postShows(file, name string) error {
	post := "/bin/post"
	if _, err := os.Stat(post); err != nil {
		fmt.Printf("modes: %s not in the image: post -show not checked\n", post)
		return nil
	}
	dir, err := os.MkdirTemp("", "show")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out, err := exec.Command(post, "-r", file, "-show", "-o", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("post -show: %v: %s", err, out)
	}
	show, err := os.ReadFile(filepath.Join(dir, "post.show"))
	if err != nil {
		return fmt.Errorf("post -show wrote no post.show: %w", err)
	}
	for _, l := range strings.Split(string(show), "\n") {
		if strings.Contains(l, name) {
			fmt.Printf("modes: post -show: %s\n", strings.TrimSpace(l))
			return nil
		}
	}
	return fmt.Errorf("post -show prints no %s record", name)
}
