// Package kevents is the daemon backend's source of kernel events: per-CPU
// perf_event sampling (tprof), side-band records (fork, exec, comm, exit,
// executable mmaps → MTE), and tracepoints (sched_switch → dispatch,
// irq/softirq entry and exit → interrupt records). Every CPU's events share
// one perf ring buffer (PERF_EVENT_IOC_SET_OUTPUT), read by one goroutine
// that decodes records straight into the Sink without allocating.
//
// A session that records the scheduler or interrupts reads its rings from
// a thread of its own at real-time priority (realtime.go): those records
// come as fast as the workload switches, and a reader that waits its turn
// for a CPU behind the programs of a busy machine loses them.
//
// All events use CLOCK_MONOTONIC time stamps (use_clockid), the clock of the
// whole facility.
package kevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
	"perfinsp/internal/perfring"
	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/events"
)

// Sink receives records. Calls for one CPU come from one goroutine;
// different CPUs' calls may be concurrent. fields is valid only during the call.
type Sink interface {
	Trace(cpu int, major uint16, minor uint32, t uint64, fields []uint64)
	MTE(cpu int, minor uint32, t uint64, fields []uint64, str string)
	Lost(cpu int, mte bool, n uint64)
	// Stack is the call stack of the tprof sample just delivered on cpu:
	// pcs leaf first (kernel frames, then user frames), kernel how many
	// of them are kernel addresses, truncated whether the depth limit cut it,
	// cfi whether the user frames were unwound by call-frame information
	// (else they are the kernel's frame-pointer walk).
	Stack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool)
	// SwitchStack is the call stack of the thread the dispatch record
	// just delivered on cpu switched out not runnable (sched.go), as Stack.
	SwitchStack(cpu int, t uint64, pid, tid uint32, pcs []uint64, kernel int, truncated, cfi bool)
}

// Options select what to record.
type Options struct {
	// RateHz is the tprof rate: samples per second of CPU time (cpu-clock
	// with a fixed period of 1/RateHz s); 0 turns tprof off. With Event set
	// it is the number of events between samples instead.
	RateHz int
	// Event names the event of event-based tprof, in the syntax of the
	// project's one event table (libperfutil/events: cycles, rHEX,
	// pmu/event=..,umask=../, ...).
	Event string
	// Callstack samples the call stack (kernel and user, by frame
	// pointers) with every tprof tick, at most MaxStack frames (0: 127).
	Callstack bool
	MaxStack  int
	// Unwind: with DWARF, the user part of call stacks is unwound by
	// call-frame information from a copy of Unwind.StackBytes of the
	// user stack per sample (userstack.go), else by frame pointers.
	Unwind   control.Unwind
	Dispatch bool // sched:sched_switch
	// Wakeup records sched:sched_wakeup and sched:sched_wakeup_new.
	Wakeup bool
	// SwitchStacks samples, with Dispatch, the call stack (kernel and
	// user, the user part as Unwind says) of every thread switched out
	// not runnable.
	SwitchStacks bool
	Interrupt    bool  // irq:irq_handler_entry/exit, irq:softirq_entry/exit
	CPUs         []int // nil: every online CPU
	RingPages    int   // per-CPU ring size in pages, a power of two (default 256)
	// Poll, if set, is the longest the reader waits before it reads the
	// rings (a ring a quarter full wakes it earlier), and the wait is in
	// the Go runtime's poller rather than a blocking system call (whose
	// return sets the runtime's monitor thread polling for a while).
	// For an agent that samples at a low rate, a poll of a second or so
	// makes the wake-ups, most of its cost, few. Without it the reader
	// waits at most 100 ms in epoll_wait.
	Poll time.Duration
	// Hold, with Poll, without scheduler or interrupt records and without
	// DWARF unwinding, keeps the records undecoded until they are asked
	// for (Flush, Stop), would be more than the sink has room for
	// (Roomer), or Unhold is called: hold.go. The reader then waits up to
	// a second, woken when a ring is half full (of 2 MB by default).
	Hold bool
}

// CPUStats are one CPU's counts.
type CPUStats struct {
	CPU     int
	Records uint64 // records decoded
	Lost    uint64 // records the kernel dropped
}

// event kinds, found from a sample's identifier.
const (
	kindTick = iota
	kindEvent
	kindSwitch
	kindIRQEntry
	kindIRQExit
	kindSoftEntry
	kindSoftExit
	kindSideband
	kindWakeup
	kindWakeupNew
	kindSwitchWait // sched_switch again, filtered to waits, with the stack (sched.go)
)

// What each event's records carry: no more than the agent reads. A CPU's
// events all write into that CPU's ring, so no record carries its CPU;
// the kernel writes every field of every record of a switch-heavy load
// (several a switch), and the agent reads them all.
const (
	stSample = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME
	// sched_switch and the interrupts: the threads are in the raw data.
	stTrace = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_RAW
	// the wake-ups: the sample's thread is the waker.
	stWakeup = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_RAW
	// The side-band records' trailer (sample_id_all): pid, tid, time.
	stSideband = unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME
	idTrailer  = 16
)

// tracepoint field offsets within the raw data.
type tpFields struct {
	prevPid, prevState, nextPid int // sched_switch
	prevStateSize               int
	irq                         int // irq_handler_entry/exit
	vec                         int // softirq_entry/exit
	wakePid, wakeCPU            int // sched_wakeup, sched_wakeup_new
}

