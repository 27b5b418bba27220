package perfsrc

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/trace"
)

type tRec struct {
	cpu    int
	major  uint16
	minor  uint32
	t      uint64
	fields []uint64
}

type mRec struct {
	cpu    int
	minor  uint32
	t      uint64
	fields []uint64
	str    string
}

// memSink keeps every record (copies: fields is only valid during the call).
type memSink struct {
	mu      sync.Mutex
	tr      []tRec
	mte     []mRec
	lost    map[bool]uint64
	running map[int]bool // a CPU's calls in progress, to catch concurrent calls for one CPU
	overlap int
}

func newSink() *memSink { return &memSink{lost: map[bool]uint64{}, running: map[int]bool{}} }

func (s *memSink) enter(cpu int) {
	s.mu.Lock()
	if s.running[cpu] {
		s.overlap++
	}
	s.running[cpu] = true
}

func (s *memSink) leave(cpu int) { s.running[cpu] = false; s.mu.Unlock() }

func (s *memSink) Trace(cpu int, major uint16, minor uint32, t uint64, f []uint64) {
	s.enter(cpu)
	defer s.leave(cpu)
	s.tr = append(s.tr, tRec{cpu, major, minor, t, append([]uint64(nil), f...)})
}

func (s *memSink) MTE(cpu int, minor uint32, t uint64, f []uint64, str string) {
	s.enter(cpu)
	defer s.leave(cpu)
	s.mte = append(s.mte, mRec{cpu, minor, t, append([]uint64(nil), f...), str})
}

func (s *memSink) Lost(cpu int, mte bool, n uint64) {
	s.enter(cpu)
	defer s.leave(cpu)
	s.lost[mte] += n
}

// needRoot skips a test that opens system-wide perf events when they cannot be opened here.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 && paranoid() > -1 {
		t.Skipf("system-wide perf events need root or perf_event_paranoid <= -1 (euid %d, paranoid %d)", os.Geteuid(), paranoid())
	}
}

func start(t *testing.T, o Options) (*Session, *memSink) {
	t.Helper()
	s := newSink()
	sess, err := Start(o, s)
	if err != nil {
		t.Fatalf("Start(%+v): %v", o, err)
	}
	t.Cleanup(func() { sess.Stop() })
	return sess, s
}

func threadCPUNs() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return uint64(ts.Nano())
}

// A thread that spins for a while at 1000 Hz gets about one sample per ms of its CPU time.
func TestTprofBusyLoop(t *testing.T) {
	needRoot(t)
	const rate = 1000
	sess, sink := start(t, Options{RateHz: rate})
	t0 := monoNow()
	type res struct {
		tid int
		cpu uint64
	}
	rc := make(chan res)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		c0 := threadCPUNs()
		end := time.Now().Add(800 * time.Millisecond)
		x := 0
		for time.Now().Before(end) {
			for i := 0; i < 1000; i++ {
				x += i
			}
		}
		_ = x
		rc <- res{unix.Gettid(), threadCPUNs() - c0}
	}()
	r := <-rc
	if err := sess.Stop(); err != nil {
		t.Fatal(err)
	}
	t1 := monoNow()
	pid := uint64(os.Getpid())
	n, user, kernel, other := 0, 0, 0, 0
	for _, x := range sink.tr {
		if x.major != trace.MajorTprof || x.minor != trace.TprofTick || len(x.fields) != 4 {
			other++
			continue
		}
		if x.t < t0 || x.t > t1 {
			t.Fatalf("tick time %d outside the session [%d, %d] (not CLOCK_MONOTONIC?)", x.t, t0, t1)
		}
		if x.fields[1] != uint64(r.tid) {
			continue
		}
		if x.fields[0] != pid {
			t.Fatalf("tick of tid %d has pid %d, want %d", r.tid, x.fields[0], pid)
		}
		n++
		if x.fields[3]&trace.TprofKernel != 0 {
			kernel++
			if x.fields[2] < 1<<63 {
				t.Errorf("kernel-flagged ip %#x is not a kernel address", x.fields[2])
			}
		} else {
			user++
			if x.fields[2] >= 1<<63 {
				t.Errorf("user ip %#x looks like a kernel address", x.fields[2])
			}
		}
	}
	want := float64(r.cpu) / 1e9 * rate
	t.Logf("tid %d: %d ticks (%d user, %d kernel) for %.1f ms of CPU time (expected %.0f); %d other records; stats %+v",
		r.tid, n, user, kernel, float64(r.cpu)/1e6, want, other, sess.Stats())
	if want < 100 {
		t.Fatalf("the busy thread got only %.1f ms of CPU time", float64(r.cpu)/1e6)
	}
	if float64(n) < want*0.5 || float64(n) > want*1.5 {
		t.Fatalf("%d ticks for the busy thread, want %.0f ±50%%", n, want)
	}
	if user == 0 {
		t.Fatal("no user-mode ticks for a user-mode busy loop")
	}
	if other != 0 {
		t.Fatalf("%d records other than TprofTick with tprof alone", other)
	}
	if sink.overlap != 0 {
		t.Fatalf("%d overlapping sink calls for one CPU", sink.overlap)
	}
}

