package perfsrc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/trace"
)

// perf record types (include/uapi/linux/perf_event.h).
const (
	recMmap        = 1
	recLost        = 2
	recComm        = 3
	recExit        = 4
	recThrottle    = 5
	recUnthrottle  = 6
	recFork        = 7
	recSample      = 9
	recMmap2       = 10
	recLostSamples = 13
)

// sampleIDLen is the size of the sample_id trailer of non-sample records
// (sample_id_all with TID|TIME|CPU|IDENTIFIER: pid/tid, time, cpu/res, id),
// the same for every event here.
const sampleIDLen = 32

// kinds of trace event, found from a sample's identifier.
type kind uint8

const (
	kindTick kind = iota
	kindEvent
	kindSwitch
	kindIntr
)

// eventSpec is a hardware event for event-based tprof.
type eventSpec struct {
	name   string
	config uint64
}

// tpSpec is a tracepoint to open and how to turn its raw record into a trace record.
type tpSpec struct {
	tp         *tracepoint
	kind       kind
	minor      uint32
	f1, f2, f3 tpField
}

// evInfo is what the reader knows about one of its CPU's trace events.
type evInfo struct {
	id         uint64
	kind       kind
	minor      uint32
	f1, f2, f3 tpField
	event      uint64 // TprofEvent's event field: the PERF_COUNT_HW_* value
}

func switchSpec() (tpSpec, error) {
	tp, err := loadTracepoint("sched", "sched_switch")
	if err != nil {
		return tpSpec{}, err
	}
	s := tpSpec{tp: tp, kind: kindSwitch, minor: trace.DispatchSwitch}
	if s.f1, err = tp.field("prev_pid"); err != nil {
		return s, err
	}
	if s.f2, err = tp.field("prev_state"); err != nil {
		return s, err
	}
	if s.f3, err = tp.field("next_pid"); err != nil {
		return s, err
	}
	return s, nil
}

// interruptSpecs returns the irq and softirq tracepoints (required) and the
// x86 irq_vectors local timer and IPI tracepoints (when the kernel has them).
func interruptSpecs() ([]tpSpec, error) {
	type want struct {
		sys, name, field string
		minor            uint32
		optional         bool
	}
	wants := []want{
		{"irq", "irq_handler_entry", "irq", trace.IntrHard, false},
		{"irq", "irq_handler_exit", "irq", trace.IntrHard | trace.ExitBit, false},
		{"irq", "softirq_entry", "vec", trace.IntrSoft, false},
		{"irq", "softirq_exit", "vec", trace.IntrSoft | trace.ExitBit, false},
		{"irq_vectors", "local_timer_entry", "vector", trace.IntrTimer, true},
		{"irq_vectors", "local_timer_exit", "vector", trace.IntrTimer | trace.ExitBit, true},
		{"irq_vectors", "reschedule_entry", "vector", trace.IntrIPI, true},
		{"irq_vectors", "reschedule_exit", "vector", trace.IntrIPI | trace.ExitBit, true},
		{"irq_vectors", "call_function_entry", "vector", trace.IntrIPI, true},
		{"irq_vectors", "call_function_exit", "vector", trace.IntrIPI | trace.ExitBit, true},
		{"irq_vectors", "call_function_single_entry", "vector", trace.IntrIPI, true},
		{"irq_vectors", "call_function_single_exit", "vector", trace.IntrIPI | trace.ExitBit, true},
	}
	var out []tpSpec
	for _, w := range wants {
		tp, err := loadTracepoint(w.sys, w.name)
		if err != nil {
			if w.optional && errors.Is(err, errNoTracepoint) {
				continue
			}
			return nil, err
		}
		f, err := tp.field(w.field)
		if err != nil {
			if w.optional {
				continue
			}
			return nil, err
		}
		out = append(out, tpSpec{tp: tp, kind: kindIntr, minor: w.minor, f1: f})
	}
	return out, nil
}

// cpuReader owns one CPU's events, its two rings and its reader goroutine.
type cpuReader struct {
	cpu   int
	sink  Sink
	tasks *taskMap

	mteFd    int
	mte      *ring // side-band ring (MTE stream)
	tr       *ring // trace ring (tprof and tracepoints), nil when none
	traceFds []int // all trace events (the first owns tr)
	evs      []evInfo
	wakeFd   int
	flushReq chan chan struct{}
	quit     chan struct{}

	onMTE, onTrace func([]byte) // method values made once (no per-drain allocation)
	peers          []*cpuReader // every CPU's reader, for peekFork
	peekBuf        []byte
	fields         [8]uint64
	intern         map[string]string

	counters
	bad, unknown atomic.Uint64
}

