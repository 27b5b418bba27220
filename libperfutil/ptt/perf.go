package ptt

import (
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/events"
)

// OpenOpts tunes OpenCounter.
type OpenOpts struct {
	// SwitchRecords asks for PERF_RECORD_SWITCH records stamped with
	// CLOCK_MONOTONIC in the event's ring buffer (the time-at-dispatch source
	// of the mapped task-clock read when the kernel gives no cap_user_time).
	SwitchRecords bool
	// ExcludeKernel counts user mode only.
	ExcludeKernel bool
}

// ErrNoPMU is wrapped by errors about hardware metrics on a machine without a
// hardware PMU (the event table's).
var ErrNoPMU = events.ErrNoPMU

// HasPMU reports whether the kernel exposes a hardware PMU (events.HasPMU).
func HasPMU() bool { return events.HasPMU() }

// Paranoid returns /proc/sys/kernel/perf_event_paranoid (events.Paranoid).
func Paranoid() int { return events.Paranoid() }

// OpenCounter opens metric m counting thread tid (0: the calling thread) on
// any CPU. The error says why in words a user can act on.
func OpenCounter(m Metric, tid int, o OpenOpts) (int, error) {
	attr := unix.PerfEventAttr{
		Type:   m.perfType,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config: m.config,
		Bits:   unix.PerfBitExcludeHv,
	}
	if o.ExcludeKernel {
		attr.Bits |= unix.PerfBitExcludeKernel
	}
	if o.SwitchRecords {
		attr.Bits |= unix.PerfBitContextSwitch | unix.PerfBitSampleIDAll | unix.PerfBitUseClockID
		attr.Sample_type = unix.PERF_SAMPLE_TIME
		attr.Clockid = unix.CLOCK_MONOTONIC
	}
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		return fd, nil
	}
	who := "the calling thread"
	if tid != 0 {
		who = "thread " + strconv.Itoa(tid)
	}
	switch {
	case m.Hardware && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV)):
		if !HasPMU() {
			return -1, fmt.Errorf("%w: metric %s needs a hardware counter", ErrNoPMU, m.Name)
		}
		return -1, fmt.Errorf("metric %s: the hardware PMU does not provide this event: %w", m.Name, err)
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return -1, fmt.Errorf("metric %s on %s: permission denied (perf_event_paranoid=%d): only root may count other users' threads: %w",
			m.Name, who, Paranoid(), err)
	case errors.Is(err, unix.ESRCH):
		return -1, fmt.Errorf("metric %s: %s does not exist: %w", m.Name, who, err)
	case errors.Is(err, unix.EMFILE):
		return -1, fmt.Errorf("metric %s on %s: out of file descriptors (raise ulimit -n): %w", m.Name, who, err)
	}
	return -1, fmt.Errorf("perf_event_open %s on %s: %w", m.Name, who, err)
}

// ReadCounter reads a counter with the read() system call.
func ReadCounter(fd int) (uint64, error) {
	var b [8]byte
	n, err := unix.Read(fd, b[:])
	if err != nil {
		return 0, fmt.Errorf("read perf counter: %w", err)
	}
	if n != 8 {
		return 0, fmt.Errorf("read perf counter: short read of %d bytes", n)
	}
	return *(*uint64)(unsafe.Pointer(&b[0])), nil
}
