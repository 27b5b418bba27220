package events

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Attr returns the perf_event_attr that counts e (no sampling, no flags
// beyond e's modifiers).
func (e Event) Attr() unix.PerfEventAttr {
	a := unix.PerfEventAttr{
		Type:   e.Type,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config: e.Config,
		Ext1:   e.Config1,
		Ext2:   e.Config2,
	}
	if e.ExcludeKernel {
		a.Bits |= unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv
	}
	if e.ExcludeUser {
		a.Bits |= unix.PerfBitExcludeUser
	}
	return a
}

// Paranoid returns /proc/sys/kernel/perf_event_paranoid (2 if unreadable).
func Paranoid() int {
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	if err != nil {
		return 2
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 2
	}
	return v
}

// OpenError explains a perf_event_open failure of e on pid/cpu in words a
// user can act on; a hardware event on a machine without a PMU wraps ErrNoPMU.
func OpenError(e Event, pid, cpu int, err error) error {
	who := "the calling thread"
	switch {
	case pid > 0:
		who = "thread " + strconv.Itoa(pid)
	case pid == -1 && cpu >= 0:
		who = "CPU " + strconv.Itoa(cpu)
	}
	switch {
	case e.Hardware && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV)):
		if !HasPMU() {
			return fmt.Errorf("%w: %s needs a hardware counter", ErrNoPMU, e.Name)
		}
		return fmt.Errorf("event %s: the hardware PMU does not provide this event: %w", e.Name, err)
	case errors.Is(err, unix.ENOENT) && e.Kind == KindSoftware:
		return fmt.Errorf("event %s: this kernel does not know it: %w", e.Name, err)
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return fmt.Errorf("event %s on %s: permission denied (perf_event_paranoid=%d): counting other users' processes or whole CPUs needs root or CAP_PERFMON: %w",
			e.Name, who, Paranoid(), err)
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("event %s: %s does not exist: %w", e.Name, who, err)
	case errors.Is(err, unix.EMFILE):
		return fmt.Errorf("event %s on %s: out of file descriptors (raise ulimit -n): %w", e.Name, who, err)
	case errors.Is(err, unix.EINVAL) && e.Kind == KindPMU:
		return fmt.Errorf("event %s: the PMU refuses this encoding (type %d, config %#x): %w", e.Name, e.Type, e.Config, err)
	}
	return fmt.Errorf("perf_event_open %s on %s: %w", e.Name, who, err)
}

// OpenOpts tune Open.
type OpenOpts struct {
	Inherit  bool // count threads and processes created later by the target
	Disabled bool // open disabled (enable with PERF_EVENT_IOC_ENABLE)
}

// Open opens a counting event for e on pid (0: the caller, -1: every
// process) and cpu (-1: any CPU), reading value, time enabled and time
// running (see Read).
func Open(e Event, pid, cpu int, o OpenOpts) (int, error) {
	a := e.Attr()
	a.Read_format = unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING
	if o.Inherit {
		a.Bits |= unix.PerfBitInherit
	}
	if o.Disabled {
		a.Bits |= unix.PerfBitDisabled
	}
	fd, err := unix.PerfEventOpen(&a, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, OpenError(e, pid, cpu, err)
	}
	return fd, nil
}

// Reading is one read of a counter opened by Open.
type Reading struct {
	Value   uint64 // raw count
	Enabled uint64 // ns the event was enabled
	Running uint64 // ns it was on a counter (< Enabled when multiplexed)
}

// Scaled is the count extrapolated to the whole enabled time (as perf stat
// does when counters are multiplexed).
func (r Reading) Scaled() uint64 {
	if r.Running == 0 || r.Running >= r.Enabled {
		return r.Value
	}
	return uint64(float64(r.Value) * float64(r.Enabled) / float64(r.Running))
}

// Sub is r minus an earlier reading s.
func (r Reading) Sub(s Reading) Reading {
	return Reading{Value: r.Value - s.Value, Enabled: r.Enabled - s.Enabled, Running: r.Running - s.Running}
}

// Read reads a counter opened by Open.
func Read(fd int) (Reading, error) {
	var b [24]byte
	n, err := unix.Read(fd, b[:])
	if err != nil {
		return Reading{}, fmt.Errorf("read perf counter: %w", err)
	}
	if n != len(b) {
		return Reading{}, fmt.Errorf("read perf counter: short read of %d bytes", n)
	}
	le := func(p []byte) uint64 {
		return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
			uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
	}
	return Reading{Value: le(b[0:]), Enabled: le(b[8:]), Running: le(b[16:])}, nil
}