type ring struct {
	cpu    int
	fds    []int
	leader int
	rb     *perfring.Ring // the CPU's ring (the reader counts records and losses)
	krb    *perfring.Ring // with the copier: the kernel's ring, rb its spill ring
	mu     sync.Mutex
	fields [8]uint64
	pcs    []uint64 // a stack's PCs, reused
	fp     []uint64 // the frame-pointer walk of its user part (--unwind dwarf)
	decode func(typ uint32, misc uint16, body []byte)
	// lastNext is the thread sched_switch last switched this CPU to
	// (-1: none seen yet), to tell a switch-in the tracepoint reported
	// from one it did not (see switchIn).
	lastNext int64
	wait     waitPair // the wait sample and DISPATCH of one switch (sched.go)
	unnamed  heldOut  // a switch-out to a thread perf could not name (sched.go)
	tgids    tgidCache
	held     held // Options.Hold: records copied from rb, not yet decoded
	// ids are the identifiers of the ring's events and their kinds:
	// fewer than ten, found faster by a scan than in a map.
	ids []idKind
}

type idKind struct {
	id   uint64
	kind int
}

// kindOf finds the kind of event id of r (or, for a session put together
// by a test, of the session's map).
func (s *Session) kindOf(r *ring, id uint64) (int, bool) {
	for _, k := range r.ids {
		if k.id == id {
			return k.kind, true
		}
	}
	kind, ok := s.kinds[id]
	return kind, ok
}

// Session is a running set of kernel event sources.
type Session struct {
	sink    Sink
	rings   []*ring
	kinds   map[uint64]int
	tp      tpFields
	epfd    int
	pf      *os.File      // with Options.Poll: epfd's owner
	poller  bool          // pf is in the runtime's poller
	poll    time.Duration // Options.Poll
	holding atomic.Bool   // Options.Hold, granted and not ended by Unhold (hold.go)
	roomer  Roomer        // the sink's room, when it says (hold.go)
	stop    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	stopErr error

	// realtime: the reader asks for a real-time thread (realtime.go);
	// readerErr is why it has none (nil: it has one, or did not ask).
	realtime  bool
	readerErr error
	// cp, with a real-time reader: the thread that moves the kernel's
	// rings into spill rings for the reader (copier_cgo.go).
	cp *copier
	// demoted counts the windows the reader read at the ordinary policy
	// (rtGuard): the records of those windows may be lost on a busy
	// machine.
	demoted atomic.Int64

	tgid    sync.Map      // tid -> tgid (uint32)
	tgidGen atomic.Uint64 // changes of tgid's entries (setTgid)
	gone    exitQueue     // exited threads, forgotten from tgid and parents a while later
	parents sync.Map      // pid -> ppid (uint32), from fork records
	execs   sync.Map      // pid -> pendingExec: exec seen, path not yet
	// needPPID: pid -> comm of an exec whose MTE_PROCESS waits for the
	// fork record that names its parent.
	needPPID sync.Map

	callstack    bool
	switchStacks bool // a second sched_switch event samples the stacks of waits
	// sleepsOut: without stacks the sched_switch event leaves out the
	// switch-outs in S and R, which perf's switch-out records write
	// (sched.go)
	sleepsOut bool
	maxStack  int
	uw        *userUnwinder // Options.Unwind.DWARF
	pend      *pendingSink  // with uw: the sink, holding records behind samples that wait for a table
}

// errNoPMU is returned for event-based tprof where there is no hardware
// PMU; it wraps events.ErrNoPMU, the one no-PMU error.
var errNoPMU = fmt.Errorf("%w: event-based tprof needs a hardware counter (use time-based tprof: swtrace setrate HZ without -e)", events.ErrNoPMU)

func perfOpen(attr *unix.PerfEventAttr, cpu, group int) (int, error) {
	attr.Size = uint32(unsafe.Sizeof(*attr))
	attr.Bits |= unix.PerfBitDisabled | unix.PerfBitUseClockID | unix.PerfBitSampleIDAll
	attr.Clockid = unix.CLOCK_MONOTONIC
	fd, err := unix.PerfEventOpen(attr, -1, cpu, group, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	return fd, nil
}

func permHint(err error) error {
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		p, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
		return fmt.Errorf("%w: system-wide perf events need root or CAP_PERFMON (perf_event_paranoid is %s)", err, strings.TrimSpace(string(p)))
	}
	return err
}

