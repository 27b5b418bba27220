// Package kmodbackend is the trace facility backend on the pitrace kernel
// module: ioctl and mmap on /dev/pitrace (ABI: kmod/uapi/pitrace.h,
// mirrored in abi.go).
//
// The module keeps all state (buffers, mode, rate, enabled record types,
// the stream file name), so every swtrace command is a separate process
// that opens the device, issues one or two ioctls and exits. Get reads the
// per-CPU buffers through read-only mappings and writes the nrm2 file.
//
// Wrap and cont modes need something that copies complete segments out of
// the kernel while tracing is on (cont: every segment; wrap: the MTE
// segments, which are never overwritten). On hands that to the agent
// (pitraced, the system one or the user's own): it opens a /dev/pitrace
// descriptor and the stream file with the caller's rights and passes both;
// the agent runs Drain until tracing is turned off and completes the file.
// Off waits for it. See docs/agent.md and docs/kmod.md.
package kmodbackend

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/events"
)

// Priority is above the daemon backend's, so the module wins when loaded.
const Priority = 20

func init() {
	control.Register(control.Opener{
		Name:      "kmod",
		Priority:  Priority,
		Available: Available,
		Open:      func() (control.Facility, error) { return Open() },
	})
}

// Available reports whether /dev/pitrace exists.
func Available() (bool, string) {
	if _, err := os.Stat(Device); err != nil {
		return false, "the pitrace kernel module is not loaded (" + Device + " is missing): build it for this kernel and load it, " +
			"`make kmod && sudo insmod kmod/pitrace.ko` (`modprobe pitrace` only once it is installed: `sudo make -C kmod install && sudo depmod -a`; see docs/kmod.md)"
	}
	return true, ""
}

// The module records call stacks with a depth limit (swtrace enable --depth).
var _ control.StackDepth = (*Backend)(nil)

// Backend is an open /dev/pitrace.
type Backend struct {
	f  *os.File
	fd uintptr
}

// Open opens the device and checks the ABI version.
func Open() (*Backend, error) {
	f, err := os.OpenFile(Device, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("permission denied on %s: run as root, or have the administrator give a group access (docs/kmod.md: module parameter perm and a udev rule)", Device)
		}
		return nil, fmt.Errorf("open %s: %w", Device, err)
	}
	b, err := newBackend(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return b, nil
}

// newBackend checks that f is the pitrace device and speaks this ABI.
func newBackend(f *os.File) (*Backend, error) {
	b := &Backend{f: f, fd: f.Fd()}
	if err := CheckABI(b.fd); err != nil {
		return nil, err
	}
	return b, nil
}

// CheckABI checks that fd is the pitrace device and speaks this program's
// ABI version. Every Go user of the device calls it (as the C library does).
func CheckABI(fd uintptr) error {
	b := &Backend{fd: fd}
	var si sysinfoArg
	if err := b.ioctl(iocSysinfo, unsafe.Pointer(&si)); err != nil {
		return fmt.Errorf("%s does not answer the pitrace system-info ioctl (%v): is it the pitrace module?", Device, err)
	}
	if si.ABI != ABIVersion {
		return fmt.Errorf("the loaded pitrace module speaks ABI %d, this program ABI %d: rebuild and reload the module from this source tree", si.ABI, ABIVersion)
	}
	return nil
}

func (b *Backend) ioctl(req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, b.fd, req, uintptr(arg))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// Backend names the backend.
func (b *Backend) Backend() string { return "kmod" }

// Close closes the device (the buffers stay in the module).
func (b *Backend) Close() error { return b.f.Close() }

func (b *Backend) status() (*statusArg, error) {
	var st statusArg
	if err := b.ioctl(iocStatus, unsafe.Pointer(&st)); err != nil {
		return nil, fmt.Errorf("pitrace status: %w", err)
	}
	return &st, nil
}