// baseAttr is what every event shares: disabled until enabled, sample_id_all
// with the same sample_id layout, CLOCK_MONOTONIC time stamps.
func baseAttr() unix.PerfEventAttr {
	var a unix.PerfEventAttr
	a.Size = uint32(unsafe.Sizeof(a))
	a.Bits = unix.PerfBitDisabled | unix.PerfBitSampleIDAll | unix.PerfBitUseClockID
	a.Clockid = unix.CLOCK_MONOTONIC
	a.Sample_type = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU
	return a
}

func perfOpen(a *unix.PerfEventAttr, cpu int) (int, error) {
	for {
		fd, err := unix.PerfEventOpen(a, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

func openCPU(cpu int, opts Options, evt *eventSpec, tps []tpSpec, pages, mtePages int, sink Sink, tasks *taskMap) (_ *cpuReader, err error) {
	c := &cpuReader{
		cpu: cpu, sink: sink, tasks: tasks, mteFd: -1, wakeFd: -1,
		flushReq: make(chan chan struct{}, 1),
		quit:     make(chan struct{}),
		intern:   make(map[string]string, 256),
	}
	c.onMTE, c.onTrace = c.decodeMTE, c.decodeTrace
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.wakeFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("perfsrc: eventfd: %w", err)
	}

	// MTE side band: a dummy event that only carries the side-band records.
	a := baseAttr()
	a.Type = unix.PERF_TYPE_SOFTWARE
	a.Config = unix.PERF_COUNT_SW_DUMMY
	a.Bits |= unix.PerfBitMmap | unix.PerfBitMmap2 | unix.PerfBitComm | unix.PerfBitCommExec | unix.PerfBitTask | unix.PerfBitWatermark
	a.Wakeup = 512 // bytes: an exec's records wake the reader at once
	if c.mteFd, err = perfOpen(&a, cpu); err != nil {
		return nil, openError("side-band (dummy: mmap2, comm, task)", cpu, err)
	}
	if c.mte, err = mapRing(c.mteFd, mtePages); err != nil {
		return nil, fmt.Errorf("perfsrc: cpu %d side band: %w", cpu, err)
	}

	watermark := uint32(pages * unix.Getpagesize() / 4)
	if opts.RateHz > 0 {
		a := baseAttr()
		a.Sample_type |= unix.PERF_SAMPLE_IP
		a.Bits |= unix.PerfBitWatermark
		a.Wakeup = watermark
		info := evInfo{kind: kindTick, minor: trace.TprofTick}
		what := "cpu-clock"
		if evt == nil {
			a.Type = unix.PERF_TYPE_SOFTWARE
			a.Config = unix.PERF_COUNT_SW_CPU_CLOCK
			a.Sample = uint64(1_000_000_000 / opts.RateHz)
		} else {
			a.Type = unix.PERF_TYPE_HARDWARE
			a.Config = evt.config
			a.Sample = uint64(opts.RateHz)
			info = evInfo{kind: kindEvent, minor: trace.TprofEvent, event: evt.config}
			what = evt.name
		}
		fd, err := perfOpen(&a, cpu)
		if err != nil {
			if evt != nil && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV)) {
				return nil, fmt.Errorf("%w: event-based tprof needs a hardware counter (%s)", ErrNoPMU, evt.name)
			}
			return nil, openError(what, cpu, err)
		}
		if err := c.addTrace(fd, info, pages); err != nil {
			return nil, err
		}
	}
	for _, s := range tps {
		a := baseAttr()
		a.Type = unix.PERF_TYPE_TRACEPOINT
		a.Config = s.tp.id
		a.Sample = 1
		a.Sample_type |= unix.PERF_SAMPLE_RAW
		a.Bits |= unix.PerfBitWatermark
		a.Wakeup = watermark
		fd, err := perfOpen(&a, cpu)
		if err != nil {
			return nil, openError(s.tp.system+":"+s.tp.name, cpu, err)
		}
		if err := c.addTrace(fd, evInfo{kind: s.kind, minor: s.minor, f1: s.f1, f2: s.f2, f3: s.f3}, pages); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// addTrace adopts a trace event fd: the first one gets the CPU's trace
// ring, the others write into it.
func (c *cpuReader) addTrace(fd int, info evInfo, pages int) error {
	c.traceFds = append(c.traceFds, fd)
	if c.tr == nil {
		r, err := mapRing(fd, pages)
		if err != nil {
			return fmt.Errorf("perfsrc: cpu %d trace ring: %w", c.cpu, err)
		}
		c.tr = r
	} else if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, c.tr.fd); err != nil {
		return fmt.Errorf("perfsrc: cpu %d: redirect event to the trace ring: %w", c.cpu, err)
	}
	var id uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.PERF_EVENT_IOC_ID), uintptr(unsafe.Pointer(&id))); e != 0 {
		return fmt.Errorf("perfsrc: cpu %d: event id: %w", c.cpu, e)
	}
	info.id = id
	c.evs = append(c.evs, info)
	return nil
}