// Start opens and enables the events on every CPU and starts the readers.
func Start(opts Options, sink Sink) (*Session, error) {
	cpus := opts.CPUs
	if cpus == nil {
		var err error
		if cpus, err = events.OnlineCPUs(); err != nil {
			return nil, err
		}
	}
	holds := opts.Hold && opts.Poll > 0 && !(opts.Dispatch || opts.Wakeup || opts.Interrupt) && !(opts.Unwind.DWARF && opts.Callstack)
	pages := opts.RingPages
	wake := 4 // the reader is woken when a ring is a quarter full
	if holds {
		// It only copies: woken when a ring is half full, it has the
		// other half's time to run, and wakes a fourth as often.
		wake = 2
	}
	if pages <= 0 {
		pages = 256
		if holds {
			pages = 512
		} else if opts.Unwind.DWARF && (opts.Callstack && opts.RateHz > 0 || opts.SwitchStacks && opts.Dispatch) {
			// A stack copy per sample: 8 KB at 10 kHz is 80 MB/s a
			// CPU; 8 MB rings hold 100 ms of it (of a wait's stack
			// at 10,000 waits a second too).
			pages = 2048
		} else if opts.Dispatch && opts.SwitchStacks {
			// A wait's callchain doubles the bytes of a switch:
			// 8 MB rings hold as many switches as 4 MB without.
			pages = 2048
		} else if opts.Dispatch {
			// Two records per switch (its wake-up): 4 MB rings
			// hold a burst of 20,000 switches a CPU between two
			// drains.
			pages = 1024
		}
	}
	if pages&(pages-1) != 0 {
		return nil, fmt.Errorf("ring size %d pages is not a power of two", pages)
	}
	s := &Session{sink: sink, kinds: map[uint64]int{}, stop: make(chan struct{}), epfd: -1, callstack: opts.Callstack, maxStack: opts.MaxStack,
		switchStacks: opts.SwitchStacks && opts.Dispatch,
		sleepsOut:    opts.Dispatch && !opts.SwitchStacks,
		realtime:     (opts.Dispatch || opts.Wakeup || opts.Interrupt) && opts.Poll <= 0}
	if s.maxStack <= 0 || s.maxStack > trace.UnwindMaxDepth {
		s.maxStack = trace.UnwindMaxDepth
	}
	if opts.Unwind.DWARF && (opts.Callstack || s.switchStacks) {
		if n := opts.Unwind.StackBytes; n < 64 || n > control.MaxStackBytes || n%8 != 0 {
			return nil, fmt.Errorf("stack copy of %d bytes: use a multiple of 8 from 64 to %d", n, control.MaxStackBytes)
		}
		s.uw = newUserUnwinder()
		s.pend = newPendingSink(sink, s.uw)
		s.sink = s.pend
	}
	if holds {
		s.holding.Store(true)
		s.roomer, _ = sink.(Roomer)
	}
	ok := false
	defer func() {
		if !ok {
			s.closeAll()
		}
	}()
	var tpIDs = map[int]uint64{}
	if opts.Dispatch || opts.Interrupt || opts.Wakeup {
		if err := s.loadTracepoints(opts, tpIDs); err != nil {
			return nil, err
		}
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	s.epfd = epfd
	if opts.Poll > 0 {
		s.poll = min(opts.Poll, time.Minute)
		if err := unix.SetNonblock(epfd, true); err != nil {
			return nil, fmt.Errorf("epoll: %w", err)
		}
		s.pf = os.NewFile(uintptr(epfd), "perf events")
		// (Else not in the runtime's poller: epoll_wait, with the poll
		// as its timeout.)
		s.poller = s.pf.SetReadDeadline(time.Time{}) == nil
	}
	for _, cpu := range cpus {
		r := &ring{cpu: cpu, leader: -1, lastNext: -1}
		s.rings = append(s.rings, r)
		// The side-band event owns the ring; the others write into it.
		sb := &unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_DUMMY, Sample_type: stSideband,
			Bits:   unix.PerfBitMmap | unix.PerfBitMmap2 | unix.PerfBitComm | unix.PerfBitCommExec | unix.PerfBitTask | unix.PerfBitWatermark,
			Wakeup: uint32(pages * os.Getpagesize() / wake)}
		if opts.Dispatch {
			// perf's own switch records: the switch-ins sched_switch
			// does not report (see switchIn)
			sb.Bits |= unix.PerfBitContextSwitch
		}
		fd, err := perfOpen(sb, cpu, -1)
		if err != nil {
			return nil, fmt.Errorf("open side-band events on CPU %d: %w", cpu, permHint(err))
		}
		r.leader = fd
		if err := s.addFD(r, fd, kindSideband); err != nil {
			return nil, err
		}
		rb, err := perfring.Map(fd, pages)
		if err != nil {
			return nil, fmt.Errorf("CPU %d: %w", cpu, err)
		}
		r.rb = rb
		r.decode = func(typ uint32, misc uint16, body []byte) { s.record(r, typ, misc, body) }
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(len(s.rings) - 1)}); err != nil {
			return nil, fmt.Errorf("epoll add: %w", err)
		}
		if opts.RateHz > 0 {
			var attr unix.PerfEventAttr
			kind := kindTick
			if opts.Event != "" {
				e, err := events.Parse(opts.Event)
				if err != nil {
					return nil, err
				}
				attr = e.Attr()
				attr.Sample, attr.Sample_type = uint64(opts.RateHz), stSample
				kind = kindEvent
			} else {
				attr = unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Sample: uint64(1e9 / opts.RateHz), Sample_type: stSample}
			}
			if opts.Callstack {
				attr.Sample_type |= unix.PERF_SAMPLE_CALLCHAIN
				attr.Sample_max_stack = uint16(s.maxStack)
				if s.uw != nil {
					// The kernel's frame-pointer walk of the user
					// stack stays: it is kept where call-frame
					// information gives less.
					attr.Sample_type |= unix.PERF_SAMPLE_REGS_USER | unix.PERF_SAMPLE_STACK_USER
					attr.Sample_regs_user = userRegsMask
					attr.Sample_stack_user = uint32(opts.Unwind.StackBytes)
				}
			}
			fd, err := perfOpen(&attr, cpu, -1)
			if err != nil {
				if kind == kindEvent && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV)) {
					return nil, errNoPMU
				}
				return nil, fmt.Errorf("open tprof sampling on CPU %d: %w", cpu, permHint(err))
			}
			if err := s.addFD(r, fd, kind); err != nil {
				return nil, err
			}
		}
		for kind, id := range tpIDs {
			if kind == kindSwitch && s.switchStacks {
				// opened first: see openWaitEvent
				if err := s.openWaitEvent(r, id, opts.Unwind.StackBytes); err != nil {
					return nil, err
				}
			}
			attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Sample: 1, Sample_type: stTrace}
			if kind == kindWakeup || kind == kindWakeupNew {
				attr.Sample_type = stWakeup
			}
			fd, err := perfOpen(&attr, cpu, -1)
			if err != nil {
				return nil, fmt.Errorf("open tracepoint %d on CPU %d: %w", id, cpu, permHint(err))
			}
			if kind == kindSwitch && s.sleepsOut {
				// Without the filter (a kernel that refuses it) the
				// tracepoint reports the sleeps too, and their
				// switch-out records are not written twice.
				_ = setFilter(fd, sleepsOutFilter)
			}
			if err := s.addFD(r, fd, kind); err != nil {
				return nil, err
			}
		}
	}
	for _, r := range s.rings {
		for _, fd := range r.fds {
			if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
				return nil, fmt.Errorf("enable perf event: %w", err)
			}
		}
	}
	if s.realtime {
		if err := s.startCopier(); err != nil {
			return nil, err
		}
	}
	s.wg.Add(1)
	started := make(chan error, 1)
	go s.loop(started)
	s.readerErr = <-started
	ok = true
	return s, nil
}