// A child forked, exec'd and exited during the session yields fork, exec,
// process, thread-name, segment and exit MTE records for its pid.
func TestSideBandChild(t *testing.T) {
	needRoot(t)
	sess, sink := start(t, Options{})
	path, err := filepath.EvalSymlinks("/bin/sleep")
	if err != nil {
		t.Skipf("no /bin/sleep to run: %v", err)
	}
	cmd := exec.Command("/bin/sleep", "0.2")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := uint64(cmd.Process.Pid)
	sess.Flush()
	if err := sess.Stop(); err != nil {
		t.Fatal(err)
	}
	me := uint64(os.Getpid())
	var fork, exe, proc, name, seg, exit *mRec
	for i := range sink.mte {
		r := &sink.mte[i]
		switch r.minor {
		case trace.MTEFork:
			if r.fields[2] == child && r.fields[3] == child {
				fork = r
			}
		case trace.MTEExec:
			if r.fields[0] == child {
				exe = r
			}
		case trace.MTEProcess:
			if r.fields[0] == child {
				proc = r
			}
		case trace.MTEThreadName:
			if r.fields[0] == child && r.fields[1] == child {
				name = r
			}
		case trace.MTESegment:
			if r.fields[0] == child && r.str == path && seg == nil {
				seg = r
			}
			if r.fields[4]&unix.PROT_EXEC == 0 {
				t.Errorf("non-executable segment: %+v", *r)
			}
		case trace.MTEExit:
			if r.fields[0] == child && r.fields[1] == child {
				exit = r
			}
		}
	}
	if fork == nil || exe == nil || proc == nil || name == nil || seg == nil || exit == nil {
		t.Fatalf("child %d: fork %v exec %v process %v name %v segment %v exit %v (%d MTE records)", child, fork, exe, proc, name, seg, exit, len(sink.mte))
	}
	t.Logf("fork %v\nexec %v %q\nprocess %v %q\nsegment %#x %q\nexit %v", fork.fields, exe.fields, exe.str, proc.fields, proc.str, seg.fields, seg.str, exit.fields)
	if fork.fields[0] != me || fork.fields[4] != 0 {
		t.Errorf("fork record %v: want ppid %d, flags 0 (a process)", fork.fields, me)
	}
	if exe.str != path {
		t.Errorf("exec path %q, want %q", exe.str, path)
	}
	if proc.fields[1] != me || proc.str != "sleep" || name.str != "sleep" {
		t.Errorf("process %v %q, thread name %q: want ppid %d, name sleep", proc.fields, proc.str, name.str, me)
	}
	if seg.fields[2] == 0 || seg.fields[4]&unix.PROT_EXEC == 0 {
		t.Errorf("segment %#x", seg.fields)
	}
	if !(fork.t <= exe.t && exe.t <= seg.t && seg.t <= exit.t) {
		t.Errorf("times out of order: fork %d exec %d segment %d exit %d", fork.t, exe.t, seg.t, exit.t)
	}
	if d := exit.t - exe.t; d < 150e6 || d > 5e9 {
		t.Errorf("exec → exit took %d ns for sleep 0.2", d)
	}
}

