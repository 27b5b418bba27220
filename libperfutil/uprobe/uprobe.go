// Package uprobe opens uprobe and uretprobe perf events (perf's "uprobe"
// PMU: config1 points at the file's path, config2 is the file offset of the
// probed instruction, the retprobe bit is read from the PMU's
// format/retprobe) on one thread, and reads the samples they write through
// a perf ring (internal/perfring). A probe exists only while its fd is open:
// the kernel removes it when the fd is closed, also when the process dies.
package uprobe

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/events"
)

// PMU is the uprobe PMU of the running kernel.
type PMU struct {
	Type     uint32
	retprobe events.Format
}

// System reads the uprobe PMU from sysfs (events.System).
func System() (PMU, error) {
	return FromSysfs(events.System)
}

// FromSysfs reads the uprobe PMU from a sysfs tree.
func FromSysfs(s events.Sysfs) (PMU, error) {
	p, err := s.ReadPMU("uprobe")
	if err != nil {
		return PMU{}, fmt.Errorf("no uprobe PMU (kernel without CONFIG_UPROBE_EVENTS?): %w", err)
	}
	f, ok := p.Formats["retprobe"]
	if !ok || len(f.Bits) != 1 {
		return PMU{}, fmt.Errorf("uprobe PMU: format/retprobe missing or not one bit")
	}
	return PMU{Type: p.Type, retprobe: f}, nil
}

// Attr is the perf_event_attr of a probe at file offset off of path; ret
// selects a uretprobe. The caller sets sampling fields. path must stay
// alive (and unmoved) until perf_event_open returns: use Open.
func (p PMU) attr(path *byte, off uint64, ret bool) unix.PerfEventAttr {
	a := unix.PerfEventAttr{
		Type: p.Type,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Ext1: uint64(uintptr(unsafe.Pointer(path))),
		Ext2: off,
	}
	if ret {
		bit := p.retprobe.Bits[0]
		switch p.retprobe.Field {
		case 0:
			a.Config |= 1 << bit
		case 1:
			a.Ext1 |= 1 << bit
		case 2:
			a.Ext2 |= 1 << bit
		}
	}
	return a
}

// Sample layouts of probe events (PERF_SAMPLE_IDENTIFIER first so one
// ring can hold several events' samples).
const (
	// EntrySample: identifier, pid/tid, time, then the user stack's top
	// word (the return address at a function's first instruction).
	EntrySample = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_STACK_USER
	// ReturnSample: identifier, pid/tid, time.
	ReturnSample = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME
)

// Probe is one open probe event.
type Probe struct {
	FD  int
	ID  uint64 // the kernel's sample identifier
	Ret bool   // a uretprobe, or an exit probe (OpenOpts.Exit)
}

// ErrPerm is wrapped when the kernel refuses the probe for lack of privilege.
var ErrPerm = errors.New("uprobe perf events need root or CAP_PERFMON")

// Open opens a probe at file offset off of path on thread tid (any CPU),
// sampling every hit: an entry probe with the stack's top word, a return
// probe (ret) with its time only. The event starts disabled when disabled.
func (p PMU) Open(path string, off uint64, ret bool, tid int, disabled bool) (*Probe, error) {
	return p.open(path, off, ret, tid, OpenOpts{Disabled: disabled, Group: -1})
}

// OpenOpts are the less common choices of OpenWith.
type OpenOpts struct {
	Disabled bool // start disabled (Enable)
	// Group, if >= 0, is the fd of a counter on the same thread (a group
	// leader, opened with OpenCounter): each sample then carries the
	// leader's count at the hit (PERF_SAMPLE_READ of the group; Sample.Read).
	Group int
	// Exit opens a plain uprobe (never a uretprobe) with the return
	// layout: a probe on a function's return instruction or on a jump out
	// of it, which leaves the return address on the stack untouched.
	Exit bool
	// CPU is the CPU of a probe opened with tid -1: it then fires in every
	// process that maps the file, on that CPU (the caller filters by pid).
	CPU int
	// Regs, if not 0, is the mask of user registers each hit samples
	// (PERF_SAMPLE_REGS_USER; bits as perf_regs.h, RegSP ...): Sample.Regs.
	Regs uint64
	// Dynamic, if set, holds the probe's instruction as a dynamic event:
	// its close then returns at once, its breakpoint removed (Dynamic).
	// A uretprobe, or a path uprobe_events cannot name, uses the PMU.
	Dynamic *Dynamic
}

// User registers a probe can sample (x86-64 perf_regs.h bits).
const (
	RegSP  = 1 << 7
	RegR14 = 1 << 22
)

