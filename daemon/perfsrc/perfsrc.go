// Package perfsrc is the daemon backend's source of kernel events, read
// through perf_event_open(2) on every traced CPU:
//
//   - tprof: one sampling event per CPU (cpu-clock for time-based tprof, a
//     hardware counter for event-based tprof) → trace.MajorTprof records;
//   - MTE side band: one PERF_COUNT_SW_DUMMY event per CPU with mmap2
//     (executable mappings only), comm + comm_exec and task → fork, exec,
//     exit, thread-name, process and segment MTE records;
//   - tracepoints: sched:sched_switch → dispatch records, irq and softirq
//     entry/exit (and the x86 local timer and IPI vectors where the kernel
//     has them) → interrupt records.
//
// Each CPU has two rings: the side-band event's (the MTE stream) and the
// first trace event's, which the CPU's other trace events share
// (PERF_EVENT_IOC_SET_OUTPUT); records are told apart by
// PERF_SAMPLE_IDENTIFIER. One goroutine per CPU waits in poll(2) (ring
// watermark, or a 50 ms timeout) and decodes the rings into Sink calls
// without allocating per trace record. Every event uses CLOCK_MONOTONIC time
// stamps (use_clockid), the clock of the whole facility.
package perfsrc

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Sink receives records. Calls for one CPU come from one goroutine;
// different CPUs' calls may be concurrent. The fields slice is only valid
// during the call.
type Sink interface {
	// Trace receives a trace-buffer record (tprof, dispatch, interrupt)
	// that happened on cpu at time t (CLOCK_MONOTONIC ns).
	Trace(cpu int, major uint16, minor uint32, t uint64, fields []uint64)
	// MTE receives an MTE record (fork, exec, exit, thread name/comm,
	// executable mmap → MTESegment) seen on cpu.
	MTE(cpu int, minor uint32, t uint64, fields []uint64, str string)
	// Lost reports n events the kernel dropped (PERF_RECORD_LOST) on cpu;
	// mte tells which stream.
	Lost(cpu int, mte bool, n uint64)
}

// Options select what to record.
type Options struct {
	// RateHz is the tprof rate. Time-based (Event == ""): samples per
	// second on each CPU, a cpu-clock event in period mode with a period of
	// 1e9/RateHz ns (exact, so a thread running T seconds of CPU time gets
	// about T*RateHz samples; idle CPUs sample the idle task, pid 0).
	// Event-based (Event != ""): the sampling period in events, one sample
	// every RateHz occurrences of the event. 0 = no tprof.
	RateHz int
	// Event is "" for time-based tprof, else a hardware event name for
	// event-based tprof: cycles, instructions, branches, branch-misses,
	// cache-references, cache-misses, bus-cycles, ref-cycles. Fails with a
	// clear error on a machine without a hardware PMU.
	Event     string
	Dispatch  bool  // sched:sched_switch records
	Interrupt bool  // irq:irq_handler_entry/exit and irq:softirq_entry/exit records (plus x86 timer/IPI vectors)
	CPUs      []int // CPUs to trace (nil = all online CPUs)
	// RingPages is the per-CPU trace ring size in pages, rounded up to a
	// power of two (0 = 256 pages = 1 MiB with 4 KiB pages). The MTE
	// side-band ring of each CPU is a quarter of it, at least 16 pages.
	RingPages int
}

// CPUStats are one CPU's counts.
type CPUStats struct {
	CPU        int
	Records    uint64 // records decoded (trace + MTE)
	Lost       uint64 // records the kernel dropped (trace + MTE)
	Trace      uint64 // trace-stream records decoded (samples, tracepoints)
	MTERecords uint64 // side-band records decoded
	TraceLost  uint64
	MTELost    uint64
	Throttled  uint64 // PERF_RECORD_THROTTLE: the kernel slowed sampling down
}

// MaxTimeRateHz is the highest time-based tprof rate: the kernel does not
// time cpu-clock samples closer than 10 µs apart.
const MaxTimeRateHz = 100_000