// Threads that sleep produce sched_switch records naming them, with their
// process id (from the tid → pid map) and a sleeping prev_state.
func TestDispatch(t *testing.T) {
	needRoot(t)
	sess, sink := start(t, Options{Dispatch: true})
	// New OS threads (several locked goroutines at once force the runtime
	// to create threads after Start, whose ids reach the map through FORK
	// records), each sleeping repeatedly.
	const nthr = 6
	tids := make(chan int, nthr)
	var wg sync.WaitGroup
	for i := 0; i < nthr; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			tids <- unix.Gettid()
			for j := 0; j < 20; j++ {
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(tids)
	if err := sess.Stop(); err != nil {
		t.Fatal(err)
	}
	pid := uint64(os.Getpid())
	forked := map[uint64]bool{}
	for _, r := range sink.mte {
		if r.minor == trace.MTEFork && r.fields[0] == pid && r.fields[4] == trace.ForkThread {
			forked[r.fields[3]] = true
		}
	}
	newThreads := 0
	for tid := range tids {
		out, in, sleeping := 0, 0, 0
		for _, r := range sink.tr {
			if r.major != trace.MajorDispatch || r.minor != trace.DispatchSwitch {
				continue
			}
			if r.fields[1] == uint64(tid) {
				out++
				if r.fields[0] != pid {
					t.Errorf("switch-out of tid %d says pid %d, want %d", tid, r.fields[0], pid)
				}
				if r.fields[4] != 0 {
					sleeping++
				}
			}
			if r.fields[3] == uint64(tid) {
				in++
				if r.fields[2] != pid {
					t.Errorf("switch-in of tid %d says pid %d, want %d", tid, r.fields[2], pid)
				}
			}
		}
		if forked[uint64(tid)] {
			newThreads++
		}
		t.Logf("tid %d (new: %v): %d out (%d sleeping), %d in", tid, forked[uint64(tid)], out, sleeping, in)
		if out < 10 || in < 10 || sleeping < 10 {
			t.Errorf("tid %d slept 20 times: %d switches out (%d sleeping), %d in", tid, out, sleeping, in)
		}
	}
	t.Logf("%d threads created during the session; stats %+v", newThreads, sess.Stats())
}

// irqCounts sums /proc/interrupts over the CPUs: device IRQs (numbered
// lines) and local timer interrupts (LOC).
func irqCounts(t *testing.T, cpus int) (dev, loc uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 1+cpus {
			continue
		}
		var sum uint64
		for _, v := range f[1 : 1+cpus] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				break
			}
			sum += n
		}
		switch {
		case f[0] == "LOC:":
			loc = sum
		case f[0][0] >= '0' && f[0][0] <= '9':
			dev += sum
		}
	}
	return dev, loc
}

// tpCounter is a counting (not sampling) perf event on a tracepoint, one per
// CPU: the kernel's own count of the tracepoint hits perf saw.
type tpCounter []int

func openCounter(t *testing.T, system, name string, cpus []int) tpCounter {
	t.Helper()
	tp, err := loadTracepoint(system, name)
	if err != nil {
		t.Fatal(err)
	}
	var c tpCounter
	for _, cpu := range cpus {
		a := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: tp.id}
		a.Size = uint32(unsafe.Sizeof(a))
		fd, err := unix.PerfEventOpen(&a, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			t.Fatalf("counter %s:%s cpu %d: %v", system, name, cpu, err)
		}
		c = append(c, fd)
	}
	return c
}

// stop disables the counters and returns their sum.
func (c tpCounter) stop(t *testing.T) uint64 {
	var sum uint64
	for _, fd := range c {
		unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
		var b [8]byte
		if _, err := unix.Read(fd, b[:]); err != nil {
			t.Fatal(err)
		}
		sum += le64(b[:])
		unix.Close(fd)
	}
	return sum
}