// OpenWith is Open with the options o. (No inheritance: the kernel maps
// no ring for an inherited per-thread event.) With o.Exit, ret must be
// false: the probe is a uprobe with the return layout (Probe.Ret set).
func (p PMU) OpenWith(path string, off uint64, ret bool, tid int, o OpenOpts) (*Probe, error) {
	if o.Exit && ret {
		return nil, fmt.Errorf("uprobe %s+%#x: an exit probe is a plain uprobe, not a uretprobe", path, off)
	}
	return p.open(path, off, ret, tid, o)
}

// OpenCounter opens ev as a disabled counting event on thread tid, to lead
// a group of probes (OpenOpts.Group): it must be enabled after them.
func OpenCounter(ev events.Event, tid int) (int, error) {
	a := ev.Attr()
	a.Bits |= unix.PerfBitDisabled | unix.PerfBitUseClockID
	a.Clockid = unix.CLOCK_MONOTONIC // a group has one clock: the probes'
	a.Read_format = unix.PERF_FORMAT_GROUP
	fd, err := unix.PerfEventOpen(&a, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, events.OpenError(ev, tid, -1, err)
	}
	return fd, nil
}

// OpenHolder opens a software dummy event on thread tid (or, tid -1, on
// cpu) with the probes' clock, to hold the ring the probes of that thread
// write into (PERF_EVENT_IOC_SET_OUTPUT): the probes can then be closed in
// any order while the ring is read, the holder last.
func OpenHolder(tid, cpu int) (int, error) {
	a := unix.PerfEventAttr{
		Type:    unix.PERF_TYPE_SOFTWARE,
		Config:  unix.PERF_COUNT_SW_DUMMY,
		Size:    uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits:    unix.PerfBitUseClockID | unix.PerfBitDisabled,
		Clockid: unix.CLOCK_MONOTONIC,
	}
	if tid != -1 {
		cpu = -1
	}
	fd, err := unix.PerfEventOpen(&a, tid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("perf dummy event on thread %d: %w", tid, err)
	}
	return fd, nil
}

func (p PMU) open(path string, off uint64, ret bool, tid int, o OpenOpts) (*Probe, error) {
	group := o.Group
	b, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, fmt.Errorf("uprobe path %q: %w", path, err)
	}
	a := p.attr(b, off, ret)
	if o.Dynamic != nil && !ret && usable(path) {
		if id, err := o.Dynamic.event(path, off); err == nil {
			a = unix.PerfEventAttr{Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Size: a.Size}
		}
	}
	a.Sample = 1
	a.Wakeup = 256 // wake a poller per 256 hits, not per hit
	a.Bits |= unix.PerfBitUseClockID
	a.Clockid = unix.CLOCK_MONOTONIC
	if o.Disabled {
		a.Bits |= unix.PerfBitDisabled
	}
	if o.Regs != 0 {
		a.Sample_type |= unix.PERF_SAMPLE_REGS_USER
		a.Sample_regs_user = o.Regs
	}
	if ret || o.Exit {
		a.Sample_type |= ReturnSample
	} else {
		a.Sample_type |= EntrySample
		a.Sample_stack_user = 8
	}
	if group >= 0 {
		a.Sample_type |= unix.PERF_SAMPLE_READ
		a.Read_format = unix.PERF_FORMAT_GROUP
	} else {
		group = -1
	}
	cpu := -1
	if tid == -1 {
		cpu = o.CPU
	}
	fd, err := unix.PerfEventOpen(&a, tid, cpu, group, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(b)
	if err != nil {
		kind := "uprobe"
		if o.Exit {
			kind = "exit uprobe"
		}
		if ret {
			kind = "uretprobe"
		}
		switch {
		case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("%s %s+%#x on thread %d: %w (perf_event_paranoid=%d; run as root or grant CAP_PERFMON): %v",
				kind, path, off, tid, ErrPerm, events.Paranoid(), err)
		case errors.Is(err, unix.ESRCH):
			return nil, fmt.Errorf("%s %s+%#x: thread %d is gone: %w", kind, path, off, tid, err)
		}
		return nil, fmt.Errorf("%s %s+%#x on thread %d: %w", kind, path, off, tid, err)
	}
	id, err := ID(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Probe{FD: fd, ID: id, Ret: ret || o.Exit}, nil
}

// Close removes the probe.
func (pr *Probe) Close() error {
	if pr == nil || pr.FD < 0 {
		return nil
	}
	err := unix.Close(pr.FD)
	pr.FD = -1
	return err
}

// ID returns the sample identifier of a perf event fd.
func ID(fd int) (uint64, error) {
	var id uint64
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_ID, uintptr(unsafe.Pointer(&id)))
	if e != 0 {
		return 0, fmt.Errorf("PERF_EVENT_IOC_ID: %w", e)
	}
	return id, nil
}

// Enable starts a disabled event.
func Enable(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_ENABLE: %w", err)
	}
	return nil
}