func (c *cpuReader) enable(sideband bool) error {
	fds := c.traceFds
	if sideband {
		fds = []int{c.mteFd}
	}
	for _, fd := range fds {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fmt.Errorf("perfsrc: cpu %d: enable event: %w", c.cpu, err)
		}
	}
	return nil
}

// disable stops the trace events first, then the side band.
func (c *cpuReader) disable() error {
	var errs []error
	for _, fd := range append(c.traceFds, c.mteFd) {
		if fd < 0 {
			continue
		}
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0); err != nil {
			errs = append(errs, fmt.Errorf("perfsrc: cpu %d: disable event: %w", c.cpu, err))
		}
	}
	return errors.Join(errs...)
}

func (c *cpuReader) close() {
	c.mte.unmap()
	c.tr.unmap()
	for _, fd := range c.traceFds {
		unix.Close(fd)
	}
	c.traceFds = nil
	if c.mteFd >= 0 {
		unix.Close(c.mteFd)
		c.mteFd = -1
	}
	if c.wakeFd >= 0 {
		unix.Close(c.wakeFd)
		c.wakeFd = -1
	}
}

var one = [8]byte{1}

func (c *cpuReader) wake() {
	_, _ = unix.Write(c.wakeFd, one[:])
}

// run is the CPU's reader goroutine: wait for a ring watermark, a wake-up
// (Flush, Stop) or the timeout, then drain both rings (side band first, so
// a task's FORK is known before its samples).
func (c *cpuReader) run(wg *sync.WaitGroup, pruner bool) {
	defer wg.Done()
	pfds := []unix.PollFd{{Fd: int32(c.wakeFd), Events: unix.POLLIN}, {Fd: int32(c.mteFd), Events: unix.POLLIN}}
	if c.tr != nil {
		pfds = append(pfds, unix.PollFd{Fd: int32(c.tr.fd), Events: unix.POLLIN})
	}
	var buf [8]byte
	var lastPrune uint64
	for {
		_, _ = unix.Poll(pfds, pollTimeoutMs)
		if pfds[0].Revents&unix.POLLIN != 0 {
			_, _ = unix.Read(c.wakeFd, buf[:])
		}
		for i := 1; i < len(pfds); i++ {
			if pfds[i].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				pfds[i].Fd = -1 // stop polling it; the timeout still drains
			}
		}
		var done chan struct{}
		select {
		case done = <-c.flushReq:
		default:
		}
		quitting := false
		select {
		case <-c.quit:
			quitting = true
		default:
		}
		c.drain()
		if done != nil {
			close(done)
		}
		if pruner {
			if now := monoNow(); now-lastPrune > 1_000_000_000 {
				c.tasks.prune(now)
				lastPrune = now
			}
		}
		if quitting {
			return
		}
	}
}

func (c *cpuReader) drain() {
	c.mte.drain(c.onMTE)
	c.tr.drain(c.onTrace)
}

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func (c *cpuReader) lookup(id uint64) *evInfo {
	for i := range c.evs {
		if c.evs[i].id == id {
			return &c.evs[i]
		}
	}
	return nil
}

