package ptt

import (
	"errors"
	"math"
	"math/big"
	"os"
	"os/exec"
	"perfinsp/internal/testenv"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func threadCPU(t testing.TB) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatalf("clock_gettime: %v", err)
	}
	return uint64(ts.Nano())
}

// contend starts n busy processes (this test binary re-executed with
// PTT_TEST_SPIN=1) that compete with the measured threads for the CPUs at
// the operating-system level, until the returned stop function is called.
// Processes, not goroutines: goroutines would first compete for Go's Ps.
func contend(t testing.TB, n int) (stop func()) {
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "PTT_TEST_SPIN=1")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a spinner: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	return func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
}

func spin() {
	x := 0
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		for j := 0; j < 1000000; j++ {
			x += j
		}
	}
	_ = x
	os.Exit(0)
}

// stealTicks is the steal column of /proc/stat's cpu line (USER_HZ ticks).
func stealTicks() uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	if len(f) < 9 {
		return 0
	}
	v, _ := strconv.ParseUint(f[8], 10, 64)
	return v
}

func mustInit(t *testing.T, metrics ...string) {
	t.Helper()
	t.Setenv(EnvBackend, "")
	if err := Init(metrics...); err != nil {
		t.Fatalf("Init(%v): %v", metrics, err)
	}
	t.Cleanup(func() { _ = Terminate() })
}

type agreement struct {
	tid            int
	mapped, clock  uint64
	syscall        uint64 // the same counter read with read()
	retries, reads uint64
	errPct         float64
	err            error
	dispatches     uint64
}

// measure burns about cpu of CPU time on the calling (locked) thread,
// reading PTT all along, and compares the task-clock delta with
// CLOCK_THREAD_CPUTIME_ID.
func measure(tb testing.TB, cpu time.Duration) agreement {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	th, err := CurrentThread()
	if err != nil {
		return agreement{err: err}
	}
	defer th.Close()
	v0, d0, err := th.Read2()
	if err != nil {
		return agreement{err: err}
	}
	r0, err := ReadCounter(th.c[0].fd)
	if err != nil {
		return agreement{err: err}
	}
	c0 := threadCPU(tb)
	var reads uint64
	x := 0
	// The loop ends on the mapped value: no system call inside it (a Go
	// thread that is preempted inside a system call loses its P and sleeps,
	// which adds dispatches that the Go runtime, not the workload, causes).
	for v := v0; v-v0 < uint64(cpu); v, _ = th.Read1() {
		for j := 0; j < 20000; j++ {
			x += j
		}
		for j := 0; j < 100; j++ {
			if _, err := th.Read1(); err != nil {
				return agreement{err: err}
			}
			reads++
		}
	}
	_ = x
	v1, d1, err := th.Read2()
	if err != nil {
		return agreement{err: err}
	}
	r1, err := ReadCounter(th.c[0].fd)
	if err != nil {
		return agreement{err: err}
	}
	c1 := threadCPU(tb)
	a := agreement{tid: th.Tid(), mapped: v1 - v0, syscall: r1 - r0, clock: c1 - c0, retries: th.Retries(), reads: reads, dispatches: d1 - d0}
	a.errPct = 100 * (float64(a.mapped) - float64(a.clock)) / float64(a.clock)
	return a
}

func cpuPerThread() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PTT_TEST_CPU")); err == nil {
		return d
	}
	return 300 * time.Millisecond
}

func TestTaskClockAgreesWithThreadCPUTime(t *testing.T) {
	// task-clock and CLOCK_THREAD_CPUTIME_ID differ by the interrupt and
	// hypervisor (steal) time inside a thread's slices, which comes in
	// bursts on a shared VM: a measurement over the 1 % limit is repeated,
	// up to three times, every attempt logged. A read that is
	// systematically off fails all three.
	const attempts = 3
	for attempt := 1; attempt <= attempts; attempt++ {
		if !agreementAttempt(t, attempt, attempt == attempts) || attempt == attempts {
			return
		}
		t.Logf("attempt %d over the 1 %% limit: measuring again", attempt)
	}
}

