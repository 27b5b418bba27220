package kevents

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
	"perfinsp/libperfutil/events"
)

type rec struct {
	cpu    int
	major  uint16
	minor  uint32
	t      uint64
	fields []uint64
	str    string
}

type memSink struct {
	mu     sync.Mutex
	recs   []rec
	lost   uint64
	stacks []stackRec
}

func (m *memSink) Trace(cpu int, major uint16, minor uint32, t uint64, f []uint64) {
	m.mu.Lock()
	m.recs = append(m.recs, rec{cpu, major, minor, t, append([]uint64(nil), f...), ""})
	m.mu.Unlock()
}
func (m *memSink) MTE(cpu int, minor uint32, t uint64, f []uint64, s string) {
	m.mu.Lock()
	m.recs = append(m.recs, rec{cpu, trace.MajorMTE, minor, t, append([]uint64(nil), f...), s})
	m.mu.Unlock()
}

type stackRec struct {
	pid, tid  uint32
	pcs       []uint64
	kernel    int
	truncated bool
}

func (m *memSink) Stack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	m.mu.Lock()
	m.stacks = append(m.stacks, stackRec{pid, tid, append([]uint64(nil), pcs...), kernel, truncated})
	m.mu.Unlock()
}

func (m *memSink) Lost(cpu int, mte bool, n uint64) {
	m.mu.Lock()
	m.lost += n
	m.mu.Unlock()
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: system-wide perf events need root")
	}
}

// spin runs for d of the calling thread's CPU time (a busy machine gives
// it less than the wall clock's share), at most 30 times d of wall time.
func spin(d time.Duration) {
	cpu := func() time.Duration {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return time.Duration(ts.Nano())
	}
	start, wall := cpu(), time.Now().Add(30*d)
	x := 1
	for cpu()-start < d && time.Now().Before(wall) {
		for i := 0; i < 1000; i++ {
			x = x*31 + i
		}
	}
	_ = x
}

func TestSamplesSidebandAndTracepoints(t *testing.T) {
	needRoot(t)
	sink := &memSink{}
	before := monoNow()
	s, err := Start(Options{RateHz: 1000, Dispatch: true, Interrupt: true}, sink)
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	tid := unix.Gettid()
	var ru0 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
	spin(400 * time.Millisecond)
	var ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
	runtime.UnlockOSThread()
	cpuTime := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	// A child that forks, execs and exits during the session.
	child := exec.Command("/bin/sh", "-c", "/bin/true")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	// Loopback traffic and sleeps: softirqs and context switches.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			buf := make([]byte, 1<<16)
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		_, _ = c.Write(make([]byte, 4096))
		time.Sleep(200 * time.Microsecond)
	}
	c.Close()
	ln.Close()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	after := monoNow()
	if err := s.Stop(); err != nil { // twice is safe
		t.Fatal(err)
	}

	pid := uint32(os.Getpid())
	var myTicks, switches, irqs int
	var exitOK, forkOK, execOK, segOK bool
	cp := uint32(child.Process.Pid)
	segs := map[uint64]string{} // the child's file segments by start
	files := 0
	for _, r := range sink.recs {
		if r.t < before || r.t > after {
			t.Fatalf("record time %d outside the session [%d, %d]: clocks differ", r.t, before, after)
		}
		switch {
		case r.major == trace.MajorTprof:
			if uint32(r.fields[0]) == pid && uint32(r.fields[1]) == uint32(tid) {
				myTicks++
			}
		case r.major == trace.MajorDispatch:
			switches++
		case r.major == trace.MajorInterrupt:
			irqs++
		case r.major == trace.MajorMTE && r.minor == trace.MTEFork && uint32(r.fields[2]) == cp:
			forkOK = true
		case r.major == trace.MajorMTE && r.minor == trace.MTEExec && uint32(r.fields[0]) == cp:
			execOK = strings.HasSuffix(r.str, "true") || strings.HasSuffix(r.str, "sh")
		case r.major == trace.MajorMTE && r.minor == trace.MTEExit && uint32(r.fields[0]) == cp:
			exitOK = true
		case r.major == trace.MajorMTE && r.minor == trace.MTESegment && uint32(r.fields[0]) == cp:
			segOK = segOK || strings.Contains(r.str, "libc")
			if strings.HasPrefix(r.str, "/") {
				segs[r.fields[1]] = r.str
			}
		case r.major == trace.MajorMTE && r.minor == trace.MTEFile && uint32(r.fields[0]) == cp:
			// the file the segment at this start maps: the file at its path
			path, ok := segs[r.fields[1]]
			var st unix.Stat_t
			if !ok || unix.Stat(path, &st) != nil {
				t.Fatalf("MTE_FILE %v names no file segment seen before it (%q)", r.fields, path)
			}
			if r.fields[2] != uint64(unix.Major(st.Dev)) || r.fields[3] != uint64(unix.Minor(st.Dev)) || r.fields[4] != st.Ino {
				t.Fatalf("MTE_FILE of %s: device %d:%d inode %d, stat says %d:%d inode %d", path, r.fields[2], r.fields[3], r.fields[4], unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
			}
			files++
		}
	}
	if len(segs) == 0 || files != len(segs) {
		t.Fatalf("child %d: %d file segments, %d MTE_FILE records", cp, len(segs), files)
	}
	want := float64(cpuTime.Milliseconds()) // 1000 Hz: one tick per ms of CPU time
	if float64(myTicks) < 0.5*want || float64(myTicks) > 1.5*want {
		t.Fatalf("%d ticks for %v of CPU time at 1000 Hz", myTicks, cpuTime)
	}
	if !forkOK || !execOK || !exitOK || !segOK {
		t.Fatalf("child %d: fork %v exec %v exit %v libc segment %v", cp, forkOK, execOK, exitOK, segOK)
	}
	if switches == 0 {
		t.Fatal("no dispatch records although threads slept")
	}
	if irqs == 0 {
		t.Fatal("no interrupt records although loopback traffic raises softirqs")
	}
	t.Logf("%d ticks for %v CPU, %d switches, %d interrupt records, %d lost", myTicks, cpuTime, switches, irqs, sink.lost)
}

