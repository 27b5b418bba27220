// Package ptt is the Go side of PTT, PI's per-thread metric facility: a
// profiler running inside an application reads the calling thread's
// virtualized metrics (CPU time, hardware counters, ...) at every method
// entry and exit without a system call.
//
// Usage:
//
//	if err := ptt.Init("task-clock", "context-switches"); err != nil { ... }
//	defer ptt.Terminate()
//	runtime.LockOSThread()          // the goroutine must stay on its OS thread
//	t, err := ptt.CurrentThread()   // opens this thread's counters (first use)
//	v, err := t.Read1()             // no system call
//
// A Thread belongs to the OS thread that opened it: read it only from the
// goroutine that called CurrentThread, and keep that goroutine locked with
// runtime.LockOSThread, or the values are another thread's.
//
// Two backends provide the work areas. The pitrace module (kmod) gives PI's
// state machine with interrupts factored out: metric tsc, read to the
// instant, and perf metrics as per-CPU counters the module reads at every
// dispatch and interrupt (current to the thread's last one; task-clock is
// not available there). The no-module backend ("daemon", as the trace facility's backend
// without the module; "perf" is accepted, its former name) uses perf_event
// per-thread counters and their mmap pages; see Guarantees for what each
// does and does not promise. Without metrics, Init picks tsc on the module
// and task-clock on the daemon backend.
package ptt

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/kmodbackend"
)

// EnvBackend forces a backend ("kmod" or "daemon": perf events in this
// process), as for the trace facility (control.ChooseBackend).
const EnvBackend = control.EnvBackend

// Errors.
var (
	ErrNotInitialized = errors.New("ptt is not initialized: call ptt.Init first")
	ErrTerminated     = errors.New("ptt was terminated: this thread's work area is gone")
)

// BackendInfo says whether a backend can serve PTT here.
type BackendInfo struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Why       string `json:"why,omitempty"`
}

// KmodStatus reports whether the module backend can serve PTT here.
func KmodStatus() BackendInfo {
	fd, err := unix.Open(devPitrace, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return BackendInfo{Name: "kmod", Why: "module not loaded"}
		}
		return BackendInfo{Name: "kmod", Why: fmt.Sprintf("open %s: %v", devPitrace, err)}
	}
	defer unix.Close(fd)
	if _, err := kmodbackend.PttHooks(fd); err != nil {
		return BackendInfo{Name: "kmod", Why: "the loaded pitrace module has no PTT support: " + err.Error()}
	}
	return BackendInfo{Name: "kmod", Available: true, Why: "tsc and per-CPU perf counters (not task-clock)"}
}

// Backends lists the PTT backends, best first.
func Backends() []BackendInfo {
	return []BackendInfo{KmodStatus(), {Name: "daemon", Available: true, Why: "per-thread perf_event counters (no module; interrupts not factored out)"}}
}

// MetricGuarantee says how one metric is read.
type MetricGuarantee struct {
	Metric string `json:"metric"`
	// Mapped is true when the read needs no system call.
	Mapped bool `json:"mapped"`
	// Path names the read path.
	Path string `json:"path"`
	// KernelCounted is false when kernel-mode work is excluded (permission).
	KernelCounted bool `json:"kernel_counted"`
}

// Guarantees says what the active backend promises.
type Guarantees struct {
	Backend string `json:"backend"`
	// NoSyscallRead: every chosen metric is read without a system call.
	NoSyscallRead bool `json:"no_syscall_read"`
	// InterruptsFactoredOut: time and counts of asynchronous interrupts go to
	// per-CPU interrupt buckets, not to the thread (module only).
	InterruptsFactoredOut bool `json:"interrupts_factored_out"`
	// DispatchCounts: exact per-thread dispatch counts are kept.
	DispatchCounts bool `json:"dispatch_counts"`
	// InterruptCounts: per-thread interrupt counts and per-CPU buckets.
	InterruptCounts bool `json:"interrupt_counts"`
	// RetryDetects names what the read's retry check detects.
	RetryDetects string            `json:"retry_detects"`
	Metrics      []MetricGuarantee `json:"metrics"`
	Notes        []string          `json:"notes,omitempty"`
}

