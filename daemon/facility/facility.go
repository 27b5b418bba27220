// Package facility is the trace facility implemented in user space on
// mainline kernel mechanisms: per-CPU MTE and trace buffers (tracebuf) in the
// daemon's memory, fed by perf_event sampling, side-band and tracepoint
// records and a /proc scan (daemon/kevents), written to swtrace.nrm2
// files in the three modes. pitraced serves it over its control socket; it
// has the same semantics as the kernel module.
package facility

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"perfinsp/internal/procscan"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/daemon/kevents"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/format/tracebuf"
	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/events"
)

// Now returns the facility clock: CLOCK_MONOTONIC in ns.
func Now() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// ErrUnsaved is returned by On, Init and SetMode when the buffers hold a
// trace that was never written with Get.
var ErrUnsaved = control.ErrUnsaved

// Source is a running set of kernel event sources (kevents.Session).
type Source interface {
	Stop() error
}

// ReaderReporter is a Source whose reader may run without the priority it
// asked for (kevents.Session: the real-time reader of scheduler and
// interrupt records); ReaderError says why.
type ReaderReporter interface {
	ReaderError() error
}

// UnwindReporter is a Source that unwinds user stacks by call-frame
// information (kevents.Session with --unwind dwarf); ok is false when it
// did not.
type UnwindReporter interface {
	UnwindStats() (st kevents.UnwindStats, ok bool)
}

// Sink receives records from a Source (kevents.Sink).
type Sink = kevents.Sink

// StartFunc starts the kernel event sources feeding sink.
type StartFunc func(opts kevents.Options, sink Sink) (Source, error)

// ScanFunc describes existing tasks (procscan.Scan).
type ScanFunc func(t uint64, emit func(minor uint32, fields []uint64, str string)) error

// Facility is the daemon's trace facility. All methods are safe for
// concurrent use; control operations are serialized.
type Facility struct {
	mu sync.Mutex

	state    string
	cfg      control.Config
	mode     int
	contFile string    // the stream file's name as the client gave it (a label: never opened here)
	contUID  int       // the holder when contFile was set: only they (and root) see it
	owner    int       // uid that holds the facility: configured it, turned it on (-1: none)
	touched  time.Time // the owner's last configuring op
	reserved bool      // configured, not turned on yet: kept for the owner for ReserveTimeout
	onRate   int       // the rate the held trace was taken at
	rateHz   int
	event    string
	enabled  map[uint16]bool

	ncpu  int
	trace []*tracebuf.Buffer
	mte   []*tracebuf.Buffer

	src        Source
	startWall  uint64
	startClock uint64
	kallsyms   []byte
	full       bool // normal mode: a buffer filled and tracing stopped
	unsaved    bool // buffers hold data not yet written
	note       string

	// Streaming (cont: everything; wrap: MTE) to a file while on. The
	// file is the descriptor the client passed at on; streamCopy is a
	// duplicate kept to copy the finished stream out at get.
	stream     *nrm2.Stream
	streamCopy *os.File
	// stopOnWriteErr: a stream write error stops tracing (else tracing
	// goes on and counts what cannot be written as lost).
	stopOnWriteErr bool
	writeErrOnce   sync.Once
	stackDepth     int // call-stack depth limit (0: the default, 127)
	stackUnwind    control.Unwind
	unwound        string // Status.Unwound of the last trace
	drainWake      chan struct{}
	drainDone      chan struct{}
	drainStop      chan struct{}

	seenMu    sync.Mutex
	described map[uint32]bool // pids with MTE written
	sampled   map[uint32]bool // pids seen in samples
	// lastSampled is each CPU's last pid put in sampled, plus one (0:
	// none since on): a CPU's samples are mostly of one process.
	lastSampled []atomic.Uint32
	// holding: the sources hold their records undecoded until asked
	// (kevents.Options.Hold); another writer has them delivered first
	// (deliverHeldLocked) or ends it (unhold).
	holding bool
	// mteScope, when not nil, holds the only processes whose MTE records
	// are written: a trace of ITrace records alone needs its traced
	// processes named, not every process of a busy machine (whose forks
	// and mappings would fill the MTE buffers and stop the trace). A
	// process enters it when an ITrace session is about to trace it
	// (Scope: described from /proc then) or when a process in it forks.
	mteScope map[uint32]bool

	fullOnce sync.Once
	// gate holds the sources' records back while the /proc scan at on is
	// written, so every MTE stream stays in time order (the kernel rings
	// keep the events meanwhile). gateOpen is set once it is closed: the
	// sources' every record then passes without the channel's lock.
	gate     chan struct{}
	gateOpen atomic.Bool

	// StartSource and Scan default to kevents.Start and procscan.Scan;
	// tests replace them.
	StartSource StartFunc
	Scan        ScanFunc
}

// New returns a facility in the free state with the documented defaults.
func New() *Facility {
	f := &Facility{
		state:   control.StateFree,
		owner:   -1,
		contUID: -1,
		mode:    control.ModeNormal,
		rateHz:  control.DefaultRateHz,
		enabled: map[uint16]bool{trace.MajorSys: true, trace.MajorMTE: true, trace.MajorTprof: true},
		ncpu:    possibleCPUs(),
		StartSource: func(opts kevents.Options, sink Sink) (Source, error) {
			return kevents.Start(opts, sink)
		},
		Scan: procscan.Scan,
	}
	return f
}

func possibleCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err == nil {
		// e.g. "0-3" or "0"
		s := strings.TrimSpace(string(b))
		if i := strings.LastIndexAny(s, "-,"); i >= 0 {
			s = s[i+1:]
		}
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return n + 1
		}
	}
	return runtime.NumCPU()
}

// ReaderPoll is the longest the sources' reader waits before it reads the
// kernel's rings when it has no real-time thread (kevents.Options.Poll):
// records reach the buffers within it.
const ReaderPoll = 100 * time.Millisecond

// ReserveTimeout is how long a user who configured the facility (init,
// setrate, enable, ...) keeps it from other users before turning tracing
// on; a trace that is on or not yet written is kept until it is written or
// freed.
const ReserveTimeout = 10 * time.Minute

// Claim checks that uid may configure the facility now and makes uid its
// holder. Another user's trace that is on or not yet written, or another
// user's configuration made less than ReserveTimeout ago and not yet
// turned on, is refused (root may change them, without taking them over).
func (f *Facility) Claim(uid int, root bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.owner >= 0 && f.owner != uid {
		switch {
		case f.state == control.StateOn || f.unsaved:
			if root {
				return nil
			}
			return control.Errorf(control.ErrNotOwner, "the facility holds uid %d's trace (%s, not written yet): only that user or root may change it; ask them to run swtrace get or free", f.owner, f.state)
		case f.reserved && now.Sub(f.touched) < ReserveTimeout:
			if root {
				return nil
			}
			return control.Errorf(control.ErrNotOwner, "uid %d configured the facility at %s and has not traced yet: it stays theirs until %s (or root frees it)",
				f.owner, f.touched.Format("15:04:05"), f.touched.Add(ReserveTimeout).Format("15:04:05"))
		}
	}
	f.owner = uid
	f.touched = now
	f.reserved = f.state != control.StateOn
	return nil
}

// BufferBytes is the memory buffers of cfg take on this machine: trace and
// MTE buffer per CPU, for every possible CPU (cfg's zero sizes are the
// defaults).
func (f *Facility) BufferBytes(cfg control.Config) (int64, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	return int64(cfg.TraceBufSize+cfg.MTEBufSize) * int64(f.ncpu), nil
}

// CPUs is the number of possible CPUs: the buffers there are of each kind.
func (f *Facility) CPUs() int { return f.ncpu }

// Backend names this backend.
func (f *Facility) Backend() string { return "daemon" }

// Init allocates the per-CPU buffers, dropping any earlier ones.
func (f *Facility) Init(cfg control.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.initLocked(cfg)
}

func (f *Facility) initLocked(cfg control.Config) error {
	if f.state == control.StateOn {
		return control.ErrTracingOn
	}
	if f.unsaved {
		return ErrUnsaved
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var tr, mt []*tracebuf.Buffer
	for cpu := 0; cpu < f.ncpu; cpu++ {
		t, err := tracebuf.New(cfg.TraceBufSize, tracebuf.Mode(f.mode))
		if err != nil {
			return fmt.Errorf("trace buffer: %w", err)
		}
		mmode := tracebuf.Mode(f.mode)
		if mmode == tracebuf.Wrap {
			mmode = tracebuf.Cont // MTE is never overwritten: streamed to the file
		}
		m, err := tracebuf.New(cfg.MTEBufSize, mmode)
		if err != nil {
			return fmt.Errorf("MTE buffer: %w", err)
		}
		m.MTE = true
		tr = append(tr, t)
		mt = append(mt, m)
	}
	f.closeStream()
	f.cfg = cfg
	f.trace, f.mte = tr, mt
	f.state = control.StateInitialized
	f.full = false
	f.unsaved = false
	f.note = ""
	f.unwound = ""
	f.fullOnce = sync.Once{}
	f.writeErrOnce = sync.Once{}
	return nil
}

// Enable turns record types on.
func (f *Facility) Enable(majors []uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == control.StateOn {
		return errors.New("tracing is on: run `swtrace off` before changing record types")
	}
	for _, m := range majors {
		f.enabled[m] = true
	}
	return nil
}

// Disable turns record types off (sys and MTE stay on).
func (f *Facility) Disable(majors []uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == control.StateOn {
		return errors.New("tracing is on: run `swtrace off` before changing record types")
	}
	for _, m := range majors {
		if m == trace.MajorSys || m == trace.MajorMTE {
			return fmt.Errorf("%s records are always on", trace.MajorName(m))
		}
		delete(f.enabled, m)
	}
	return nil
}

// SetMode selects the mode and, for wrap and cont, the name of the file
// the facility streams to. The name is a label: the client opens the file
// and passes it to On. The buffers are reallocated in the new mode if they
// exist.
func (f *Facility) SetMode(mode int, contFile string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == control.StateOn {
		return errors.New("tracing is on: run `swtrace off` before changing the mode")
	}
	if mode < control.ModeNormal || mode > control.ModeCont {
		return fmt.Errorf("unknown mode %d", mode)
	}
	if mode != control.ModeNormal {
		if contFile == "" {
			return errors.New("wrap and cont modes need a file to stream to")
		}
		if !filepath.IsAbs(contFile) {
			return fmt.Errorf("stream file %q must be an absolute path", contFile)
		}
	}
	if f.unsaved {
		return ErrUnsaved
	}
	f.mode = mode
	f.contFile = contFile
	f.contUID = f.owner
	if f.state != control.StateFree {
		return f.initLocked(f.cfg)
	}
	return nil
}

// SetStopOnWriteError chooses what a stream write error does: stop tracing
// (stop), or go on counting the records that cannot be written as lost.
func (f *Facility) SetStopOnWriteError(stop bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == control.StateOn {
		return errors.New("tracing is on: run `swtrace off` before changing what a write error does")
	}
	f.stopOnWriteErr = stop
	return nil
}

// SetStackDepth sets the depth limit of call stacks (1..127 frames;
// deeper stacks are recorded truncated and marked so).
func (f *Facility) SetStackDepth(frames int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == control.StateOn {
		return errors.New("tracing is on: run `swtrace off` before changing the stack depth")
	}
	if frames < 1 || frames > trace.UnwindMaxDepth {
		return fmt.Errorf("stack depth %d is out of range: use 1..%d frames", frames, trace.UnwindMaxDepth)
	}
	f.stackDepth = frames
	return nil
}

// SetStackUnwind chooses how the user part of call stacks is unwound: by
// frame pointers (the kernel's walk) or by the code's call-frame
// information from a copy of the user stack (kevents.Options.StackBytes).
func (f *Facility) SetStackUnwind(u control.Unwind) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == control.StateOn {
		return errors.New("tracing is on: run `swtrace off` before changing how stacks are unwound")
	}
	if u.DWARF && (u.StackBytes < 64 || u.StackBytes > control.MaxStackBytes || u.StackBytes%8 != 0) {
		return fmt.Errorf("stack copy of %d bytes: use a multiple of 8 from 64 to %d", u.StackBytes, control.MaxStackBytes)
	}
	if !u.DWARF {
		u.StackBytes = 0
	}
	f.stackUnwind = u
	return nil
}

