package kevents

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
)

// pingPongEnv makes the test binary the program of pingPong: its value is
// the number of round trips.
const pingPongEnv = "KEVENTS_TEST_PINGPONG"

// pingPong passes a byte back and forth n times between two threads of
// this process through two pipes: about two context switches of each
// thread a round trip. It prints the first thread's id, waits for a line
// on stdin, plays, and prints that thread's context switches as the
// kernel counts them (getrusage(RUSAGE_THREAD): voluntary + involuntary)
// at the start and at the end, and the CLOCK_MONOTONIC times taken just
// after the first count and just before the last.
func pingPong(arg string) int {
	n, err := strconv.Atoi(arg)
	if err != nil || n <= 0 {
		fmt.Fprintln(os.Stderr, "pingpong: bad round trips:", arg)
		return 2
	}
	var ab, ba [2]int
	if unix.Pipe2(ab[:], unix.O_CLOEXEC) != nil || unix.Pipe2(ba[:], unix.O_CLOEXEC) != nil {
		fmt.Fprintln(os.Stderr, "pingpong: pipes")
		return 1
	}
	// Both threads on one CPU: all their records go to one ring.
	var one unix.CPUSet
	one.Set(0)
	go func() {
		runtime.LockOSThread()
		_ = unix.SchedSetaffinity(0, &one)
		b := make([]byte, 1)
		for i := 0; i < n; i++ {
			if _, err := unix.Read(ab[0], b); err != nil {
				os.Exit(1)
			}
			if _, err := unix.Write(ba[1], b); err != nil {
				os.Exit(1)
			}
		}
	}()
	runtime.LockOSThread()
	_ = unix.SchedSetaffinity(0, &one)
	fmt.Println(unix.Gettid())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return 1
	}
	switches := func() int64 {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru)
		return ru.Nvcsw + ru.Nivcsw
	}
	c0 := switches()
	t0 := monoNow()
	b := []byte{1}
	for i := 0; i < n; i++ {
		if _, err := unix.Write(ab[1], b); err != nil {
			return 1
		}
		if _, err := unix.Read(ba[0], b); err != nil {
			return 1
		}
	}
	t1 := monoNow()
	c1 := switches()
	fmt.Println(c0, c1, t0, t1)
	return 0
}

// switchCounter is a sink that keeps the times of one thread's
// switch-outs (in room made before the session starts: the reader
// allocates nothing) and counts what was lost.
type switchCounter struct {
	nullSink // what it does not keep
	tid      uint64
	times    []uint64
	overflow atomic.Uint64
	lost     atomic.Uint64
}

func (c *switchCounter) Trace(cpu int, major uint16, minor uint32, t uint64, f []uint64) {
	if major != trace.MajorDispatch || minor != trace.DispatchSwitch || len(f) < 2 || f[1] != c.tid {
		return
	}
	if len(c.times) == cap(c.times) {
		c.overflow.Add(1)
		return
	}
	c.times = append(c.times, t) // one thread is switched out on one CPU at a time: calls for it do not overlap
}
func (c *switchCounter) Lost(cpu int, mte bool, n uint64) { c.lost.Add(n) }