// Interrupt records: softirqs from loopback traffic and timers; hard IRQs
// from disk writes (virtio-blk). Counting events on the same tracepoints,
// opened before Start and closed after Stop (outer) or opened after Start
// and closed before Stop (inner), give the kernel's count of hits: there can
// be no more records than the outer count. There can be fewer: this VM's
// kernel counts some tracepoint hits on a sampling event without writing a
// sample or a PERF_RECORD_LOST (perf record shows the same; see
// docs/daemon-sources.md), so the shortfall is logged, not failed.
func TestInterrupts(t *testing.T) {
	needRoot(t)
	online, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	_, haveTimer := loadTracepoint("irq_vectors", "local_timer_entry")
	counters := func() (tpCounter, tpCounter) {
		h := openCounter(t, "irq", "irq_handler_entry", online)
		if haveTimer != nil {
			return h, nil
		}
		return h, openCounter(t, "irq_vectors", "local_timer_entry", online)
	}
	outerDev0, outerLoc0 := irqCounts(t, len(online))
	outerH, outerT := counters()
	sess, sink := start(t, Options{Interrupt: true})
	innerH, innerT := counters()
	innerDev0, innerLoc0 := irqCounts(t, len(online))
	// loopback TCP traffic: NET_RX softirqs
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for i := 0; i < 64; i++ {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	// disk writes: block-device completion interrupts
	f, err := os.CreateTemp("", "perfsrc-irq")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	for i := 0; i < 8; i++ {
		f.Write(buf)
		f.Sync()
	}
	f.Close()
	for i := 0; i < 20; i++ { // timers
		time.Sleep(2 * time.Millisecond)
	}
	innerDev1, innerLoc1 := irqCounts(t, len(online))
	inH, inT := innerH.stop(t), innerT.stop(t)
	if err := sess.Stop(); err != nil {
		t.Fatal(err)
	}
	outH, outT := outerH.stop(t), outerT.stop(t)
	outerDev1, outerLoc1 := irqCounts(t, len(online))

	count := map[uint32]uint64{}
	vecs := map[uint64]int{}
	// per CPU, softirq entry and exit alternate with the same vector
	open := map[int]int64{}
	bad := 0
	for _, r := range sink.tr {
		if r.major != trace.MajorInterrupt || len(r.fields) != 1 {
			t.Fatalf("unexpected record %+v with interrupts alone", r)
		}
		count[r.minor]++
		switch r.minor {
		case trace.IntrSoft:
			vecs[r.fields[0]]++
			if v, ok := open[r.cpu]; ok && v >= 0 {
				bad++
			}
			open[r.cpu] = int64(r.fields[0])
		case trace.IntrSoft | trace.ExitBit:
			if v, ok := open[r.cpu]; ok && v != int64(r.fields[0]) {
				bad++
			}
			open[r.cpu] = -1
		}
	}
	hard, timer := count[trace.IntrHard], count[trace.IntrTimer]
	t.Logf("records by minor: %v; softirq vectors: %v; lost %v; stats %+v", count, vecs, sink.lost, sess.Stats())
	for _, r := range sess.readers {
		if r.bad.Load() != 0 || r.unknown.Load() != 0 {
			t.Errorf("cpu %d: %d malformed records, %d of unknown events", r.cpu, r.bad.Load(), r.unknown.Load())
		}
	}
	t.Logf("device IRQs: %d records, perf counted %d .. %d, /proc/interrupts %d .. %d; local timer: %d records, perf counted %d .. %d, LOC %d .. %d",
		hard, inH, outH, innerDev1-innerDev0, outerDev1-outerDev0, timer, inT, outT, innerLoc1-innerLoc0, outerLoc1-outerLoc0)
	if count[trace.IntrSoft] == 0 || count[trace.IntrSoft|trace.ExitBit] == 0 {
		t.Fatal("no softirq records after loopback traffic and timers")
	}
	if vecs[3] == 0 && vecs[1] == 0 {
		t.Errorf("no NET_RX (3) or TIMER (1) softirq: %v", vecs)
	}
	if bad != 0 {
		t.Errorf("%d softirq entry/exit records out of sequence", bad)
	}
	if d := count[trace.IntrHard] - count[trace.IntrHard|trace.ExitBit]; d > uint64(len(online)) {
		t.Errorf("%d more hard IRQ entries than exits", d)
	}
	if hard > outH {
		t.Errorf("%d hard IRQ records, more than the %d the kernel counted around the session", hard, outH)
	}
	if haveTimer == nil && timer > outT {
		t.Errorf("%d local timer records, more than the %d the kernel counted around the session", timer, outT)
	}
	if hard < inH || (haveTimer == nil && timer < inT) {
		t.Logf("fewer records than tracepoint hits (hard IRQ %d of %d, timer %d of %d) with %d lost: the kernel dropped samples silently", hard, inH, timer, inT, sink.lost[false])
	}
	if hard == 0 {
		t.Logf("no hard IRQ handler records: perf counted %d device interrupts during the session, /proc/interrupts %d", inH, innerDev1-innerDev0)
	}
}

func hasPMU() bool {
	for _, d := range []string{"cpu", "cpu_core", "cpu_atom", "armv8_pmuv3", "armv8_pmuv3_0"} {
		if _, err := os.Stat("/sys/bus/event_source/devices/" + d); err == nil {
			return true
		}
	}
	return false
}

func TestEventBasedNoPMU(t *testing.T) {
	needRoot(t)
	if hasPMU() {
		t.Skip("this machine has a hardware PMU: the no-PMU error cannot be seen here (TestEventBased covers it)")
	}
	sess, err := Start(Options{RateHz: 100000, Event: "cycles"}, newSink())
	if err == nil {
		sess.Stop()
		t.Fatal("event-based tprof started without a hardware PMU")
	}
	const want = "no hardware PMU on this machine: event-based tprof needs a hardware counter (cycles)"
	if err.Error() != want || !errors.Is(err, ErrNoPMU) {
		t.Fatalf("error %q, want %q", err, want)
	}
}

func TestEventBased(t *testing.T) {
	needRoot(t)
	if !hasPMU() {
		t.Skip("no hardware PMU on this machine (no /sys/bus/event_source/devices/cpu): event-based tprof cannot run here")
	}
	sess, sink := start(t, Options{RateHz: 1_000_000, Event: "cycles"})
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		end := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(end) {
		}
		done <- unix.Gettid()
	}()
	tid := <-done
	sess.Stop()
	n := 0
	for _, r := range sink.tr {
		if r.minor == trace.TprofEvent && r.fields[1] == uint64(tid) && r.fields[4] == unix.PERF_COUNT_HW_CPU_CYCLES {
			n++
		}
	}
	if n == 0 {
		t.Fatal("no cycles samples for a busy thread")
	}
	t.Logf("%d cycles samples", n)
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []Options{
		{RateHz: -1},
		{RateHz: MaxTimeRateHz + 1},
		{RingPages: -3},
		{Event: "bogus", RateHz: 10},
		{Event: "cycles"},
		{CPUs: []int{0, 0}},
		{CPUs: []int{-1}},
		{CPUs: []int{}},
	} {
		if s, err := Start(o, newSink()); err == nil {
			s.Stop()
			t.Errorf("Start(%+v) accepted", o)
		} else {
			t.Logf("%+v: %v", o, err)
		}
	}
	if _, err := Start(Options{}, nil); err == nil {
		t.Error("nil sink accepted")
	}
}

func TestStopTwiceFlushAfterStop(t *testing.T) {
	needRoot(t)
	sess, sink := start(t, Options{RateHz: 500, Dispatch: true, CPUs: []int{0}, RingPages: 3})
	time.Sleep(50 * time.Millisecond)
	sess.Flush()
	n := len(sink.tr)
	if err := sess.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := sess.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	sess.Flush()
	st := sess.Stats()
	if len(st) != 1 || st[0].CPU != 0 {
		t.Fatalf("stats %+v", st)
	}
	if n == 0 || st[0].Trace != uint64(len(sink.tr)) {
		t.Fatalf("%d records at Flush, %d at Stop, stats %+v", n, len(sink.tr), st)
	}
	for _, r := range sink.tr {
		if r.cpu != 0 {
			t.Fatalf("record from cpu %d with CPUs [0]", r.cpu)
		}
	}
}