// SetRate sets the tprof rate and event.
func (f *Facility) SetRate(hz int, event string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == control.StateOn {
		return errors.New("tracing is on: run `swtrace off` before changing the rate")
	}
	if event == "" && (hz <= 0 || hz > control.MaxRateHz) {
		return fmt.Errorf("rate %d is out of range: use 1..%d", hz, control.MaxRateHz)
	}
	if event != "" {
		// Checked now, as the module backend does, not at on.
		e, err := events.Parse(event)
		if err != nil {
			return err
		}
		if hz <= 0 {
			return fmt.Errorf("event-based tprof needs a period of at least 1 %s event", e.Name)
		}
		if e.Hardware && !events.HasPMU() {
			return fmt.Errorf("%w: event-based tprof on %s needs a hardware counter; use time-based sampling: swtrace setrate HZ", events.ErrNoPMU, e.Name)
		}
	}
	f.rateHz = hz
	f.event = event
	return nil
}

// On starts tracing for the user uid. In wrap and cont modes stream is the
// file to stream to, opened by the client (the facility owns it from here;
// it is closed on every error).
func (f *Facility) On(stream *os.File, uid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.onLocked(stream, uid)
	if err != nil && stream != nil && f.stream == nil {
		stream.Close()
	}
	return err
}

func (f *Facility) onLocked(stream *os.File, uid int) error {
	if f.mode != control.ModeNormal {
		if stream == nil {
			return fmt.Errorf("%s mode streams to a file: the client must pass it (swtrace opens the file named by `swtrace mode`)", control.ModeName(f.mode))
		}
		if err := control.CheckRegular(stream); err != nil {
			return err
		}
	}
	switch f.state {
	case control.StateOn:
		return errors.New("tracing is already on")
	case control.StateFree:
		if err := f.initLocked(control.Config{}); err != nil {
			return err
		}
	case control.StateOff:
		if f.unsaved {
			return ErrUnsaved
		}
		if err := f.initLocked(f.cfg); err != nil {
			return err
		}
	}
	f.described = map[uint32]bool{}
	f.sampled = map[uint32]bool{}
	f.lastSampled = make([]atomic.Uint32, len(f.trace))
	f.mteScope = nil
	if f.itraceOnly() {
		f.mteScope = map[uint32]bool{}
	}
	f.unwound = ""
	f.startWall = uint64(time.Now().UnixNano())
	f.startClock = Now()
	f.onRate = f.rateHz
	f.kallsyms = nil
	if f.mode == control.ModeNormal {
		f.kallsyms = nrm2.ReadKallsyms() // streams read their own in the background
	}

	if f.mode != control.ModeNormal {
		if err := f.startStream(stream); err != nil {
			return err
		}
	}
	opts := kevents.Options{
		Callstack: f.enabled[trace.MajorUnwind] && f.enabled[trace.MajorTprof],
		MaxStack:  f.stackDepth,
		Unwind:    f.stackUnwind,
		Dispatch:  f.enabled[trace.MajorDispatch],
		Wakeup:    f.enabled[trace.MajorDispatch],
		// The stack of each thread switched out to wait, with callstack.
		SwitchStacks: f.enabled[trace.MajorUnwind] && f.enabled[trace.MajorDispatch],
		Interrupt:    f.enabled[trace.MajorInterrupt],
	}
	if f.enabled[trace.MajorTprof] {
		opts.RateHz = f.rateHz
		opts.Event = f.event
	}
	if !opts.Dispatch && !opts.Wakeup && !opts.Interrupt {
		// No scheduler or interrupt records, so no real-time reader:
		// it waits in the Go runtime's poller, not in a blocking
		// epoll_wait whose every return sets the runtime's monitor
		// thread polling (a seventh of the agent's CPU with tprof).
		opts.Poll = ReaderPoll
		if f.mode == control.ModeNormal && !f.enabled[trace.MajorITraceU] && !f.enabled[trace.MajorITraceK] {
			// The trace is read once tracing is off (get, info and
			// off ask the sources for their records): sampling costs
			// a copy, the decoding is done once, then.
			opts.Hold = true
		}
	}
	// The /proc scan below is stamped with this time, before any event
	// from the sources: what existed at on is named before it is sampled.
	scanTime := Now()
	f.gate = make(chan struct{})
	f.gateOpen.Store(false)
	src, err := f.StartSource(opts, (*sink)(f))
	if err != nil {
		f.openGate()
		f.abortStream()
		return fmt.Errorf("start kernel event sources: %w", err)
	}
	f.src = src
	f.holding = opts.Hold
	if rr, ok := src.(ReaderReporter); ok {
		if err := rr.ReaderError(); err != nil {
			f.addNote(err.Error())
		}
	}
	f.state = control.StateOn
	f.unsaved = true
	f.owner = uid
	f.touched = time.Now()
	f.reserved = false // the trace, on and then unsaved, keeps it from here
	t := scanTime
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	uname := strings.Join([]string{cstr(uts.Sysname[:]), cstr(uts.Nodename[:]), cstr(uts.Release[:]), cstr(uts.Version[:]), cstr(uts.Machine[:])}, " ")
	f.trace[0].Write(trace.MajorSys, trace.SysInfo, trace.LayoutString, t, []uint64{uint64(f.ncpu), nrm2.ClockMonotonic, 1e9, f.startWall}, uname)
	for cpu := range f.trace {
		f.trace[cpu].Write(trace.MajorSys, trace.SysTraceOn, trace.LayoutFixed, t, []uint64{f.majorsLo(), uint64(f.rateHz)}, "")
	}
	if e, err := events.Parse(f.event); f.event != "" && err == nil && f.enabled[trace.MajorTprof] {
		f.trace[0].Write(trace.MajorSys, trace.SysEvent, trace.LayoutString, t, []uint64{uint64(e.Type), e.Config, uint64(f.rateHz)}, f.event)
	}
	// Describe what exists now. The side-band events are already on, so
	// nothing started after this point is missed.
	if f.mteScope == nil {
		err = f.Scan(scanTime, func(minor uint32, fields []uint64, str string) {
			f.mteRecord(0, minor, scanTime, fields, str)
		})
		if err != nil {
			f.addNote("process scan: " + err.Error())
		}
	}
	f.openGate()
	return nil
}