// startCopier puts the copier between the kernel's rings and the reader:
// s.epfd (the kernel rings' fds) becomes the copier's, and the reader
// waits on a set of its own holding the copier's wake-up.
func (s *Session) startCopier() error {
	cp, err := newCopier(s.rings, s.epfd)
	if err != nil || cp == nil {
		return err
	}
	s.cp = cp
	s.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, cp.wakeFd(), &unix.EpollEvent{Events: unix.EPOLLIN}); err != nil {
		return fmt.Errorf("epoll add: %w", err)
	}
	cp.start(100)
	return nil
}

// addFD records an event's identifier and redirects its output to the CPU's ring.
func (s *Session) addFD(r *ring, fd, kind int) error {
	r.fds = append(r.fds, fd)
	var id uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id))); e != 0 {
		return fmt.Errorf("perf event id: %w", e)
	}
	s.kinds[id] = kind
	r.ids = append(r.ids, idKind{id, kind})
	if fd != r.leader {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, r.leader); err != nil {
			return fmt.Errorf("redirect perf event output: %w", err)
		}
	}
	return nil
}

// tracefsDir finds (or mounts) tracefs.
func tracefsDir() (string, error) {
	for _, d := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		if _, err := os.Stat(d + "/events"); err == nil {
			return d, nil
		}
	}
	if err := unix.Mount("nodev", "/sys/kernel/tracing", "tracefs", 0, ""); err == nil {
		return "/sys/kernel/tracing", nil
	}
	return "", errors.New("tracefs is not mounted and could not be mounted at /sys/kernel/tracing: dispatch and interrupt records need tracepoints")
}

// formatOffsets reads a tracepoint's id and field offsets/sizes.
func formatOffsets(dir, event string) (uint64, map[string][2]int, error) {
	idb, err := os.ReadFile(dir + "/events/" + event + "/id")
	if err != nil {
		return 0, nil, fmt.Errorf("tracepoint %s: %w", event, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(idb)), 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("tracepoint %s id: %w", event, err)
	}
	fb, err := os.ReadFile(dir + "/events/" + event + "/format")
	if err != nil {
		return 0, nil, fmt.Errorf("tracepoint %s: %w", event, err)
	}
	fields := map[string][2]int{}
	for _, line := range strings.Split(string(fb), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "field:") {
			continue
		}
		var name string
		var off, size int
		for _, part := range strings.Split(line, ";") {
			part = strings.TrimSpace(part)
			switch {
			case strings.HasPrefix(part, "field:"):
				decl := strings.Fields(strings.TrimPrefix(part, "field:"))
				if len(decl) > 0 {
					name = decl[len(decl)-1]
					if i := strings.IndexByte(name, '['); i >= 0 {
						name = name[:i]
					}
				}
			case strings.HasPrefix(part, "offset:"):
				if off, err = strconv.Atoi(strings.TrimPrefix(part, "offset:")); err != nil {
					return 0, nil, fmt.Errorf("tracepoint %s: bad field line %q: %w", event, line, err)
				}
			case strings.HasPrefix(part, "size:"):
				if size, err = strconv.Atoi(strings.TrimPrefix(part, "size:")); err != nil {
					return 0, nil, fmt.Errorf("tracepoint %s: bad field line %q: %w", event, line, err)
				}
			}
		}
		if name == "" {
			return 0, nil, fmt.Errorf("tracepoint %s: field line without a name: %q", event, line)
		}
		fields[name] = [2]int{off, size}
	}
	return id, fields, nil
}

func (s *Session) loadTracepoints(opts Options, ids map[int]uint64) error {
	dir, err := tracefsDir()
	if err != nil {
		return err
	}
	need := func(event, field string) (uint64, [2]int, error) {
		id, f, err := formatOffsets(dir, event)
		if err != nil {
			return 0, [2]int{}, err
		}
		v, ok := f[field]
		if !ok {
			return 0, [2]int{}, fmt.Errorf("tracepoint %s has no field %s", event, field)
		}
		return id, v, nil
	}
	if opts.Dispatch {
		id, f, err := formatOffsets(dir, "sched/sched_switch")
		if err != nil {
			return err
		}
		for _, n := range []string{"prev_pid", "prev_state", "next_pid"} {
			if _, ok := f[n]; !ok {
				return fmt.Errorf("tracepoint sched_switch has no field %s", n)
			}
		}
		s.tp.prevPid, s.tp.nextPid = f["prev_pid"][0], f["next_pid"][0]
		s.tp.prevState, s.tp.prevStateSize = f["prev_state"][0], f["prev_state"][1]
		ids[kindSwitch] = id
	}
	if opts.Wakeup {
		if err := s.loadWakeup(dir, ids); err != nil {
			return err
		}
	}
	if opts.Interrupt {
		for _, e := range []struct {
			kind         int
			event, field string
		}{
			{kindIRQEntry, "irq/irq_handler_entry", "irq"},
			{kindIRQExit, "irq/irq_handler_exit", "irq"},
			{kindSoftEntry, "irq/softirq_entry", "vec"},
			{kindSoftExit, "irq/softirq_exit", "vec"},
		} {
			id, f, err := need(e.event, e.field)
			if err != nil {
				return err
			}
			if e.field == "irq" {
				s.tp.irq = f[0]
			} else {
				s.tp.vec = f[0]
			}
			ids[e.kind] = id
		}
	}
	return nil
}