// decodeTrace turns one record of the trace ring into a Sink call.
func (c *cpuReader) decodeTrace(rec []byte) {
	typ := le32(rec)
	misc := le16(rec[4:])
	switch typ {
	case recSample:
		if len(rec) < 16 {
			c.bad.Add(1)
			return
		}
		ev := c.lookup(le64(rec[8:]))
		if ev == nil {
			c.unknown.Add(1)
			return
		}
		p := rec[16:]
		f := &c.fields
		switch ev.kind {
		case kindTick, kindEvent:
			// IDENTIFIER, IP, TID (pid, tid), TIME, CPU
			if len(p) < 32 {
				c.bad.Add(1)
				return
			}
			ip, pid, tid, t := le64(p), le32(p[8:]), le32(p[12:]), le64(p[16:])
			var flags uint64
			if m := misc & unix.PERF_RECORD_MISC_CPUMODE_MASK; m == unix.PERF_RECORD_MISC_KERNEL || m == unix.PERF_RECORD_MISC_GUEST_KERNEL {
				flags = trace.TprofKernel
			}
			c.tasks.seen(pid, tid)
			f[0], f[1], f[2], f[3] = uint64(pid), uint64(tid), ip, flags
			n := 4
			if ev.kind == kindEvent {
				f[4] = ev.event
				n = 5
			}
			c.nTrace.Add(1)
			c.sink.Trace(c.cpu, trace.MajorTprof, ev.minor, t, f[:n])
		default:
			// IDENTIFIER, TID, TIME, CPU, RAW (u32 size, data)
			if len(p) < 28 {
				c.bad.Add(1)
				return
			}
			t := le64(p[8:])
			rsz := int(le32(p[24:]))
			raw := p[28:]
			if rsz > len(raw) {
				c.bad.Add(1)
				return
			}
			raw = raw[:rsz]
			c.nTrace.Add(1)
			if ev.kind == kindSwitch {
				prev, state, next := uint32(ev.f1.get(raw)), ev.f2.get(raw), uint32(ev.f3.get(raw))
				pp, np := c.tasks.tgid(prev, c), c.tasks.tgid(next, c)
				f[0], f[1], f[2], f[3], f[4] = uint64(pp), uint64(prev), uint64(np), uint64(next), uint64(uint32(state))
				c.sink.Trace(c.cpu, trace.MajorDispatch, ev.minor, t, f[:5])
				return
			}
			f[0] = uint64(uint32(ev.f1.get(raw)))
			c.sink.Trace(c.cpu, trace.MajorInterrupt, ev.minor, t, f[:1])
		}
	case recLost:
		if len(rec) < 24 {
			c.bad.Add(1)
			return
		}
		n := le64(rec[16:])
		c.lostTrace.Add(n)
		c.sink.Lost(c.cpu, false, n)
	case recLostSamples:
		if len(rec) < 16 {
			c.bad.Add(1)
			return
		}
		n := le64(rec[8:])
		c.lostTrace.Add(n)
		c.sink.Lost(c.cpu, false, n)
	case recThrottle:
		c.throttled.Add(1)
	}
}

// peekFork looks for the FORK record of thread tid in every CPU's side-band
// ring without consuming anything, and returns the thread's process id. The
// rings' owners may consume records meanwhile, and the kernel then reuse the
// space: a match counts only if the ring's data_tail had not passed the
// record once it was copied (else the owner has decoded it and the task map
// has the answer).
func (c *cpuReader) peekFork(tid uint32) (uint32, bool) {
	if c.peekBuf == nil {
		c.peekBuf = make([]byte, 1<<16)
	}
	for _, p := range c.peers {
		r := p.mte
		if r == nil || r.data == nil {
			continue
		}
		size := uint64(len(r.data))
		head := atomic.LoadUint64(r.head)
		pos := atomic.LoadUint64(r.tail)
		for pos < head {
			off := pos & r.mask
			rsz := uint64(le16(r.data[off+6:]))
			if rsz < 8 || pos+rsz > head {
				break
			}
			n := copy(c.peekBuf, r.data[off:min(off+rsz, size)])
			copy(c.peekBuf[n:rsz], r.data)
			rec := c.peekBuf[:rsz]
			if atomic.LoadUint64(r.tail) > pos {
				break // consumed (and maybe overwritten) under us
			}
			if le32(rec) == recFork && rsz >= 8+16 && le32(rec[16:]) == tid {
				return le32(rec[8:]), true
			}
			pos += rsz
		}
	}
	c.tasks.mu.RLock()
	ti, ok := c.tasks.m[tid]
	c.tasks.mu.RUnlock()
	return ti.tgid, ok
}