// itraceOnly tells whether the record types enabled are ITrace's alone
// (besides sys and MTE, always on): the trace then names only the
// processes ITrace traces (mteScope).
func (f *Facility) itraceOnly() bool {
	n := 0
	for m, on := range f.enabled {
		switch {
		case !on || m == trace.MajorSys || m == trace.MajorMTE:
		case m == trace.MajorITraceU || m == trace.MajorITraceK:
			n++
		default:
			return false
		}
	}
	return n > 0
}

// addNote adds a line to what swtrace info notes about this trace.
func (f *Facility) addNote(note string) {
	if f.note != "" {
		f.note += "; "
	}
	f.note += note
}

// openGate lets the sources' records through (the gate's pair: waitGate).
func (f *Facility) openGate() {
	close(f.gate)
	f.gateOpen.Store(true)
}

// waitGate holds a source's record until the gate is open: once it is,
// one atomic load (a record that sees it still shut waits on the
// channel, closed or about to be).
func (f *Facility) waitGate() {
	if !f.gateOpen.Load() {
		<-f.gate
	}
}

func (f *Facility) majorsLo() uint64 {
	var m uint64
	for k := range f.enabled {
		if k < 32 {
			m |= 1 << k
		}
	}
	return m
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Off stops tracing. Live tasks not yet described get MTE records.
func (f *Facility) Off() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != control.StateOn {
		return fmt.Errorf("tracing is not on (state: %s)", f.state)
	}
	return f.offLocked()
}

func (f *Facility) offLocked() error {
	var err error
	f.holding = false
	if f.src != nil {
		err = f.src.Stop()
		if us, ok := f.src.(UnwindReporter); ok {
			if st, ok := us.UnwindStats(); ok {
				f.unwound = st.String()
			}
		}
		f.src = nil
	}
	if f.mode == control.ModeNormal && !f.full && f.anyFull() {
		// a buffer filled (bufferFull, deliverHeldLocked, or the
		// records the sources held, delivered at their stop)
		f.full = true
		f.note = "a buffer filled: tracing stopped (normal mode)"
	}
	t := Now()
	// Every live task seen in samples but not yet described.
	f.seenMu.Lock()
	var missing []uint32
	for pid := range f.sampled {
		if !f.described[pid] {
			missing = append(missing, pid)
		}
	}
	f.seenMu.Unlock()
	sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
	for _, pid := range missing {
		_ = procscan.Describe(int(pid), t, func(minor uint32, fields []uint64, str string) {
			f.mteRecord(0, minor, t, fields, str)
		})
	}
	if !f.full {
		for cpu := range f.trace {
			f.trace[cpu].Write(trace.MajorSys, trace.SysTraceOff, trace.LayoutFixed, t, nil, "")
		}
	}
	f.state = control.StateOff
	if f.mode == control.ModeCont {
		if serr := f.finishStream(); serr != nil && err == nil {
			err = serr
		}
		f.unsaved = false
	}
	return err
}