func (b *Backend) cpuStatus(cpu int) (*cpuStatusArg, error) {
	c := cpuStatusArg{CPU: uint32(cpu)}
	if err := b.ioctl(iocCPUStatus, unsafe.Pointer(&c)); err != nil {
		return nil, fmt.Errorf("pitrace status of CPU %d: %w", cpu, err)
	}
	return &c, nil
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// ErrUnsaved is returned when the buffers hold a trace never written.
var ErrUnsaved = control.ErrUnsaved

var errOn = control.ErrTracingOn

// Init allocates the per-CPU buffers in the current mode.
func (b *Backend) Init(cfg control.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	st, err := b.status()
	if err != nil {
		return err
	}
	if st.Flags&stUnsaved != 0 && st.State != stateOn {
		return ErrUnsaved
	}
	a := initArg{TraceSize: uint64(cfg.TraceBufSize), MTESize: uint64(cfg.MTEBufSize), Mode: st.Mode}
	err = b.ioctl(iocInit, unsafe.Pointer(&a))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EBUSY):
		return errOn
	case errors.Is(err, unix.ENOMEM):
		var si sysinfoArg
		_ = b.ioctl(iocSysinfo, unsafe.Pointer(&si))
		return fmt.Errorf("not enough memory for %d CPUs x (trace %d + MTE %d bytes): all buffers together may take at most %d MB here; choose smaller sizes (swtrace init -t SIZE -m SIZE)",
			si.NCPUs, cfg.TraceBufSize, cfg.MTEBufSize, si.MemLimit>>20)
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("the module refused the buffer sizes (trace %d, MTE %d bytes; each must be 4K..1G per CPU) or the mode has no stream file: %w", cfg.TraceBufSize, cfg.MTEBufSize, err)
	}
	return fmt.Errorf("init: %w", err)
}

func (b *Backend) majors(majors []uint16, on bool) error {
	var m majorsArg
	for _, x := range majors {
		if on && x == trace.MajorUnwind {
			if err := b.checkCallstack(); err != nil {
				return err
			}
		}
		if x < 256 {
			m.Mask[x/64] |= 1 << (x % 64)
		}
	}
	var req uintptr = iocEnable
	if !on {
		req = iocDisable
	}
	if err := b.ioctl(req, unsafe.Pointer(&m)); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return errors.New("tracing is on: run `swtrace off` before changing the record types")
		}
		return fmt.Errorf("enable/disable: %w", err)
	}
	return nil
}

// checkCallstack refuses call stacks on a module built before them (it
// would accept the record type and write none).
func (b *Backend) checkCallstack() error {
	var si sysinfoArg
	if err := b.ioctl(iocSysinfo, unsafe.Pointer(&si)); err != nil {
		return fmt.Errorf("pitrace system info: %w", err)
	}
	if si.Features&featCallstack == 0 {
		return errors.New("the loaded pitrace module records no call stacks (it predates them): rebuild and reload it from this source tree (make kmod; rmmod pitrace; insmod kmod/pitrace.ko), or use the daemon backend (PERFINSP_BACKEND=daemon)")
	}
	return nil
}

// SetStackDepth sets the depth limit of call stacks (1..127 frames, kernel
// and user together; deeper stacks are recorded truncated and marked so).
// The module keeps it until it is set again or unloaded.
func (b *Backend) SetStackDepth(frames int) error {
	if frames < 1 || frames > trace.UnwindMaxDepth {
		return fmt.Errorf("stack depth %d is out of range: use 1..%d frames", frames, trace.UnwindMaxDepth)
	}
	if err := b.checkCallstack(); err != nil {
		return err
	}
	m := majorsArg{StackDepth: uint32(frames)}
	if err := b.ioctl(iocEnable, unsafe.Pointer(&m)); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return errors.New("tracing is on: run `swtrace off` before changing the stack depth")
		}
		return fmt.Errorf("stack depth: %w", err)
	}
	return nil
}

// Enable enables record types by major code.
func (b *Backend) Enable(majors []uint16) error { return b.majors(majors, true) }

// Disable disables record types (SYS and MTE stay on).
func (b *Backend) Disable(majors []uint16) error { return b.majors(majors, false) }