// DefaultRingPages is the per-CPU trace ring size used when Options.RingPages is 0.
const DefaultRingPages = 256

// pollTimeoutMs bounds how long a record waits in a ring before it reaches the sink.
const pollTimeoutMs = 50

// HardwareEvents maps the event names Options.Event accepts to PERF_COUNT_HW_* values.
var HardwareEvents = map[string]uint64{
	"cycles":           unix.PERF_COUNT_HW_CPU_CYCLES,
	"cpu-cycles":       unix.PERF_COUNT_HW_CPU_CYCLES,
	"instructions":     unix.PERF_COUNT_HW_INSTRUCTIONS,
	"cache-references": unix.PERF_COUNT_HW_CACHE_REFERENCES,
	"cache-misses":     unix.PERF_COUNT_HW_CACHE_MISSES,
	"branches":         unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
	"branch-misses":    unix.PERF_COUNT_HW_BRANCH_MISSES,
	"bus-cycles":       unix.PERF_COUNT_HW_BUS_CYCLES,
	"ref-cycles":       unix.PERF_COUNT_HW_REF_CPU_CYCLES,
}

// ErrNoPMU is wrapped by the error Start returns for event-based tprof on a
// machine without a hardware PMU.
var ErrNoPMU = errors.New("no hardware PMU on this machine")

// Session is a running set of per-CPU events and their readers.
type Session struct {
	mu      sync.Mutex
	readers []*cpuReader
	wg      sync.WaitGroup
	stopped bool
	tasks   *taskMap
}

// Start opens the perf events on every CPU, enables them and starts one
// reader goroutine per CPU that decodes the rings into sink calls.
func Start(opts Options, sink Sink) (*Session, error) {
	if sink == nil {
		return nil, errors.New("perfsrc: nil sink")
	}
	if opts.RateHz < 0 || opts.RateHz > 1_000_000_000 {
		return nil, fmt.Errorf("perfsrc: tprof rate %d out of range", opts.RateHz)
	}
	if opts.Event == "" && opts.RateHz > MaxTimeRateHz {
		return nil, fmt.Errorf("perfsrc: tprof rate %d Hz is above %d Hz (the kernel's cpu-clock period is at least 10 µs)", opts.RateHz, MaxTimeRateHz)
	}
	if opts.RingPages < 0 {
		return nil, fmt.Errorf("perfsrc: ring size %d pages is negative", opts.RingPages)
	}
	pages := roundPow2(opts.RingPages, DefaultRingPages)
	mtePages := pages / 4
	if mtePages < 16 {
		mtePages = 16
	}
	cpus := opts.CPUs
	if cpus == nil {
		var err error
		if cpus, err = OnlineCPUs(); err != nil {
			return nil, err
		}
	}
	if len(cpus) == 0 {
		return nil, errors.New("perfsrc: no CPUs to trace")
	}
	seen := map[int]bool{}
	for _, c := range cpus {
		if c < 0 || seen[c] {
			return nil, fmt.Errorf("perfsrc: bad or repeated CPU %d", c)
		}
		seen[c] = true
	}

	var evt *eventSpec
	if opts.Event != "" {
		cfg, ok := HardwareEvents[strings.ToLower(opts.Event)]
		if !ok {
			names := make([]string, 0, len(HardwareEvents))
			for n := range HardwareEvents {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("perfsrc: unknown hardware event %q (known: %s)", opts.Event, strings.Join(names, ", "))
		}
		if opts.RateHz == 0 {
			return nil, fmt.Errorf("perfsrc: event-based tprof (%s) needs a sampling period: set the rate to the number of events between samples", opts.Event)
		}
		evt = &eventSpec{name: opts.Event, config: cfg}
	}

	var tps []tpSpec
	if opts.Dispatch {
		tp, err := switchSpec()
		if err != nil {
			return nil, fmt.Errorf("perfsrc: dispatch records: %w", err)
		}
		tps = append(tps, tp)
	}
	if opts.Interrupt {
		l, err := interruptSpecs()
		if err != nil {
			return nil, fmt.Errorf("perfsrc: interrupt records: %w", err)
		}
		tps = append(tps, l...)
	}

	s := &Session{tasks: newTaskMap()}
	for _, cpu := range cpus {
		r, err := openCPU(cpu, opts, evt, tps, pages, mtePages, sink, s.tasks)
		if err != nil {
			s.closeAll()
			return nil, err
		}
		s.readers = append(s.readers, r)
	}
	for _, r := range s.readers {
		r.peers = s.readers
	}
	// enable the side band first, so the tasks the samples name are known
	for _, r := range s.readers {
		if err := r.enable(true); err != nil {
			s.closeAll()
			return nil, err
		}
	}
	for _, r := range s.readers {
		if err := r.enable(false); err != nil {
			s.closeAll()
			return nil, err
		}
	}
	for i, r := range s.readers {
		s.wg.Add(1)
		go r.run(&s.wg, i == 0)
	}
	return s, nil
}

// Flush synchronously drains what is in the rings now into the sink (each
// CPU's reader goroutine does it, so a CPU's sink calls stay on one goroutine).
func (s *Session) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	dones := make([]chan struct{}, len(s.readers))
	for i, r := range s.readers {
		dones[i] = make(chan struct{})
		r.flushReq <- dones[i]
		r.wake()
	}
	for _, d := range dones {
		<-d
	}
}