// cstr returns b up to its first NUL.
func cstr(b []byte) []byte {
	for i, ch := range b {
		if ch == 0 {
			return b[:i]
		}
	}
	return b
}

// str returns b as a string, sharing one copy per distinct name (library
// paths and comms repeat on every exec).
func (c *cpuReader) str(b []byte) string {
	if s, ok := c.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(c.intern) >= 8192 {
		clear(c.intern)
	}
	c.intern[s] = s
	return s
}

// decodeMTE turns one record of the side-band ring into MTE Sink calls.
func (c *cpuReader) decodeMTE(rec []byte) {
	typ := le32(rec)
	misc := le16(rec[4:])
	n := len(rec)
	if typ == recLost {
		if n < 24 {
			c.bad.Add(1)
			return
		}
		lost := le64(rec[16:])
		c.lostMTE.Add(lost)
		c.sink.Lost(c.cpu, true, lost)
		return
	}
	if n < 8+sampleIDLen {
		c.bad.Add(1)
		return
	}
	t := le64(rec[n-24:]) // sample_id: pid/tid, TIME, cpu, id
	body := rec[8 : n-sampleIDLen]
	f := &c.fields
	switch typ {
	case recFork, recExit:
		// pid, ppid, tid, ptid, time
		if len(body) < 24 {
			c.bad.Add(1)
			return
		}
		pid, ppid, tid, ptid := le32(body), le32(body[4:]), le32(body[8:]), le32(body[12:])
		c.nMTE.Add(1)
		if typ == recFork {
			c.tasks.fork(pid, ppid, tid)
			var flags uint64
			if pid == ppid {
				flags = trace.ForkThread
			}
			f[0], f[1], f[2], f[3], f[4] = uint64(ppid), uint64(ptid), uint64(pid), uint64(tid), flags
			c.sink.MTE(c.cpu, trace.MTEFork, t, f[:5], "")
			return
		}
		c.tasks.exit(tid, t)
		f[0], f[1] = uint64(pid), uint64(tid)
		c.sink.MTE(c.cpu, trace.MTEExit, t, f[:2], "")
	case recComm:
		if len(body) < 8 {
			c.bad.Add(1)
			return
		}
		pid, tid := le32(body), le32(body[4:])
		comm := c.str(cstr(body[8:]))
		c.nMTE.Add(1)
		if misc&unix.PERF_RECORD_MISC_COMM_EXEC != 0 {
			f[0], f[1] = uint64(pid), uint64(tid)
			c.sink.MTE(c.cpu, trace.MTEExec, t, f[:2], exePath(pid, comm))
			f[0], f[1] = uint64(pid), uint64(c.tasks.ppid(pid))
			c.sink.MTE(c.cpu, trace.MTEProcess, t, f[:2], comm)
		}
		f[0], f[1] = uint64(pid), uint64(tid)
		c.sink.MTE(c.cpu, trace.MTEThreadName, t, f[:2], comm)
	case recMmap2:
		// pid, tid, addr, len, pgoff, maj, min, ino, ino_generation (or
		// build id), prot, flags, filename
		if len(body) < 64 {
			c.bad.Add(1)
			return
		}
		pid := le32(body)
		prot := le32(body[56:])
		c.nMTE.Add(1)
		if pid == ^uint32(0) || prot&unix.PROT_EXEC == 0 || misc&unix.PERF_RECORD_MISC_MMAP_DATA != 0 {
			return // kernel-space map, or a data mapping
		}
		f[0], f[1], f[2], f[3], f[4] = uint64(pid), le64(body[8:]), le64(body[16:]), le64(body[24:]), uint64(prot)
		c.sink.MTE(c.cpu, trace.MTESegment, t, f[:5], c.str(cstr(body[64:])))
	case recMmap:
		c.nMTE.Add(1) // only with kernels without mmap2 (before 3.16): not decoded
	}
}

// exePath returns the program a process runs now (readlink /proc/PID/exe),
// or its comm when the process is already gone.
func exePath(pid uint32, comm string) string {
	p, err := os.Readlink("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/exe")
	if err != nil || p == "" {
		return comm
	}
	return p
}