func (f *Facility) header() nrm2.Header {
	host, _ := os.Hostname()
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return nrm2.Header{
		NCPUs:         uint32(f.ncpu),
		Mode:          uint32(f.mode),
		TraceBufSize:  uint64(f.cfg.TraceBufSize),
		MTEBufSize:    uint64(f.cfg.MTEBufSize),
		StartWallNs:   f.startWall,
		StartClockNs:  f.startClock,
		SegmentSize:   uint64(f.trace[0].SegSize()),
		Backend:       nrm2.BackendDaemon,
		RateHz:        uint32(f.onRate),
		KernelRelease: cstr(uts.Release[:]),
		Hostname:      host,
	}
}

// startStream starts streaming into the client's file and the drainer.
func (f *Facility) startStream(file *os.File) error {
	dup, err := unix.FcntlInt(file.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("keep the stream file: %w", err)
	}
	st, err := nrm2.StartStream(file, f.header())
	if err != nil {
		unix.Close(dup)
		return err
	}
	f.closeStream()
	f.stream = st
	f.streamCopy = os.NewFile(uintptr(dup), file.Name())
	f.drainWake = make(chan struct{}, 1)
	f.drainStop = make(chan struct{})
	f.drainDone = make(chan struct{})
	wake := func() {
		select {
		case f.drainWake <- struct{}{}:
		default:
		}
	}
	for cpu := range f.mte {
		f.mte[cpu].Notify = wake
		if f.mode == control.ModeCont {
			f.trace[cpu].Notify = wake
		}
	}
	go f.drainLoop()
	return nil
}

func (f *Facility) drainLoop() {
	defer close(f.drainDone)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-f.drainWake:
		case <-tick.C:
		case <-f.drainStop:
			return
		}
		f.drainOnce()
	}
}

// drainOnce writes the complete segments waiting in streamed buffers.
func (f *Facility) drainOnce() {
	for cpu := range f.mte {
		f.drainBuf(nrm2.ChunkMTE, cpu, f.mte[cpu])
		if f.mode == control.ModeCont {
			f.drainBuf(nrm2.ChunkTrace, cpu, f.trace[cpu])
		}
	}
}

func (f *Facility) drainBuf(kind uint32, cpu int, b *tracebuf.Buffer) {
	segs := b.Take()
	for _, s := range segs {
		f.stream.Chunk(kind, cpu, s.Data)
	}
	b.Release(segs)
	if f.stopOnWriteErr && f.stream.Err() != nil {
		f.writeErrOnce.Do(func() {
			go func() {
				f.mu.Lock()
				defer f.mu.Unlock()
				if f.state == control.StateOn {
					_ = f.offLocked()
					f.note = "the stream file could not be written (a full disk?): tracing stopped, as chosen with swtrace mode --on-write-error stop; the file ends on its last complete chunk"
				}
			}()
		})
	}
}

func (f *Facility) stopDrainer() {
	if f.drainStop != nil {
		close(f.drainStop)
		<-f.drainDone
		f.drainStop = nil
	}
}

// finishStream flushes every streamed buffer (and in wrap mode the trace
// ring, oldest first) into the stream file and finalizes it.
func (f *Facility) finishStream() error {
	if f.stream == nil {
		return nil
	}
	f.stopDrainer()
	for cpu := range f.mte {
		f.mte[cpu].Flush()
		f.trace[cpu].Flush()
	}
	f.drainOnce()
	if f.mode == control.ModeWrap {
		for cpu := range f.trace {
			f.drainBuf(nrm2.ChunkTrace, cpu, f.trace[cpu])
		}
	}
	err := f.stream.Finish(f.flags(), f.stats())
	f.stream = nil
	if err != nil {
		f.note = "the stream file could not be written in full: " + err.Error() + " (the records that did not fit are counted as lost; the file ends on its last complete chunk)"
	}
	return err
}

func (f *Facility) abortStream() {
	if f.stream != nil {
		f.stopDrainer()
		f.stream.Abort()
		f.stream = nil
	}
}

// closeStream drops the stream file and its copy.
func (f *Facility) closeStream() {
	f.abortStream()
	if f.streamCopy != nil {
		f.streamCopy.Close()
		f.streamCopy = nil
	}
}

func (f *Facility) flags() uint32 {
	if f.full {
		return nrm2.FlagBufferFull
	}
	return 0
}

func (f *Facility) stats() []nrm2.CPUStats {
	out := make([]nrm2.CPUStats, f.ncpu)
	for cpu := range out {
		ts := f.trace[cpu].Stats()
		ms := f.mte[cpu].Stats()
		out[cpu] = nrm2.CPUStats{Records: ts.Records, Lost: ts.Lost, MTERecords: ms.Records, MTELost: ms.Lost, Bytes: ts.Bytes}
		if ts.Full {
			out[cpu].Full |= 1
		}
		if ms.Full {
			out[cpu].Full |= 2
		}
	}
	return out
}