func TestEventBasedWithoutPMU(t *testing.T) {
	needRoot(t)
	// Is there a PMU? Try a plain cycles counter on this thread.
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_HARDWARE, Config: unix.PERF_COUNT_HW_CPU_CYCLES}
	fd, perr := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if perr == nil {
		unix.Close(fd)
	}
	s, err := Start(Options{RateHz: 100000, Event: "cycles"}, &memSink{})
	if perr == nil {
		if err != nil {
			t.Fatalf("a PMU exists but event-based tprof failed: %v", err)
		}
		s.Stop()
		t.Log("hardware PMU present: event-based tprof started")
		return
	}
	if !errors.Is(err, events.ErrNoPMU) || !strings.Contains(err.Error(), "no hardware PMU") {
		t.Fatalf("want the no-PMU error, got %v", err)
	}
	if _, err := Start(Options{RateHz: 1000, Event: "bogus"}, &memSink{}); err == nil || !strings.Contains(err.Error(), "unknown event") {
		t.Fatalf("unknown event: %v", err)
	}
}

// A tracepoint format the parser cannot read is an error, never a field at
// offset 0 (which would decode garbage from every record).
func TestFormatOffsetsRejectsBadFields(t *testing.T) {
	dir := t.TempDir()
	ev := filepath.Join(dir, "events", "sched", "sched_switch")
	if err := os.MkdirAll(ev, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ev, "id"), []byte("316\n"), 0o644)
	good := "format:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
	os.WriteFile(filepath.Join(ev, "format"), []byte(good), 0o644)
	id, f, err := formatOffsets(dir, "sched/sched_switch")
	if err != nil || id != 316 || f["prev_pid"] != [2]int{24, 4} {
		t.Fatalf("good format: id %d fields %v err %v", id, f, err)
	}
	bad := "format:\n\tfield:pid_t prev_pid;\toffset:x24;\tsize:4;\tsigned:1;\n"
	os.WriteFile(filepath.Join(ev, "format"), []byte(bad), 0o644)
	if _, _, err := formatOffsets(dir, "sched/sched_switch"); err == nil || !strings.Contains(err.Error(), "prev_pid") {
		t.Fatalf("bad offset accepted: %v", err)
	}
}