// loop is the reader: it drains the rings when one is past its watermark,
// and at least every 100 ms (Options.Poll). started receives, before the
// first wait, why the reader has no real-time thread it asked for (nil:
// it has one, or did not ask).
func (s *Session) loop(started chan<- error) {
	defer s.wg.Done()
	if s.poller {
		started <- nil
		s.loopPoller()
		return
	}
	var guard *rtGuard
	if s.realtime {
		err := realtimeThread()
		if err == nil {
			guard = newRTGuard()
		}
		started <- err
	} else {
		started <- nil
	}
	timeout := 100
	if s.poll > 0 {
		timeout = max(1, int(s.poll/time.Millisecond))
	}
	events := make([]unix.EpollEvent, len(s.rings))
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		n, err := unix.EpollWait(s.epfd, events, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		_ = n
		if s.cp != nil {
			s.cp.ack()
		}
		// Drain every ring on each wake-up or timeout: records reach the
		// sink within about 100 ms (Options.Poll) even below the
		// watermark.
		s.Flush()
		if guard != nil {
			guard.check()
			s.demoted.Store(int64(guard.demoted))
		}
	}
}

// loopPoller is loop waiting in the runtime's poller (Options.Poll): the
// epoll set is readable when a ring is past its watermark.
func (s *Session) loopPoller() {
	events := make([]unix.EpollEvent, len(s.rings))
	rc, err := s.pf.SyscallConn()
	if err != nil {
		return
	}
	// The runtime's poller reports the set readable once a ring's
	// wake-up reaches it; its own look at the set has then taken the
	// wake-up (perf_poll reports one once), so a wait on the set finds
	// nothing: a call after a wait reads the rings whatever the set says
	// now (the wait on it only takes stale entries off its ready list).
	waited := false
	ready := func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), events, 0)
		if waited || n > 0 || err != nil && !errors.Is(err, unix.EINTR) {
			return true
		}
		waited = true
		return false
	}
	for {
		poll := s.poll
		if s.holding.Load() {
			poll = max(poll, holdPoll)
		}
		// (Stop sets a deadline in the past after closing stop: set
		// here first, it ends this wait; set after, stop is seen.)
		_ = s.pf.SetReadDeadline(time.Now().Add(poll))
		select {
		case <-s.stop:
			return
		default:
		}
		waited = false
		if err := rc.Read(ready); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if s.holding.Load() {
			s.holdAll()
		} else {
			s.Flush()
		}
	}
}

// holdAll copies every ring's records into what it holds (hold.go), or
// decodes them once Unhold was called.
func (s *Session) holdAll() {
	for _, r := range s.rings {
		r.mu.Lock()
		if s.holding.Load() { // (under r.mu: Unhold's Flush comes after)
			s.hold(r)
		} else {
			s.drain(r)
		}
		r.mu.Unlock()
	}
}

// Flush drains what is in the rings now (samples waiting for a table
// stay queued).
func (s *Session) Flush() {
	for _, r := range s.rings {
		r.mu.Lock()
		s.drain(r)
		r.mu.Unlock()
	}
	if s.pend != nil {
		s.pend.retry(false)
	}
}

// HeldSince is the time of the oldest record the session holds back behind
// a sample waiting for a table (ok false when it holds none): a consumer
// that applies records in time order across CPUs must not apply those
// stamped from then on before the held ones come.
func (s *Session) HeldSince() (t uint64, ok bool) {
	if s.pend == nil {
		return 0, false
	}
	return s.pend.heldSince()
}

// Stop disables the events, drains what remains and closes everything.
func (s *Session) Stop() error {
	s.once.Do(func() {
		for _, r := range s.rings {
			for _, fd := range r.fds {
				_ = unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0)
			}
		}
		if s.cp != nil {
			// Its last pass, then the reader reads what it left.
			if err := s.cp.stop(); err != nil {
				s.stopErr = err
			}
		}
		close(s.stop)
		if s.poller {
			_ = s.pf.SetReadDeadline(time.Now())
		}
		s.wg.Wait()
		s.Flush()
		s.flushPending()
		// Execs whose fork record never came (the process predates the
		// session and was gone from /proc): their process records, last.
		t := monoNow()
		s.needPPID.Range(func(k, v any) bool {
			s.sink.MTE(0, trace.MTEProcess, t, []uint64{uint64(k.(uint32)), 0}, v.(string))
			s.needPPID.Delete(k)
			return true
		})
		s.closeAll()
	})
	return s.stopErr
}

func (s *Session) closeAll() {
	if s.uw != nil {
		s.uw.close()
	}
	if s.cp != nil && s.cp.stop() == nil {
		s.cp.close() // the copier no longer reads the kernel's rings
	}
	for _, r := range s.rings {
		r.freeHeld()
		_ = r.rb.Close()
		_ = r.krb.Close()
		for _, fd := range r.fds {
			_ = unix.Close(fd)
		}
		r.fds = nil
	}
	if s.pf != nil {
		_ = s.pf.Close()
		s.pf = nil
		s.epfd = -1
	}
	if s.epfd >= 0 {
		_ = unix.Close(s.epfd)
		s.epfd = -1
	}
}

// Stats returns per-CPU counts.
func (s *Session) Stats() []CPUStats {
	out := make([]CPUStats, 0, len(s.rings))
	for _, r := range s.rings {
		r.mu.Lock()
		st := CPUStats{CPU: r.cpu}
		for _, rb := range []*perfring.Ring{r.rb, r.krb} {
			if rb != nil {
				st.Records += rb.Records
				st.Lost += rb.Lost
			}
		}
		out = append(out, st)
		r.mu.Unlock()
	}
	return out
}

// (encoding/binary's forms compile to one load each, and inline: every
// field of every record is read through them.)
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// drain decodes every record written since the last call, those held
// first (perfring: a record not all written yet is read by the next call).
// Caller holds r.mu.
func (s *Session) drain(r *ring) {
	if len(r.held.chunks) > 0 {
		s.decodeHeld(r)
	}
	r.rb.Drain(r.decode)
	if r.krb != nil && s.cp.direct() {
		r.krb.Drain(r.decode) // what the copier left at its stop
	}
}