// Get writes the trace into w, a file the client opened. In wrap and cont
// modes w may be nil: the trace is completed in the stream file itself.
// The facility owns w.
func (f *Facility) Get(w *os.File) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.getLocked(w)
	if w != nil && (err != nil || f.mode != control.ModeNormal) {
		w.Close()
	}
	return err
}

func (f *Facility) getLocked(w *os.File) error {
	switch f.state {
	case control.StateOn:
		return control.Errorf(control.ErrTracingOn, "tracing is on: run `swtrace off` first (get does not snapshot a running trace)")
	case control.StateFree, control.StateInitialized:
		return control.ErrNoTrace
	}
	if w != nil {
		if err := control.CheckRegular(w); err != nil {
			return err
		}
	}
	var err error
	switch {
	case f.mode == control.ModeNormal:
		if w == nil {
			return errors.New("normal mode: get needs a file to write to")
		}
		err = nrm2.WriteTrace(w, f.snapshot())
	case f.streamCopy == nil:
		return errors.New("the stream file of this trace is gone (freed or re-initialized)")
	default:
		if f.stream != nil {
			err = f.finishStream()
		}
		if err == nil && w != nil {
			err = copyTrace(w, f.streamCopy)
		}
	}
	if err != nil {
		return err
	}
	f.unsaved = false
	return nil
}

func (f *Facility) snapshot() *nrm2.Snapshot {
	return &nrm2.Snapshot{
		Header:   f.header(),
		Kallsyms: f.kallsyms,
		Segments: func(cpu int, kind uint32, fn func([]byte) error) error {
			b := f.trace[cpu]
			if kind == nrm2.ChunkMTE {
				b = f.mte[cpu]
			}
			// Each, not a copy: tracing is off, and the facility's lock
			// keeps the buffers from being written or freed meanwhile.
			return b.Each(fn)
		},
		Flags: f.flags(),
		Stats: f.stats(),
	}
}

// copyTrace streams a finished stream file into the client's file.
func copyTrace(w, from *os.File) error {
	fi, err := from.Stat()
	if err != nil {
		return fmt.Errorf("stat the stream file: %w", err)
	}
	if err := w.Truncate(0); err != nil {
		return fmt.Errorf("truncate %s: %w", w.Name(), err)
	}
	if _, err := io.CopyBuffer(w, io.NewSectionReader(from, 0, fi.Size()), make([]byte, 1<<20)); err != nil {
		return fmt.Errorf("copy the trace into %s: %w", w.Name(), err)
	}
	return w.Sync()
}

// Info reports the facility's state, all of it (as root sees it).
func (f *Facility) Info() (*control.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.infoLocked(), nil
}

// InfoFor reports the facility's state as user uid may see it: the name of
// the stream file (a path of the user who named it) only to that user while
// they hold the facility, and to root.
func (f *Facility) InfoFor(uid int, root bool) (*control.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.infoLocked()
	if !root && (uid != f.owner || uid != f.contUID) {
		st.ContFile = ""
	}
	return st, nil
}

func (f *Facility) infoLocked() *control.Status {
	f.deliverHeldLocked() // the records the sources hold are counted
	st := &control.Status{
		Backend:      "daemon",
		State:        f.state,
		Mode:         f.mode,
		TraceBufSize: f.cfg.TraceBufSize,
		MTEBufSize:   f.cfg.MTEBufSize,
		RateHz:       f.rateHz,
		Event:        f.event,
		ContFile:     f.contFile,
		StoppedFull:  f.full,
		Note:         f.note,
		Owner:        f.owner,
		Unwound:      f.unwound,
	}
	if f.stream != nil {
		if err := f.stream.Err(); err != nil {
			lt, lm := f.stream.Lost()
			st.StreamError = fmt.Sprintf("%v: %d trace and %d MTE records dropped so far (counted as lost)", err, lt, lm)
		}
	}
	for m := range f.enabled {
		st.Enabled = append(st.Enabled, m)
	}
	sort.Slice(st.Enabled, func(i, j int) bool { return st.Enabled[i] < st.Enabled[j] })
	if f.state != control.StateFree {
		for cpu := range f.trace {
			ts := f.trace[cpu].Stats()
			ms := f.mte[cpu].Stats()
			st.CPUs = append(st.CPUs, control.CPUStatus{CPU: cpu, Records: ts.Records, Lost: ts.Lost, MTERecords: ms.Records, MTELost: ms.Lost, Used: ts.Used, MTEUsed: ms.Used, Full: ts.Full || ms.Full})
		}
	}
	return st
}

// Free releases the buffers. Tracing is stopped first if it is on.
func (f *Facility) Free() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	if f.state == control.StateOn {
		err = f.offLocked()
	}
	f.closeStream()
	f.trace, f.mte = nil, nil
	f.kallsyms = nil
	f.state = control.StateFree
	f.owner = -1
	f.reserved = false
	f.unsaved = false
	f.full = false
	// The buffers' memory goes back to the system now, not at the Go
	// runtime's leisure (its scavenger returns a large heap over minutes).
	debug.FreeOSMemory()
	return err
}