// Every switch of a switch-heavy program is recorded on a machine whose
// CPUs are taken by other programs, each in a session of its own (as the
// jobs of a busy machine are, the agent in its own): the program's
// switch-outs in the trace are those the kernel counts for it, and no
// record is lost. A reader that waits its turn for a CPU there (the
// kernel wakes it when a ring is a quarter full) finds its rings full.
// The reader's bound (maxRTShare, TestRealtimeReaderBounded) is lifted
// here: on a machine busy with more than this test's loops (a test run's
// other packages, a build beside it) the storm's records can take the
// reader past it, and it then reads at the ordinary policy by design,
// which is not what this test measures.
func TestEverySwitchOfABusyMachine(t *testing.T) {
	needRoot(t)
	defer func(share float64) { maxRTShare = share }(maxRTShare)
	maxRTShare = 2 // a thread's share of a window is at most 1: never down
	const trips = 100000
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	play := exec.Command(exe)
	play.Env = append(os.Environ(), pingPongEnv+"="+strconv.Itoa(trips))
	play.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	play.Stderr = os.Stderr
	in, err := play.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := play.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := play.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = play.Process.Kill(); _ = play.Wait() }()
	out := bufio.NewReader(outPipe)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("ping-pong program: %v", err)
	}
	tid, err := strconv.ParseUint(strings.TrimSpace(line), 10, 32)
	if err != nil {
		t.Fatalf("ping-pong program's thread %q: %v", line, err)
	}

	sink := &switchCounter{tid: tid, times: make([]uint64, 0, 16*trips)}
	s, err := Start(Options{Dispatch: true, Wakeup: true}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := s.ReaderError(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	// Busy loops, two a CPU, each in a session of its own.
	var hogs []*exec.Cmd
	stopHogs := func() {
		for _, h := range hogs {
			_ = h.Process.Kill()
			_ = h.Wait()
		}
		hogs = nil
	}
	defer stopHogs()
	for i := 0; i < 2*runtime.NumCPU(); i++ {
		hog := exec.Command("/bin/sh", "-c", "while :; do :; done")
		hog.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := hog.Start(); err != nil {
			t.Fatal(err)
		}
		hogs = append(hogs, hog)
	}
	start := time.Now()
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	line, err = out.ReadString('\n')
	if err != nil {
		t.Fatalf("ping-pong program: %v", err)
	}
	var c0, c1, t0, t1 uint64
	if _, err := fmt.Sscan(line, &c0, &c1, &t0, &t1); err != nil {
		t.Fatalf("ping-pong program's counts %q: %v", line, err)
	}
	played := time.Since(start)
	stopHogs()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	var lost uint64
	for _, st := range s.Stats() {
		lost += st.Lost
	}
	got := 0
	for _, ts := range sink.times {
		if ts >= t0 && ts <= t1 {
			got++
		}
	}
	want := int(c1 - c0)
	t.Logf("%d round trips on one CPU in %v beside %d busy loops: the kernel counts %d switches of the program's thread, the trace holds %d; %d records lost; reader down %d windows", trips, played.Round(time.Millisecond), 2*runtime.NumCPU(), want, got, lost, s.ReaderDemoted())
	if n := sink.overflow.Load(); n > 0 {
		t.Fatalf("%d switch-outs beyond the test's room for %d", n, cap(sink.times))
	}
	// A switch between a count and the clock's read that goes with it is
	// in the kernel's count, not in the trace's window: two at most.
	if got > want || got < want-2 || lost != 0 || sink.lost.Load() != 0 {
		t.Fatalf("the trace holds %d switch-outs of the program's thread, the kernel counts %d; %d records lost (%d reported to the sink)", got, want, lost, sink.lost.Load())
	}
}

// TestRealtimeReaderBounded: a reader that ran more than maxRTShare of a
// window reads the next window at the ordinary policy, then gets real
// time back; one that ran less keeps it; nothing changes within a window.
func TestRealtimeReaderBounded(t *testing.T) {
	var now, cpu int64
	var sets []bool
	g := &rtGuard{rt: true, now: func() int64 { return now }, cpu: func() int64 { return cpu }, set: func(rt bool) error {
		sets = append(sets, rt)
		return nil
	}}
	step := func(wall, ran time.Duration) {
		now += int64(wall)
		cpu += int64(ran)
		g.check()
	}
	step(500*time.Millisecond, 500*time.Millisecond) // within the window: nothing yet
	if len(sets) != 0 || !g.rt {
		t.Fatalf("within a window: policy changes %v, real time %v", sets, g.rt)
	}
	step(500*time.Millisecond, 300*time.Millisecond) // the window: 80 % running
	if !equalBools(sets, []bool{false}) || g.rt || g.demoted != 1 {
		t.Fatalf("after a window 80 %% running: changes %v, real time %v, %d windows down", sets, g.rt, g.demoted)
	}
	step(time.Second, 900*time.Millisecond) // a window down: back up, however busy
	if !equalBools(sets, []bool{false, true}) || !g.rt {
		t.Fatalf("after a window down: changes %v, real time %v", sets, g.rt)
	}
	step(time.Second, 400*time.Millisecond) // 40 %: kept
	if !equalBools(sets, []bool{false, true}) || !g.rt {
		t.Fatalf("after a window 40 %% running: changes %v, real time %v", sets, g.rt)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