// Call stacks come with the ticks: this thread's samples, taken while
// spin runs, unwind through spin to this test function (Go keeps frame
// pointers); a depth limit marks stacks as truncated.
func TestCallstacks(t *testing.T) {
	needRoot(t)
	for _, max := range []int{0, 3} {
		sink := &memSink{}
		s, err := Start(Options{RateHz: 1000, Callstack: true, MaxStack: max}, sink)
		if err != nil {
			t.Fatal(err)
		}
		runtime.LockOSThread()
		tid := uint32(unix.Gettid())
		spin(300 * time.Millisecond)
		runtime.UnlockOSThread()
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		ticks, through, truncated := 0, 0, 0
		for _, st := range sink.stacks {
			if st.tid != tid {
				continue
			}
			ticks++
			if st.truncated {
				truncated++
			}
			var names []string
			for _, pc := range st.pcs[st.kernel:] {
				if fn := runtime.FuncForPC(uintptr(pc) - 1); fn != nil {
					names = append(names, fn.Name())
				}
			}
			joined := strings.Join(names, " ")
			if strings.Contains(joined, "kevents.spin") && strings.Contains(joined, "kevents.TestCallstacks") {
				through++
			}
		}
		t.Logf("max stack %d: %d stacks of this thread, %d through spin to the test, %d truncated", max, ticks, through, truncated)
		if ticks < 50 {
			t.Fatalf("%d stacks in 300 ms at 1000 Hz", ticks)
		}
		if max == 0 && through < ticks*8/10 {
			t.Fatalf("only %d of %d stacks unwind from spin to the test function", through, ticks)
		}
		if max == 3 && truncated < ticks*8/10 {
			t.Fatalf("depth limit 3: only %d of %d stacks marked truncated", truncated, ticks)
		}
	}
}

// An exec's MTE_EXEC carries the program's path as found (the first
// executable mapping of the new program), not the bare name typed, and the
// MTE_PROCESS after it has the real parent.
func TestExecPathAndParent(t *testing.T) {
	needRoot(t)
	sink := &memSink{}
	s, err := Start(Options{}, sink)
	if err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("/bin/sh", "-c", "cat </dev/null; cat </dev/null; exit 0") // not builtins: found through PATH
	if err := sh.Run(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	shPid := uint64(sh.Process.Pid)
	execs, procs := 0, 0
	var others []string
	for _, r := range sink.recs {
		if r.major != trace.MajorMTE {
			continue
		}
		switch {
		case r.minor == trace.MTEExec && strings.HasSuffix(r.str, "cat"):
			execs++
			if !strings.HasPrefix(r.str, "/") {
				t.Errorf("MTE_EXEC of cat carries %q, not the path it was found at", r.str)
			}
		case r.minor == trace.MTEProcess && r.str == "cat":
			// (the session is system-wide: other programs' cats too)
			if r.fields[1] == shPid {
				procs++
			} else {
				others = append(others, fmt.Sprintf("%d of %d", r.fields[0], r.fields[1]))
			}
		}
	}
	if execs < 2 || procs < 2 {
		t.Fatalf("%d MTE_EXEC records of cat, %d MTE_PROCESS records of cat with the shell %d as parent, want 2 each (other cats: pid of ppid %v)", execs, procs, shPid, others)
	}
}

// TestPollInRuntimePoller: with Options.Poll the reader waits in the Go
// runtime's poller: a ring past its watermark wakes it long before the
// poll's deadline, and Stop ends its wait at once.
func TestPollInRuntimePoller(t *testing.T) {
	needRoot(t)
	const poll = 40 * time.Second
	sink := &memSink{}
	// 16-page rings: a quarter (16 KB) is some 60 samples with their
	// stacks, less than a second of this thread's.
	s, err := Start(Options{RateHz: 1000, Callstack: true, RingPages: 16, Poll: poll}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if !s.poller {
		t.Fatal("the epoll set is not in the runtime's poller")
	}
	start := time.Now()
	runtime.LockOSThread()
	tid := uint32(unix.Gettid())
	mine := func() int {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		n := 0
		for _, st := range sink.stacks {
			if st.tid == tid {
				n++
			}
		}
		return n
	}
	// Spin until 50 of this thread's samples reached the sink (half the
	// poll is the hang guard: only the watermark delivers them before it).
	for mine() < 50 && time.Since(start) < poll/2 {
		spin(10 * time.Millisecond)
	}
	runtime.UnlockOSThread()
	got, waited := mine(), time.Since(start)
	t0 := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	stop := time.Since(t0)
	t.Logf("%d samples of this thread within %v; Stop took %v (poll %v)", got, waited, stop, poll)
	if got < 50 {
		t.Errorf("%d samples of this thread reached the sink in %v of a %v poll: the watermark did not wake the reader", got, waited, poll)
	}
	if stop >= poll/2 {
		t.Errorf("Stop took %v: it waited for the poll's deadline (%v)", stop, poll)
	}
}