// Stop disables the events, drains everything that remains into the sink,
// and closes all fds. Safe to call twice.
func (s *Session) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	var errs []error
	for _, r := range s.readers {
		if err := r.disable(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range s.readers {
		close(r.quit) // the reader drains once more, then returns
		r.wake()
	}
	s.wg.Wait()
	s.closeAll()
	return errors.Join(errs...)
}

// Stats returns per-CPU counts of events decoded and lost.
func (s *Session) Stats() []CPUStats {
	out := make([]CPUStats, len(s.readers))
	for i, r := range s.readers {
		st := CPUStats{
			CPU:        r.cpu,
			Trace:      r.nTrace.Load(),
			MTERecords: r.nMTE.Load(),
			TraceLost:  r.lostTrace.Load(),
			MTELost:    r.lostMTE.Load(),
			Throttled:  r.throttled.Load(),
		}
		st.Records = st.Trace + st.MTERecords
		st.Lost = st.TraceLost + st.MTELost
		out[i] = st
	}
	return out
}

func (s *Session) closeAll() {
	for _, r := range s.readers {
		r.close()
	}
}

// OnlineCPUs returns the online CPUs, from /sys/devices/system/cpu/online.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("perfsrc: online CPUs: %w", err)
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("perfsrc: online CPUs: %w", err)
	}
	return cpus, nil
}

// parseCPUList parses a kernel CPU list such as "0-3,5,7-8".
func parseCPUList(s string) ([]int, error) {
	var out []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad CPU list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

func roundPow2(n, def int) int {
	if n <= 0 {
		return def
	}
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// paranoid returns kernel.perf_event_paranoid, or a large value when unknown.
func paranoid() int {
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	if err != nil {
		return 99
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 99
	}
	return v
}

// openError explains a perf_event_open failure.
func openError(what string, cpu int, err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("perfsrc: perf_event_open %s on cpu %d: %w: system-wide events need root (CAP_PERFMON or CAP_SYS_ADMIN) or kernel.perf_event_paranoid <= -1 for tracepoints, <= 0 otherwise (it is %d)", what, cpu, err, paranoid())
	}
	if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
		return fmt.Errorf("perfsrc: perf_event_open %s on cpu %d: %w: raise the open-file limit (ulimit -n)", what, cpu, err)
	}
	return fmt.Errorf("perfsrc: perf_event_open %s on cpu %d: %w", what, cpu, err)
}

// counters shared by readers, kept atomic so Stats can read them any time.
type counters struct {
	nTrace, nMTE, lostTrace, lostMTE, throttled atomic.Uint64
}