// SetMode selects the mode and the stream file of wrap and cont modes.
func (b *Backend) SetMode(mode int, contFile string) error {
	if mode < control.ModeNormal || mode > control.ModeCont {
		return fmt.Errorf("unknown mode %d", mode)
	}
	a := modeArg{Mode: uint32(mode)}
	if mode != control.ModeNormal {
		if contFile == "" {
			return errors.New("wrap and cont modes need a file to stream to")
		}
		abs, err := filepath.Abs(contFile)
		if err != nil {
			return fmt.Errorf("stream file %q: %w", contFile, err)
		}
		if len(abs) >= pathMax {
			return fmt.Errorf("stream file path %q is too long: the limit is %d bytes", abs, pathMax-1)
		}
		if err := control.CheckTraceTarget(abs); err != nil {
			return err
		}
		copy(a.Path[:], abs)
	}
	err := b.ioctl(iocSetMode, unsafe.Pointer(&a))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EBUSY):
		return errors.New("tracing is on: run `swtrace off` before changing the mode")
	case errors.Is(err, unix.EEXIST):
		return ErrUnsaved
	}
	return fmt.Errorf("mode: %w", err)
}

// ParseEvent maps an event name to a perf type and config through the
// project's one event table (libperfutil/events). The module's rate
// argument has no config1/config2: events that need them are refused.
func ParseEvent(name string) (typ uint32, config uint64, err error) {
	e, err := events.Parse(name)
	if err != nil {
		return 0, 0, err
	}
	if e.Config1 != 0 || e.Config2 != 0 {
		return 0, 0, fmt.Errorf("event %q needs config1/config2, which the pitrace module's tprof does not take: use the daemon backend for it", name)
	}
	return e.Type, e.Config, nil
}

// SetRate sets the tprof rate (Hz) or, with event, a sample every hz events.
func (b *Backend) SetRate(hz int, event string) error {
	if hz <= 0 || hz > control.MaxRateHz {
		return fmt.Errorf("rate %d is out of range: use 1..%d", hz, control.MaxRateHz)
	}
	a := rateArg{Hz: uint32(hz)}
	if event != "" {
		t, c, err := ParseEvent(event)
		if err != nil {
			return err
		}
		if len(event) >= eventName {
			return fmt.Errorf("event name %q is too long", event)
		}
		a.EventType, a.EventConfig = t, c
		copy(a.Event[:], event)
	}
	err := b.ioctl(iocSetRate, unsafe.Pointer(&a))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("no hardware PMU on this machine: event-based tprof needs a hardware counter (%s is not available); use time-based sampling: swtrace setrate HZ", event)
	case errors.Is(err, unix.EBUSY):
		return errors.New("tracing is on: run `swtrace off` before changing the rate")
	}
	return fmt.Errorf("setrate: %w", err)
}

// On starts tracing (with the default buffers when Init was not run).
func (b *Backend) On() error {
	st, err := b.status()
	if err != nil {
		return err
	}
	switch {
	case st.State == stateFree:
		if err := b.Init(control.Config{}); err != nil {
			return err
		}
	case st.State == stateOn && st.Flags&stStoppedFull != 0:
		return errors.New("tracing stopped because a buffer filled (normal mode): run `swtrace off` and `swtrace get`")
	}
	err = b.ioctl(iocOn, nil)
	switch {
	case err == nil:
	case errors.Is(err, unix.EINVAL):
		return fmt.Errorf("the module refused on (buffers not initialized, or wrap/cont mode without a stream file): run `swtrace init` and `swtrace mode`: %w", err)
	case errors.Is(err, unix.EBUSY):
		return errors.New("tracing is already on")
	case errors.Is(err, unix.EEXIST):
		return ErrUnsaved
	case errors.Is(err, unix.ENODEV):
		return errors.New("no hardware PMU on this machine: event-based tprof needs a hardware counter; use time-based sampling (swtrace setrate HZ)")
	default:
		return fmt.Errorf("on: %w", err)
	}
	if st.Mode != control.ModeNormal {
		st, err = b.status()
		if err == nil {
			err = startDrainer(b, cstr(st.Path[:]))
		}
		if err != nil {
			_ = b.ioctl(iocOff, nil)
			return fmt.Errorf("tracing turned off again: %w", err)
		}
	}
	return nil
}

// Off stops tracing. In wrap and cont modes it waits for the drainer to
// finish the stream file.
func (b *Backend) Off() error {
	st, err := b.status()
	if err != nil {
		return err
	}
	if st.State != stateOn {
		return fmt.Errorf("tracing is not on (state: %s)", stateName(st))
	}
	if err := b.ioctl(iocOff, nil); err != nil {
		return fmt.Errorf("off: %w", err)
	}
	if st.Mode != control.ModeNormal {
		return b.waitDrainer(2 * time.Minute)
	}
	return nil
}