// sampleID parses the sample_id trailer of a side-band record (sample type
// stSideband: pid, tid, time).
func sampleID(b []byte) (pid, tid uint32, t uint64, ok bool) {
	if len(b) < idTrailer {
		return 0, 0, 0, false
	}
	tr := b[len(b)-idTrailer:]
	return le32(tr), le32(tr[4:]), le64(tr[8:]), true
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func (s *Session) record(r *ring, typ uint32, misc uint16, b []byte) {
	f := r.fields[:0]
	switch typ {
	case unix.PERF_RECORD_SAMPLE:
		if len(b) < 8 {
			return
		}
		kind, ok := s.kindOf(r, le64(b))
		if !ok {
			return
		}
		b = b[8:]
		switch kind {
		case kindTick, kindEvent:
			// IP, TID, TIME, [CALLCHAIN, [REGS_USER, STACK_USER]]
			if len(b) < 24 {
				return
			}
			ip, pid, tid, t := le64(b), le32(b[8:]), le32(b[12:]), le64(b[16:])
			var flags uint64
			if misc&unix.PERF_RECORD_MISC_CPUMODE_MASK == unix.PERF_RECORD_MISC_KERNEL {
				flags = trace.TprofKernel
			}
			if pid != 0 {
				s.sampledTgid(r, tid, pid)
			}
			if kind == kindTick {
				s.sink.Trace(r.cpu, trace.MajorTprof, trace.TprofTick, t, append(f, uint64(pid), uint64(tid), ip, flags))
			} else {
				s.sink.Trace(r.cpu, trace.MajorTprof, trace.TprofEvent, t, append(f, uint64(pid), uint64(tid), ip, flags, 0))
			}
			if s.callstack && len(b) >= 32 {
				s.stack(r, t, pid, tid, b[24:])
			}
		case kindSwitchWait:
			// TID, TIME, CALLCHAIN, [REGS_USER, STACK_USER] (sched.go)
			if len(b) < 16 {
				return
			}
			pid, tid, t := le32(b), le32(b[4:]), le64(b[8:])
			chain, rest := splitCallchain(b[16:])
			if chain == nil {
				return
			}
			s.waitSample(r, t, pid, tid, chain, rest)
		default:
			// [TID: wake-ups,] TIME, RAW
			var pid, tid uint32
			wake := kind == kindWakeup || kind == kindWakeupNew
			if wake {
				if len(b) < 8 {
					return
				}
				pid, tid, b = le32(b), le32(b[4:]), b[8:]
			}
			if len(b) < 12 {
				return
			}
			t := le64(b)
			rawLen := int(le32(b[8:]))
			raw := b[12:]
			if rawLen > len(raw) {
				return
			}
			raw = raw[:rawLen]
			if wake {
				s.wakeup(r, kind, t, pid, tid, raw)
				return
			}
			if kind == kindSwitch && s.switchStacks {
				t = s.switchTime(r, t, raw)
			}
			if s.tracepoint(r, kind, t, raw) && kind == kindSwitch && s.switchStacks {
				s.switched(r, t, raw)
			}
		}
	case unix.PERF_RECORD_MMAP2:
		// pid, tid, addr, len, pgoff, maj, min, ino, ino_generation, prot, flags, filename
		if len(b) < 64+idTrailer {
			return
		}
		pid, addr, ln, pgoff := le32(b), le64(b[8:]), le64(b[16:]), le64(b[24:])
		prot := le32(b[56:])
		_, _, t, _ := sampleID(b)
		if prot&unix.PROT_EXEC == 0 || misc&unix.PERF_RECORD_MISC_MMAP_DATA != 0 {
			return
		}
		name := cstr(b[64 : len(b)-idTrailer])
		if s.uw != nil && misc&unix.PERF_RECORD_MISC_MMAP_BUILD_ID == 0 && (len(name) > 0 && name[0] == '/' || name == "[vdso]") {
			id := fileID{le32(b[32:]), le32(b[36:]), le64(b[40:])}
			if name == "[vdso]" {
				id = vdsoID
			}
			s.uw.mmap(pid, userMap{start: addr, end: addr + ln, off: pgoff, id: id, path: name})
		}
		if pe, ok := s.execs.LoadAndDelete(pid); ok {
			s.emitExec(r, t, pid, pe.(pendingExec), name)
			f = r.fields[:0]
		}
		s.sink.MTE(r.cpu, trace.MTESegment, t, append(f, uint64(pid), addr, ln, pgoff, uint64(prot)), name)
		if len(name) > 0 && name[0] == '/' && misc&unix.PERF_RECORD_MISC_MMAP_BUILD_ID == 0 {
			// the file mapped (device, inode), by which post tells it
			// from a file put at its path later
			f = r.fields[:0]
			s.sink.MTE(r.cpu, trace.MTEFile, t, append(f, uint64(pid), addr, uint64(le32(b[32:])), uint64(le32(b[36:])), le64(b[40:])), "")
		}
	case unix.PERF_RECORD_MMAP:
		// pid, tid, addr, len, pgoff, filename (older kernels without mmap2)
		if len(b) < 32+idTrailer {
			return
		}
		pid, addr, ln, pgoff := le32(b), le64(b[8:]), le64(b[16:]), le64(b[24:])
		_, _, t, _ := sampleID(b)
		if misc&unix.PERF_RECORD_MISC_MMAP_DATA != 0 {
			return
		}
		s.sink.MTE(r.cpu, trace.MTESegment, t, append(f, uint64(pid), addr, ln, pgoff, uint64(unix.PROT_READ|unix.PROT_EXEC)), cstr(b[32:len(b)-idTrailer]))
	case unix.PERF_RECORD_SWITCH_CPU_WIDE:
		if misc&unix.PERF_RECORD_MISC_SWITCH_OUT != 0 {
			if s.sleepsOut {
				s.switchOut(r, misc, b)
			}
			return
		}
		s.switchIn(r, b)
	case unix.PERF_RECORD_COMM:
		if len(b) < 8+idTrailer {
			return
		}
		pid, tid := le32(b), le32(b[4:])
		comm := cstr(b[8 : len(b)-idTrailer])
		_, _, t, _ := sampleID(b)
		s.setTgid(tid, pid)
		if misc&unix.PERF_RECORD_MISC_COMM_EXEC != 0 {
			// The exec's path comes with the first executable mapping
			// of the new program (the kernel maps it right after this
			// record): the path the program was found at, not the
			// name typed, nor whatever /proc says by the time this
			// record is read.
			if s.uw != nil {
				s.uw.exec(pid)
			}
			if old, ok := s.execs.Swap(pid, pendingExec{tid: tid, comm: comm}); ok {
				s.emitExec(r, t, pid, old.(pendingExec), old.(pendingExec).comm)
			}
		}
		s.sink.MTE(r.cpu, trace.MTEThreadName, t, append(f[:0], uint64(pid), uint64(tid)), comm)
	case unix.PERF_RECORD_FORK, unix.PERF_RECORD_EXIT:
		// pid, ppid, tid, ptid, time
		if len(b) < 24 {
			return
		}
		pid, ppid, tid, ptid, t := le32(b), le32(b[4:]), le32(b[8:]), le32(b[12:]), le64(b[16:])
		if typ == unix.PERF_RECORD_FORK {
			s.setTgid(tid, pid)
			if pid == tid {
				s.parents.Store(pid, ppid)
				if s.uw != nil && pid != ppid {
					s.uw.fork(ppid, pid)
				}
			}
			var flags uint64
			if pid == ppid {
				flags = trace.ForkThread
			}
			s.sink.MTE(r.cpu, trace.MTEFork, t, append(f, uint64(ppid), uint64(ptid), uint64(pid), uint64(tid), flags), "")
			if comm, ok := s.needPPID.LoadAndDelete(pid); ok && pid == tid {
				// The exec was read first: its process record goes here.
				s.sink.MTE(r.cpu, trace.MTEProcess, t, append(r.fields[:0], uint64(pid), uint64(ppid)), comm.(string))
			}
		} else {
			if pe, ok := s.execs.LoadAndDelete(pid); ok && pid == tid {
				s.emitExec(r, t, pid, pe.(pendingExec), pe.(pendingExec).comm)
				f = r.fields[:0]
			}

			if s.uw != nil && pid == tid {
				s.uw.exit(pid)
			}
			s.sink.MTE(r.cpu, trace.MTEExit, t, append(f, uint64(pid), uint64(tid)), "")
			s.forgetExited(tid, pid, t)
		}
	case unix.PERF_RECORD_LOST:
		if len(b) < 16 {
			return
		}
		s.sink.Lost(r.cpu, false, le64(b[8:])) // the ring counts it too (Stats)
	}
}

// Callchain context markers (PERF_CONTEXT_*): values this high are not PCs.
const perfContextMax = ^uint64(0) - 4095

// stack turns a sample's callchain (u64 nr, then nr entries with
// PERF_CONTEXT_KERNEL / _USER markers) into an UNWIND record.
func (s *Session) stack(r *ring, t uint64, pid, tid uint32, b []byte) {
	nr := int(le64(b))
	if nr > (len(b)-8)/8 {
		nr = (len(b) - 8) / 8
	}
	// The kernel stops at sample_max_stack frames.
	pcs, kernel, truncated := s.chainPCs(r, b)
	b = b[8:]
	if s.pend != nil {
		// The user frames again, by call-frame information (the
		// sample's registers and stack copy follow the callchain),
		// once the tables they need are there.
		r.fp = append(r.fp[:0], pcs[kernel:]...)
		s.pend.userStack(r.cpu, t, pid, tid, pcs[:kernel], r.fp, b[8*nr:], s.maxStack-kernel, truncated, false)
		return
	}
	if len(pcs) == 0 {
		return
	}
	s.sink.Stack(r.cpu, t, pid, tid, pcs, kernel, truncated, false)
}

// UnwindStats returns how user stacks were unwound (with --unwind dwarf;
// ok false without).
func (s *Session) UnwindStats() (UnwindStats, bool) {
	if s.uw == nil {
		return UnwindStats{}, false
	}
	return s.uw.Stats(), true
}

// pendingExec is an exec whose path waits for the program's first
// executable mapping.
type pendingExec struct {
	tid  uint32
	comm string
}

// emitExec writes MTE_EXEC (with the path) and the process's MTE_PROCESS.
// When the parent is not known yet (the fork record is still in another
// CPU's ring and the process is already gone from /proc), MTE_PROCESS waits
// for that fork record and is written with it (or at the process's exit).
func (s *Session) emitExec(r *ring, t uint64, pid uint32, pe pendingExec, path string) {
	f := r.fields[:0]
	s.sink.MTE(r.cpu, trace.MTEExec, t, append(f, uint64(pid), uint64(pe.tid)), path)
	if ppid := s.parent(pid); ppid != 0 {
		s.sink.MTE(r.cpu, trace.MTEProcess, t, append(f[:0], uint64(pid), uint64(ppid)), pe.comm)
		return
	}
	s.needPPID.Store(pid, pe.comm)
}

// parent is a process's parent: from the fork records of the session, else
// (a process older than the session) from /proc.
func (s *Session) parent(pid uint32) uint32 {
	if v, ok := s.parents.Load(pid); ok {
		return v.(uint32)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			if pp, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				s.parents.Store(pid, uint32(pp))
				return uint32(pp)
			}
		}
	}
	return 0
}