// backend is what a PTT backend implements. The read path itself is not in
// the interface: a backend fills in each Thread's counters (addresses in a
// mapped area and a read routine), and Thread's methods read them.
type backend interface {
	name() string
	openThread(t *Thread) error
	closeThread(t *Thread, terminating bool)
	guarantees() Guarantees
	terminate()
}

var (
	mu      sync.Mutex
	active  backend
	threads map[int]*Thread
	session atomic.Pointer[state]
)

type state struct {
	metrics []Metric
}

// Init is PI's PttInit: select up to eight metrics for every thread of the
// process (none: DefaultMetric of the backend). The metrics are checked on
// the calling thread, so an unknown or unavailable metric fails here with a
// clear error.
func Init(metrics ...string) error {
	parse := func(backend string) ([]Metric, error) {
		if len(metrics) == 0 {
			return ParseMetrics([]string{DefaultMetric(backend)})
		}
		return ParseMetrics(metrics)
	}
	// Check the names before any backend.
	if _, err := parse("daemon"); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if active != nil {
		return errors.New("ptt is already initialized: call ptt.Terminate first")
	}
	var b backend
	var ms []Metric
	kmod := func() error {
		m, err := parse("kmod")
		if err != nil {
			return err
		}
		kb, err := newKmodBackend(m)
		if err != nil {
			return err
		}
		b, ms = kb, m
		return nil
	}
	daemon := func() error {
		m, err := parse("daemon")
		if err != nil {
			return err
		}
		pb, err := newPerfBackend(m)
		if err != nil {
			return err
		}
		b, ms = pb, m
		return nil
	}
	name, err := control.ChooseBackend("")
	if err != nil {
		return err
	}
	switch name {
	case control.BackendKmod:
		if err := kmod(); err != nil {
			return err
		}
	case control.BackendAuto:
		// The module when it is loaded and keeps every chosen metric.
		if err := kmod(); err != nil {
			if err := daemon(); err != nil {
				return err
			}
		}
	case control.BackendDaemon: // perf events in this process
		if err := daemon(); err != nil {
			return err
		}
	}
	active = b
	threads = map[int]*Thread{}
	session.Store(&state{metrics: ms})
	return nil
}

// PttInit is Init under PI's name.
func PttInit(metrics ...string) error { return Init(metrics...) }

// Terminate is PI's PttTerminate: every Thread stops working (its reads
// return ErrTerminated, never fault) and the counters are released.
func Terminate() error {
	mu.Lock()
	defer mu.Unlock()
	if active == nil {
		return ErrNotInitialized
	}
	for _, t := range threads {
		t.dead.Store(true)
		active.closeThread(t, true)
	}
	active.terminate()
	active = nil
	threads = nil
	session.Store(nil)
	return nil
}

// PttTerminate is Terminate under PI's name.
func PttTerminate() error { return Terminate() }

// Active reports the selected metrics, or nil when not initialized.
func Active() []Metric {
	s := session.Load()
	if s == nil {
		return nil
	}
	return append([]Metric(nil), s.metrics...)
}

// GetGuarantees reports what the active backend promises.
func GetGuarantees() (Guarantees, error) {
	mu.Lock()
	defer mu.Unlock()
	if active == nil {
		return Guarantees{}, ErrNotInitialized
	}
	return active.guarantees(), nil
}

// CurrentThread returns the calling OS thread's PTT handle, opening its
// counters on first use (this costs system calls; reads do not). The caller
// must have locked its goroutine with runtime.LockOSThread.
func CurrentThread() (*Thread, error) {
	tid := unix.Gettid()
	mu.Lock()
	defer mu.Unlock()
	if active == nil {
		return nil, ErrNotInitialized
	}
	if t, ok := threads[tid]; ok && !t.dead.Load() {
		return t, nil
	}
	t := &Thread{tid: tid, metrics: session.Load().metrics}
	if err := active.openThread(t); err != nil {
		return nil, fmt.Errorf("ptt: open counters of thread %d: %w", tid, err)
	}
	t.pickReader()
	threads[tid] = t
	return t, nil
}

// Retries sums the retries of every open thread's reads.
func Retries() uint64 {
	mu.Lock()
	defer mu.Unlock()
	var n uint64
	for _, t := range threads {
		n += t.Retries()
	}
	return n
}