func (b *Backend) waitDrainer(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		st, err := b.status()
		if err != nil {
			return err
		}
		if st.DrainerPid == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the drainer (agent pid %d) did not finish the stream file within %s; see the agent's log (docs/agent.md)", st.DrainerPid, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stateName(st *statusArg) string {
	switch st.State {
	case stateFree:
		return control.StateFree
	case stateInit:
		return control.StateInitialized
	case stateOn:
		if st.Flags&stStoppedFull != 0 {
			return control.StateOff
		}
		return control.StateOn
	case stateOff:
		return control.StateOff
	}
	return fmt.Sprintf("state-%d", st.State)
}

// Info reports the module's state.
func (b *Backend) Info() (*control.Status, error) {
	st, err := b.status()
	if err != nil {
		return nil, err
	}
	out := &control.Status{
		Backend:      "kmod",
		State:        stateName(st),
		Mode:         int(st.Mode),
		TraceBufSize: int(st.TraceSize),
		MTEBufSize:   int(st.MTESize),
		RateHz:       int(st.RateHz),
		Event:        cstr(st.Event[:]),
		ContFile:     cstr(st.Path[:]),
		StoppedFull:  st.Flags&stStoppedFull != 0,
	}
	for m := 0; m < 256; m++ {
		if st.Enabled[m/64]&(1<<(m%64)) != 0 {
			out.Enabled = append(out.Enabled, uint16(m))
		}
	}
	if st.State != stateFree {
		for cpu := 0; cpu < int(st.NCPUs); cpu++ {
			c, err := b.cpuStatus(cpu)
			if err != nil {
				return nil, err
			}
			full := c.Flags&(cpuTraceFull|cpuMTEFull) != 0
			if full {
				out.StoppedFull = true
			}
			out.CPUs = append(out.CPUs, control.CPUStatus{CPU: cpu, Records: c.Records, Lost: c.Lost,
				MTERecords: c.MTERecords, MTELost: c.MTELost, Used: int(c.Used), MTEUsed: int(c.MTEUsed), Full: full})
		}
	}
	if st.Flags&stStoppedFull != 0 {
		out.Note = "a buffer filled: tracing stopped (normal mode); run `swtrace off` and `swtrace get`"
	}
	return out, nil
}

// Free stops tracing and releases the buffers.
func (b *Backend) Free() error {
	if err := b.ioctl(iocFree, nil); err != nil {
		return fmt.Errorf("free: %w", err)
	}
	return b.waitDrainer(time.Minute)
}

// Hook writes a user record into the calling CPU's trace buffer.
func (b *Backend) Hook(major uint16, minor uint32, words []uint32, str string) error {
	if major < trace.MajorUserFirst {
		return fmt.Errorf("user hook records need a major code of 0x%x or more (got 0x%x)", trace.MajorUserFirst, major)
	}
	if len(words) > hookMaxWords || len(str) > hookMaxBytes {
		return fmt.Errorf("hook record too large: at most %d words and %d bytes", hookMaxWords, hookMaxBytes)
	}
	a := hookArg{Major: major, Minor: minor, NWords: uint32(len(words)), Len: uint32(len(str))}
	var data []byte
	if len(words) > 0 {
		a.Words = uint64(uintptr(unsafe.Pointer(&words[0])))
	}
	if len(str) > 0 {
		data = []byte(str)
		a.Data = uint64(uintptr(unsafe.Pointer(&data[0])))
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, b.fd, iocHook, uintptr(unsafe.Pointer(&a)))
	runtime.KeepAlive(words)
	runtime.KeepAlive(data)
	switch e {
	case 0:
		return nil
	case unix.EINVAL:
		return errors.New("tracing is not on: run `swtrace on` first")
	case unix.ENOSPC:
		return errors.New("tracing stopped because a buffer filled (normal mode)")
	}
	return fmt.Errorf("hook: %w", e)
}