// exitKept is how long an exited thread's process stays known: its last
// switch (after its exit record) may be read later from another CPU's
// ring.
const exitKept = 5_000_000_000 // ns

// exitQueue holds exited threads until they are forgotten.
type exitQueue struct {
	mu   sync.Mutex
	ents []exitEnt
	head int
}

type exitEnt struct {
	tid, pid uint32
	t        uint64
	ppid     any // parents' entry of a process (tid == pid) at its exit
}

// forgetExited queues thread tid of pid, exited at t, and forgets the
// threads that exited exitKept before it: the tables of a long-lived
// session (the continuous agent's) hold the threads that live, not every
// thread that ever ran. An entry set again since (the id used again by
// another process) stays.
func (s *Session) forgetExited(tid, pid uint32, t uint64) {
	q := &s.gone
	q.mu.Lock()
	defer q.mu.Unlock()
	e := exitEnt{tid: tid, pid: pid, t: t}
	if tid == pid {
		e.ppid, _ = s.parents.Load(pid)
	}
	q.ents = append(q.ents, e)
	for q.head < len(q.ents) && q.ents[q.head].t+exitKept < t {
		e := q.ents[q.head]
		if s.tgid.CompareAndDelete(e.tid, e.pid) {
			s.tgidGen.Add(1) // the rings' caches held it
		}
		if e.ppid != nil {
			s.parents.CompareAndDelete(e.pid, e.ppid)
		}
		q.ents[q.head] = exitEnt{}
		q.head++
	}
	if q.head > 1024 && q.head*2 > len(q.ents) {
		q.ents = append(q.ents[:0], q.ents[q.head:]...)
		q.head = 0
	}
}