// agreementAttempt measures once; it reports whether a thread was over the
// limit, failing the test for it only when final.
func agreementAttempt(t *testing.T, attempt int, final bool) (over bool) {
	mustInit(t, "task-clock", "context-switches")
	defer func() { _ = Terminate() }() // the next attempt initializes again
	n := runtime.NumCPU() + 1
	stop := contend(t, n)
	defer stop()
	// Several measured threads at once, plus the spinners: more runnable
	// threads than CPUs, so every measured thread is preempted many times.
	// Enough Ps for every measured thread: a locked goroutine waiting for a
	// P makes its OS thread sleep and wake far more often than the kernel's
	// scheduler alone would.
	const measured = 2
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(measured + 2))
	st0, w0 := stealTicks(), time.Now()
	res := make([]agreement, measured)
	var wg sync.WaitGroup
	for i := 0; i < measured; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res[i] = measure(t, cpuPerThread())
		}(i)
	}
	wg.Wait()
	stolen := float64(stealTicks()-st0) * 10e6 / (float64(time.Since(w0)) * float64(runtime.NumCPU()))
	t.Logf("attempt %d: hypervisor steal during the run: %.3f %% of all CPU time (/proc/stat)", attempt, 100*stolen)
	for _, a := range res {
		if a.err != nil {
			t.Fatalf("measure: %v", a.err)
		}
		kernPct := 100 * (float64(a.syscall) - float64(a.clock)) / float64(a.clock)
		t.Logf("tid %d: task-clock mapped %d ns, by read() %d ns, CLOCK_THREAD_CPUTIME_ID %d ns: mapped vs clock %+.4f %%, read() vs clock %+.4f %%; %d reads, %d dispatches, %d retries (with %d spinning processes on %d CPUs)",
			a.tid, a.mapped, a.syscall, a.clock, a.errPct, kernPct, a.reads, a.dispatches, a.retries, n, runtime.NumCPU())
		// The mapped read must reproduce the kernel's own count: the two
		// reads are a few microseconds apart at each end, and the mapped
		// value extrapolates the running slice from the page's time
		// fields, which can drift from the kernel's clock by a few
		// hundredths of a per cent on a loaded VM. A read that misses a
		// slice is off by milliseconds.
		if d := math.Abs(float64(a.mapped) - float64(a.syscall)); d > 5e-4*float64(a.syscall)+50e3 {
			over = true
			if final {
				t.Errorf("tid %d: mapped task-clock %d differs from the read() value %d by %.0f ns", a.tid, a.mapped, a.syscall, d)
			}
		}
		// Against the scheduler's clock the mapped value may differ by as
		// much as the kernel's own task-clock does (steal and interrupt
		// time inside the slices, in bursts on a loaded VM): what PTT must
		// not add is a difference of its own.
		if math.Abs(a.errPct) > 1 && math.Abs(a.errPct-kernPct) > 0.1 {
			over = true
			if !final {
				continue
			}
			t.Errorf("tid %d: mapped task-clock differs from CLOCK_THREAD_CPUTIME_ID by %.4f %% (limit 1 %%; the kernel's own task-clock by read() differs by %+.4f %%: "+
				"perf counts hypervisor steal and other time the scheduler's clock_task leaves out, see docs/ptt.md)", a.tid, a.errPct, kernPct)
		}
	}
	return over
}