// Writer is who a record written into the trace comes from (the
// connection's credentials): only the user holding the trace, or root, may
// add records to it.
type Writer struct {
	UID  int
	Root bool
}

// mayWriteLocked refuses a writer who is neither the trace's holder nor
// root.
func (f *Facility) mayWriteLocked(w Writer) error {
	if w.Root || f.owner < 0 || f.owner == w.UID {
		return nil
	}
	return control.Errorf(control.ErrNotOwner, "the trace being recorded belongs to uid %d: only that user (or root) may add records to it", f.owner)
}

// MayWrite reports whether w may add records to the trace now (a first
// check for a request of many records; each write checks again).
func (f *Facility) MayWrite(w Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mayWriteLocked(w)
}

// Hook writes a user record from w into cpu's trace buffer at time t.
func (f *Facility) Hook(w Writer, cpu int, t uint64, major uint16, minor uint32, words []uint32, str string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mayWriteLocked(w); err != nil {
		return err
	}
	f.deliverHeldLocked()
	if f.state != control.StateOn {
		return errors.New("tracing is not on")
	}
	if major < trace.MajorUserFirst {
		return fmt.Errorf("user hook records need a major code of 0x%x or more (got 0x%x)", trace.MajorUserFirst, major)
	}
	if len(words) > 0 && str != "" {
		return errors.New("a hook record carries words or a byte string, not both")
	}
	if cpu < 0 || cpu >= len(f.trace) {
		cpu = 0
	}
	fields := make([]uint64, len(words))
	for i, w := range words {
		fields[i] = uint64(w)
	}
	layout := trace.LayoutWords
	if str != "" {
		layout = trace.LayoutBytes
	}
	ok, err := f.trace[cpu].Write(major, minor, layout, t, fields, str)
	if err != nil {
		return err
	}
	if !ok && f.mode == control.ModeNormal && f.trace[cpu].Full() {
		f.bufferFull() // normal mode: a full buffer stops tracing
	}
	return nil
}

// Idle reports whether the facility holds nothing that would be lost if
// the daemon exited: not tracing, and no trace that was never written.
func (f *Facility) Idle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state != control.StateOn && !f.unsaved
}

// Owner returns the uid that holds the facility (configured it or turned
// the held trace on), or -1.
func (f *Facility) Owner() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.owner
}

// State returns the current state name.
func (f *Facility) State() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

// bufferFull stops tracing (normal mode) after a buffer filled. It runs in
// its own goroutine: the sink must not wait for the sources it is called by.
func (f *Facility) bufferFull() {
	f.fullOnce.Do(func() {
		go func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.state != control.StateOn {
				return
			}
			_ = f.offLocked() // (which says why)
		}()
	})
}

func (f *Facility) mteRecord(cpu int, minor uint32, t uint64, fields []uint64, str string) {
	if cpu < 0 || cpu >= len(f.mte) {
		cpu = 0
	}
	spec := trace.Lookup(trace.MajorMTE, minor)
	layout := trace.LayoutFixed
	if spec != nil {
		layout = spec.Layout
	}
	if len(fields) == 0 {
		return
	}
	pid := uint32(fields[0])
	if minor == trace.MTEFork && len(fields) > 2 {
		pid = uint32(fields[2])
	}
	f.seenMu.Lock()
	if f.mteScope != nil && !f.mteScope[pid] {
		// A fork of a process in scope brings its child in.
		if minor != trace.MTEFork || !f.mteScope[uint32(fields[0])] {
			f.seenMu.Unlock()
			return
		}
		f.mteScope[pid] = true
	}
	if minor == trace.MTEProcess || minor == trace.MTEExec || minor == trace.MTESegment || minor == trace.MTEFork {
		if f.described != nil {
			f.described[pid] = true
		}
	}
	f.seenMu.Unlock()
	ok, _ := f.mte[cpu].Write(trace.MajorMTE, minor, layout, t, fields, str)
	if !ok && f.mode == control.ModeNormal && f.mte[cpu].Full() {
		f.bufferFull()
	}
}

// stackBytes holds scratch buffers for the frames of a stack record.
var stackBytes = sync.Pool{New: func() any {
	b := make([]byte, 0, 8*trace.UnwindMaxPCs)
	return &b
}}

// sink adapts the facility to kevents.Sink.
type sink Facility

func (s *sink) Trace(cpu int, major uint16, minor uint32, t uint64, fields []uint64) {
	f := (*Facility)(s)
	f.waitGate()
	if cpu < 0 || cpu >= len(f.trace) {
		return
	}
	if major == trace.MajorTprof && len(fields) > 0 {
		if pid := uint32(fields[0]); f.lastSampled[cpu].Load() != pid+1 {
			f.seenMu.Lock()
			if f.sampled != nil && !f.sampled[pid] {
				f.sampled[pid] = true
			}
			f.seenMu.Unlock()
			f.lastSampled[cpu].Store(pid + 1)
		}
	}
	ok, _ := f.trace[cpu].Write(major, minor, trace.LayoutFixed, t, fields, "")
	if !ok && f.mode == control.ModeNormal && f.trace[cpu].Full() {
		f.bufferFull()
	}
}

// Room is the bytes cpu's trace buffer can still take in normal mode
// (kevents.Roomer: the sources hold no more undecoded than fits).
func (s *sink) Room(cpu int) int64 {
	f := (*Facility)(s)
	if cpu < 0 || cpu >= len(f.trace) || f.mode != control.ModeNormal {
		return 0
	}
	st := f.trace[cpu].Stats()
	if st.Full {
		return 0
	}
	return int64(st.Size - st.Used)
}