// setTgid records that thread tid is of process pid (a fork or a comm
// record: the tid may be one used again), and empties the rings' caches.
func (s *Session) setTgid(tid, pid uint32) {
	s.tgid.Store(tid, pid)
	s.tgidGen.Add(1)
}

// sampledTgid records that a sample's thread tid is of process pid, as
// the table's first word on tid: through r's cache, which holds what the
// table says of the threads the ring saw last, so that a sample of a
// thread the cache holds does not box its ids into the table again.
func (s *Session) sampledTgid(r *ring, tid, pid uint32) {
	c := &r.tgids
	i := c.slot(s.tgidGen.Load(), tid)
	if c.tid[i] == tid && c.pid[i] == pid {
		return
	}
	v, _ := s.tgid.LoadOrStore(tid, pid)
	c.tid[i], c.pid[i] = tid, v.(uint32)
}

// tgidCache is a ring's cache of tgidOf: a switch-heavy load asks for the
// same few threads' processes several times a switch. Direct-mapped by
// the thread id's low bits; emptied when a fork or comm record changes a
// thread's process or an exited thread is forgotten (tgidGen).
type tgidCache struct {
	gen      uint64
	tid, pid [256]uint32
}

// slot is tid's place in c, c emptied first if the table changed since
// it was filled (gen, the table's tgidGen).
func (c *tgidCache) slot(gen uint64, tid uint32) uint32 {
	if c.gen != gen {
		c.tid = [256]uint32{}
		c.gen = gen
	}
	return tid & 255
}

// tgidIn is tgidOf through r's cache (called from r's reader only).
func (s *Session) tgidIn(r *ring, tid uint32) uint32 {
	if tid == 0 {
		return 0
	}
	c := &r.tgids
	i := c.slot(s.tgidGen.Load(), tid)
	if c.tid[i] == tid {
		return c.pid[i]
	}
	pid := s.tgidOf(tid)
	c.tid[i], c.pid[i] = tid, pid
	return pid
}

// tgidOf maps a thread id to its process id: from what the rings have
// shown, else /proc/TID/status (cached).
func (s *Session) tgidOf(tid uint32) uint32 {
	if tid == 0 {
		return 0
	}
	if v, ok := s.tgid.Load(tid); ok {
		return v.(uint32)
	}
	pid := tid
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(int(tid)) + "/status"); err == nil {
		if i := strings.Index(string(b), "\nTgid:"); i >= 0 {
			line := string(b[i+6:])
			if j := strings.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			if v, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
				pid = uint32(v)
			}
		}
	}
	s.tgid.Store(tid, pid)
	return pid
}

// tracepoint writes the record of a sched_switch or interrupt tracepoint;
// false when its data was too short for one.
func (s *Session) tracepoint(r *ring, kind int, t uint64, raw []byte) bool {
	f := r.fields[:0]
	get32 := func(off int) (uint32, bool) {
		if off+4 > len(raw) {
			return 0, false
		}
		return le32(raw[off:]), true
	}
	switch kind {
	case kindSwitch:
		prev, ok1 := get32(s.tp.prevPid)
		next, ok2 := get32(s.tp.nextPid)
		if !ok1 || !ok2 {
			return false
		}
		state := s.prevState(raw)
		r.lastNext = int64(next)
		s.unnamedIn(r, prev, t)
		s.sink.Trace(r.cpu, trace.MajorDispatch, trace.DispatchSwitch, t, append(f, uint64(s.tgidIn(r, prev)), uint64(prev), uint64(s.tgidIn(r, next)), uint64(next), state))
	case kindIRQEntry, kindIRQExit, kindSoftEntry, kindSoftExit:
		// irq_handler_* carry the irq number, softirq_* the vector.
		off, minor := s.tp.irq, trace.IntrHard
		if kind == kindSoftEntry || kind == kindSoftExit {
			off, minor = s.tp.vec, trace.IntrSoft
		}
		if kind == kindIRQExit || kind == kindSoftExit {
			minor |= trace.ExitBit
		}
		v, ok := get32(off)
		if !ok {
			return false
		}
		s.sink.Trace(r.cpu, trace.MajorInterrupt, minor, t, append(f, uint64(v)))
	}
	return true
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}