func TestRetryPathUnderPreemption(t *testing.T) {
	mustInit(t, "task-clock", "context-switches")
	stop := contend(t, runtime.NumCPU()+1)
	defer stop()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	th, err := CurrentThread()
	if err != nil {
		t.Fatal(err)
	}
	_, cs0, err := th.Read2()
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	var prev uint64
	// Read until the thread has been dispatched often enough to judge the
	// retry path (at least a second; at most 30 on a machine whose
	// scheduler gives long slices).
	start := time.Now()
	for cs := cs0; time.Since(start) < time.Second || (cs-cs0 < 20 && time.Since(start) < 30*time.Second); {
		for i := 0; i < 1000; i++ {
			v, c, err := th.Read2()
			if err != nil {
				t.Fatal(err)
			}
			if v < prev {
				t.Fatalf("task-clock went backwards: %d after %d", v, prev)
			}
			prev, cs = v, c
			reads++
		}
	}
	_, cs1, err := th.Read2()
	if err != nil {
		t.Fatal(err)
	}
	dispatches := cs1 - cs0
	t.Logf("%d reads in %v, %d dispatches of the reading thread, %d retries (process total %d)", reads, time.Since(start).Round(time.Millisecond), dispatches, th.Retries(), Retries())
	if dispatches < 20 {
		t.Fatalf("only %d dispatches under contention: cannot judge the retry path", dispatches)
	}
	if th.Retries() == 0 {
		t.Errorf("the thread was dispatched %d times while hammering reads, but no read was retried", dispatches)
	}
	if th.Retries() > dispatches {
		t.Errorf("%d retries for %d dispatches: a read retried without a dispatch", th.Retries(), dispatches)
	}
}

func TestMappedCountsMatchReadSyscall(t *testing.T) {
	mustInit(t, "context-switches", "task-clock", "page-faults")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	th, err := CurrentThread()
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]uint64, 3)
	for i := 0; i < 20; i++ {
		time.Sleep(200 * time.Microsecond) // a dispatch
		if err := th.Read(vals); err != nil {
			t.Fatal(err)
		}
		sys, err := ReadCounter(th.c[0].fd)
		if err != nil {
			t.Fatal(err)
		}
		if vals[0] != sys {
			t.Fatalf("context-switches: mapped %d, read() %d", vals[0], sys)
		}
	}
	if vals[0] < 20 {
		t.Errorf("context-switches %d after 20 sleeps", vals[0])
	}
	g, err := GetGuarantees()
	if err != nil {
		t.Fatal(err)
	}
	if g.InterruptsFactoredOut || g.NoSyscallRead {
		t.Errorf("guarantees overstate: %+v", g)
	}
	if !g.Metrics[0].Mapped || !g.Metrics[1].Mapped || g.Metrics[2].Mapped {
		t.Errorf("read paths: %+v", g.Metrics)
	}
	t.Logf("guarantees: %+v", g)
}

func TestBadInput(t *testing.T) {
	t.Setenv(EnvBackend, "")
	nine := []string{"task-clock", "cpu-clock", "context-switches", "cpu-migrations", "page-faults", "minor-faults", "major-faults", "cycles", "instructions"}
	err := Init(nine...)
	if err == nil || !strings.Contains(err.Error(), "at most 8") {
		t.Errorf("9 metrics: %v", err)
	}
	err = Init("task-clock", "bogus")
	if err == nil || !strings.Contains(err.Error(), `unknown metric "bogus"`) || !strings.Contains(err.Error(), "task-clock") {
		t.Errorf("unknown metric: %v", err)
	}
	err = Init("task-clock", "task-clock")
	if err == nil {
		t.Errorf("duplicate metric accepted")
	}
	if _, err := CurrentThread(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("CurrentThread before Init: %v", err)
	}
	if err := Terminate(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("Terminate before Init: %v", err)
	}
	t.Setenv(EnvBackend, "kmod")
	if err := Init("task-clock"); err == nil || !strings.Contains(err.Error(), "kmod is not available") {
		t.Errorf("kmod backend without the module: %v", err)
	}
	t.Setenv(EnvBackend, "")
}

func TestHardwareMetricWithoutPMU(t *testing.T) {
	t.Setenv(EnvBackend, "")
	if HasPMU() {
		t.Skip("this machine has a hardware PMU: the no-PMU error cannot be checked here")
	}
	err := Init("task-clock", "instructions")
	if err == nil {
		_ = Terminate()
		t.Fatal("instructions accepted on a machine without a PMU")
	}
	want := "no hardware PMU on this machine: metric instructions needs a hardware counter"
	if err.Error() != want || !errors.Is(err, ErrNoPMU) {
		t.Errorf("got %q, want %q", err, want)
	}
}