// anyFull reports whether a trace or MTE buffer has filled.
func (f *Facility) anyFull() bool {
	for cpu := range f.trace {
		if f.trace[cpu].Full() || f.mte[cpu].Full() {
			return true
		}
	}
	return false
}

// Holder is a Source that can stop holding its records undecoded
// (kevents.Session.Unhold).
type Holder interface {
	Unhold()
}

// deliverHeldLocked has the sources deliver the records they hold before
// a record of another writer goes into the buffers (each CPU's buffers
// stay in time order) or the counts are read. A buffer those records fill
// stops tracing at once in normal mode (as bufferFull would, a moment
// later): the caller sees it stopped. Caller holds f.mu.
func (f *Facility) deliverHeldLocked() {
	fl, ok := f.src.(Flusher)
	if !ok || !f.holding || f.state != control.StateOn {
		return
	}
	fl.Flush()
	if f.mode == control.ModeNormal && f.anyFull() {
		_ = f.offLocked() // (which says why)
	}
}

// unhold ends the sources' holding of records: a writer that writes as
// it goes (an ITrace session) is about to begin.
func (f *Facility) unhold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.src.(Holder); ok && f.holding {
		f.holding = false
		h.Unhold()
	}
}

// Flusher is a Source that can deliver at once the records its rings
// hold (kevents.Session.Flush).
type Flusher interface {
	Flush()
}

// Scope brings the processes an ITrace session is about to trace into
// mteScope (a trace of ITrace records alone) and describes each from
// /proc. The records the sources hold are delivered first, and the
// description is stamped after them: each CPU's MTE buffer stays in time
// order (a fork or exec of the process stamped before the description
// but written after it would be applied after it, and undo it). The
// session starts after this: its records come after the description.
func (s *sink) Scope(pids []int) {
	f := (*Facility)(s)
	f.waitGate()
	f.unhold()
	var fresh []int
	f.seenMu.Lock()
	if f.mteScope != nil {
		for _, pid := range pids {
			if p := uint32(pid); pid > 0 && !f.mteScope[p] {
				f.mteScope[p] = true
				fresh = append(fresh, pid)
			}
		}
	}
	f.seenMu.Unlock()
	if len(fresh) == 0 {
		return
	}
	// Under the facility's lock: the source is not stopped (its rings
	// closed) while it delivers; what it delivers takes no such lock.
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != control.StateOn {
		return
	}
	if fl, ok := f.src.(Flusher); ok {
		fl.Flush()
	}
	t := Now()
	for _, pid := range fresh {
		_ = procscan.Describe(pid, t, func(minor uint32, fields []uint64, str string) {
			f.mteRecord(0, minor, t, fields, str)
		})
	}
}

func (s *sink) MTE(cpu int, minor uint32, t uint64, fields []uint64, str string) {
	(*Facility)(s).waitGate()
	(*Facility)(s).mteRecord(cpu, minor, t, fields, str)
}

func (s *sink) Lost(cpu int, mte bool, n uint64) {
	f := (*Facility)(s)
	f.waitGate()
	if cpu < 0 || cpu >= len(f.trace) {
		return
	}
	if mte {
		f.mte[cpu].AddLost(n)
	} else {
		f.trace[cpu].AddLost(n)
	}
}

func (s *sink) Stack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	s.stack(cpu, trace.UnwindTick, t, pid, tid, pcs, kernel, truncated, cfi)
}

// SwitchStack writes UNWIND_SWITCH: the stack of a thread switched out to wait.
func (s *sink) SwitchStack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	s.stack(cpu, trace.UnwindSwitch, t, pid, tid, pcs, kernel, truncated, cfi)
}

func (s *sink) stack(cpu int, minor uint32, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool) {
	f := (*Facility)(s)
	f.waitGate()
	if cpu < 0 || cpu >= len(f.trace) {
		return
	}
	if len(pcs) > trace.UnwindMaxPCs {
		pcs, truncated = pcs[:trace.UnwindMaxPCs], true
	}
	flags := uint64(kernel) << trace.UnwindKernShift
	if truncated {
		flags |= trace.UnwindTruncated
	}
	if cfi {
		flags |= trace.UnwindCFI
	}
	// The frames as bytes in a scratch buffer from a pool, passed as a
	// string without a copy: Write copies them into the trace buffer and
	// keeps nothing, and the scratch goes back after it (no allocation,
	// nothing cleared, per stack).
	sb := stackBytes.Get().(*[]byte)
	buf := (*sb)[:0]
	for _, pc := range pcs {
		buf = binary.LittleEndian.AppendUint64(buf, pc)
	}
	var str string
	if len(buf) > 0 {
		str = unsafe.String(&buf[0], len(buf))
	}
	fields := [3]uint64{uint64(pid), uint64(tid), flags}
	ok, _ := f.trace[cpu].Write(trace.MajorUnwind, minor, trace.LayoutBytes, t, fields[:], str)
	*sb = buf
	stackBytes.Put(sb)
	if !ok && f.mode == control.ModeNormal && f.trace[cpu].Full() {
		f.bufferFull()
	}
}