// Get writes the trace to path. It refuses while tracing is on.
func (b *Backend) Get(path string) error {
	st, err := b.status()
	if err != nil {
		return err
	}
	switch st.State {
	case stateOn:
		if st.Flags&stStoppedFull == 0 {
			return errors.New("tracing is on: run `swtrace off` first (get does not snapshot a running trace)")
		}
		if err := b.Off(); err != nil {
			return err
		}
		if st, err = b.status(); err != nil {
			return err
		}
	case stateFree, stateInit:
		return errors.New("there is no trace to write: run `swtrace on` and `swtrace off` first")
	}
	switch st.Mode {
	case control.ModeNormal:
		err = b.writeFile(path, st)
	default:
		stream := cstr(st.Path[:])
		err = copyStream(stream, path, st.Mode == control.ModeWrap)
	}
	if err != nil {
		return err
	}
	return b.ioctl(iocSaved, nil)
}

func copyStream(from, to string, move bool) error {
	if _, err := os.Stat(from); err != nil {
		return fmt.Errorf("the stream file %s is missing (did the drainer fail? see the agent's log, docs/agent.md): %w", from, err)
	}
	absTo, _ := filepath.Abs(to)
	if absTo == from {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("read stream file: %w", err)
	}
	defer in.Close()
	out, err := control.CreateTraceFile(absTo)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("write trace %s: %w", to, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write trace %s: %w", to, err)
	}
	if move {
		_ = os.Remove(from)
	}
	return nil
}

func header(st *statusArg) nrm2.Header {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	host, _ := os.Hostname()
	return nrm2.Header{
		NCPUs:         st.NCPUs,
		Mode:          st.Mode,
		TraceBufSize:  st.TraceSize,
		MTEBufSize:    st.MTESize,
		ClockID:       nrm2.ClockMonotonic,
		ClockHz:       1_000_000_000,
		StartWallNs:   st.StartWallNs,
		StartClockNs:  st.StartClockNs,
		SegmentSize:   uint64(st.TraceSegSize),
		Backend:       nrm2.BackendKmod,
		RateHz:        st.RateHz,
		KernelRelease: cstr(uts.Release[:]),
		Hostname:      host,
	}
}

func (b *Backend) stats(st *statusArg) ([]nrm2.CPUStats, error) {
	out := make([]nrm2.CPUStats, st.NCPUs)
	for cpu := range out {
		c, err := b.cpuStatus(cpu)
		if err != nil {
			return nil, err
		}
		out[cpu] = nrm2.CPUStats{Records: c.Records, Lost: c.Lost, MTERecords: c.MTERecords, MTELost: c.MTELost, Bytes: c.Bytes}
		if c.Flags&cpuTraceFull != 0 {
			out[cpu].Full |= 1
		}
		if c.Flags&cpuMTEFull != 0 {
			out[cpu].Full |= 2
		}
	}
	return out, nil
}

// writeFile writes every buffer's complete segments (normal mode) into a
// file created with the caller's rights.
func (b *Backend) writeFile(path string, st *statusArg) error {
	maps, err := mapAll(b, st)
	if err != nil {
		return err
	}
	defer maps.unmap()
	stats, err := b.stats(st)
	if err != nil {
		return err
	}
	f, err := control.CreateTraceFile(path)
	if err != nil {
		return err
	}
	return nrm2.WriteTrace(f, &nrm2.Snapshot{
		Header:   header(st),
		Kallsyms: nrm2.ReadKallsyms(),
		Segments: func(cpu int, kind uint32, fn func([]byte) error) error {
			k := kindTrace
			if kind == nrm2.ChunkMTE {
				k = kindMTE
			}
			if ev := eventChunk(st); cpu == 0 && k == kindTrace && ev != nil {
				if err := fn(ev); err != nil {
					return err
				}
			}
			m := maps.buf(cpu, k)
			for _, s := range m.segments(false) {
				if err := fn(m.data(s)); err != nil {
					return err
				}
			}
			return nil
		},
		Stats: stats,
	})
}

// eventChunk is a trace chunk for CPU 0 naming the event of event-based
// tprof (TPROF_EVENT_NAME at the trace's start), as the daemon writes it,
// so post names the event whichever backend traced; nil for time-based.
func eventChunk(st *statusArg) []byte {
	name := cstr(st.Event[:])
	if name == "" || st.Enabled[trace.MajorTprof/64]&(1<<(trace.MajorTprof%64)) == 0 {
		return nil
	}
	var w trace.Writer
	if w.Write(trace.MajorSys, trace.SysEvent, trace.LayoutString, st.StartClockNs, []uint64{uint64(st.EventType), st.EventConfig, uint64(st.RateHz)}, name) != nil {
		return nil
	}
	return w.Buf
}