func TestReadAfterTerminate(t *testing.T) {
	t.Setenv(EnvBackend, "")
	if err := Init("task-clock", "context-switches", "page-faults"); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	th, err := CurrentThread()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.Read1(); err != nil {
		t.Fatal(err)
	}
	// A reader on another thread hammering while we terminate.
	done := make(chan error)
	reading := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		o, err := CurrentThread()
		if err != nil {
			close(reading)
			done <- err
			return
		}
		vals := make([]uint64, 3)
		for n := 0; ; n++ {
			if err := o.Read(vals); err != nil {
				if n == 0 {
					close(reading)
				}
				done <- err
				return
			}
			if n == 0 {
				close(reading) // terminate while it reads
			}
		}
	}()
	<-reading
	if err := Terminate(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrTerminated) {
		t.Errorf("racing reader got %v, want ErrTerminated", err)
	}
	if _, err := th.Read1(); !errors.Is(err, ErrTerminated) {
		t.Errorf("Read1 after Terminate: %v", err)
	}
	if _, _, err := th.Read2(); !errors.Is(err, ErrTerminated) {
		t.Errorf("Read2 after Terminate: %v", err)
	}
	if err := th.Read(make([]uint64, 3)); !errors.Is(err, ErrTerminated) {
		t.Errorf("Read after Terminate: %v", err)
	}
	if _, err := CurrentThread(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("CurrentThread after Terminate: %v", err)
	}
	// Init works again after Terminate; the stale handle still fails cleanly.
	if err := Init("task-clock"); err != nil {
		t.Fatal(err)
	}
	if _, err := th.Read1(); !errors.Is(err, ErrTerminated) {
		t.Errorf("stale handle after a new Init: %v", err)
	}
	if err := Terminate(); err != nil {
		t.Fatal(err)
	}
}

func TestTSCConversion(t *testing.T) {
	// The kernel's formula against exact big-integer arithmetic.
	for _, c := range []struct {
		cyc   uint64
		mult  uint32
		shift uint16
	}{{0, 1, 0}, {1 << 40, 1638400000, 32}, {123456789012345, 3229203523, 33}, {math.MaxUint64 >> 8, 1 << 31, 31}} {
		want := new(big.Int).Mul(new(big.Int).SetUint64(c.cyc), big.NewInt(int64(c.mult)))
		want.Rsh(want, uint(c.shift))
		got := tscToNs(c.cyc, c.mult, c.shift)
		// The split into quotient and remainder is exact up to the low bits.
		if d := new(big.Int).Sub(want, new(big.Int).SetUint64(got)); d.CmpAbs(big.NewInt(1)) > 0 {
			t.Errorf("tscToNs(%d,%d,%d) = %d, want %s", c.cyc, c.mult, c.shift, got, want)
		}
	}
	if v := pmcValue(100, 0xffffffffffff, 48); v != 99 {
		t.Errorf("48-bit counter -1 plus offset 100 = %d, want 99", v)
	}
	if v := pmcValue(-5, 10, 48); v != 5 {
		t.Errorf("pmcValue(-5,10) = %d", v)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("PTT_TEST_SPIN") == "1" {
		spin()
	}
	if _, err := os.Stat("/proc/sys/kernel/perf_event_paranoid"); err != nil {
		println("ptt tests: perf_event is not available on this kernel: skipping")
		os.Exit(0)
	}
	os.Exit(testenv.Run(m))
}

func TestTSCNeedsTheModule(t *testing.T) {
	if _, err := os.Stat("/dev/pitrace"); err == nil {
		t.Skip("skipped: the pitrace module is loaded here (the VM test covers tsc on the module)")
	}
	t.Setenv(EnvBackend, "")
	err := Init("tsc")
	if err == nil {
		Terminate()
		t.Fatal("tsc was accepted without the pitrace module")
	}
	if !strings.Contains(err.Error(), "pitrace kernel module") || !strings.Contains(err.Error(), "module not loaded") {
		t.Fatalf("error does not say what is missing: %v", err)
	}
	t.Setenv(EnvBackend, "kmod")
	if err := Init("tsc"); err == nil || !strings.Contains(err.Error(), "module not loaded") {
		t.Fatalf("kmod backend without the module: %v", err)
	}
}