func chunkKind(kind int) uint32 {
	if kind == kindMTE {
		return nrm2.ChunkMTE
	}
	return nrm2.ChunkTrace
}

// mapping is one mapped buffer.
type mapping struct {
	mem []byte
	hdr *bufHdr
}

type mappings struct {
	ncpu int
	m    []mapping // [cpu*2+kind]
}

func (ms *mappings) buf(cpu, kind int) *mapping { return &ms.m[cpu*2+kind] }

func (ms *mappings) unmap() {
	for i := range ms.m {
		if ms.m[i].mem != nil {
			_ = unix.Munmap(ms.m[i].mem)
			ms.m[i].mem = nil
		}
	}
}

func mapAll(b *Backend, st *statusArg) (*mappings, error) {
	ms := &mappings{ncpu: int(st.NCPUs), m: make([]mapping, 2*int(st.NCPUs))}
	for cpu := 0; cpu < ms.ncpu; cpu++ {
		for kind, size := range []uint64{st.MapSizeTrace, st.MapSizeMTE} {
			mem, err := unix.Mmap(int(b.fd), mmapOffset(cpu, kind), int(size), unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				ms.unmap()
				return nil, fmt.Errorf("map the CPU %d buffer of %s: %w", cpu, Device, err)
			}
			m := ms.buf(cpu, kind)
			m.mem = mem
			m.hdr = (*bufHdr)(unsafe.Pointer(&mem[0]))
			if m.hdr.Magic != bufMagic || m.hdr.NSeg > segments || uint64(m.hdr.SegSize)*uint64(m.hdr.NSeg)+m.hdr.DataOffset > size {
				ms.unmap()
				return nil, fmt.Errorf("the CPU %d buffer of %s has a bad header (magic %#x): module and program do not match", cpu, Device, m.hdr.Magic)
			}
		}
	}
	return ms, nil
}

// segRef is one complete segment.
type segRef struct {
	idx  int
	seq  uint64
	used uint32
}

// segments returns the DONE segments in completion order; with partial,
// also the FILLING one (never after off: off completes it).
func (m *mapping) segments(partial bool) []segRef {
	var out []segRef
	h := m.hdr
	for i := 0; i < int(h.NSeg); i++ {
		s := &h.Seg[i]
		state := loadU32(&s.State)
		if state == segDone || (partial && state == segFilling) {
			used := loadU32(&s.Used)
			if used > h.SegSize {
				used = h.SegSize
			}
			out = append(out, segRef{idx: i, seq: s.Seq, used: used})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

func (m *mapping) data(s segRef) []byte {
	off := m.hdr.DataOffset + uint64(s.idx)*uint64(m.hdr.SegSize)
	return m.mem[off : off+uint64(s.used)]
}

// DrainAgent hands a fresh /dev/pitrace descriptor and the stream file to
// the agent that drains the wrap and cont buffers (pitraced's OpDrain). The
// module backend does not dial the agent itself: libperfutil/backends,
// which links both backends, sets it (SetDrainAgent) to the daemon
// client's.
type DrainAgent func(dev, stream *os.File) error

var drainAgent DrainAgent

// SetDrainAgent sets the agent that drains the wrap and cont buffers.
func SetDrainAgent(a DrainAgent) { drainAgent = a }

// startDrainer hands the draining of the stream file to the agent: a
// fresh /dev/pitrace descriptor and the stream file, both opened here with
// this process's rights, are passed to it.
func startDrainer(b *Backend, stream string) error {
	if drainAgent == nil {
		return errors.New("wrap and cont modes need the agent (pitraced) to drain the buffers, and this program was built without its client (libperfutil/backends)")
	}
	out, err := control.CreateTraceFile(stream)
	if err != nil {
		return fmt.Errorf("stream file: %w", err)
	}
	defer out.Close()
	dev, err := os.OpenFile(Device, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open %s for the drainer: %w", Device, err)
	}
	defer dev.Close()
	if err := drainAgent(dev, out); err != nil {
		return err
	}
	// The agent attaches before answering; check it did.
	st, err := b.status()
	if err != nil {
		return err
	}
	if st.DrainerPid == 0 {
		return errors.New("the agent answered but did not attach as the drainer")
	}
	return nil
}
