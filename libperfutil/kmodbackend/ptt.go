package kmodbackend

import (
	"bytes"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PTT entry points for libperfutil/ptt and tools/ptt: the module's
// per-thread metric virtualization (docs/ptt.md). The types mirror
// kmod/uapi/pitrace.h and are checked against it by the ABI test.

// PttArea is a thread's work area as the module maps it (read-only), and
// as PTT_READ copies it.
type PttArea = pttArea

// PttMmapOffset is the mmap offset that maps the calling thread's area.
const PttMmapOffset = pttMmapOffset

// PttMaxMetrics is the most metrics PTT keeps at once.
const PttMaxMetrics = pttMaxMetrics

// PttMaxSlots is the most distinct perf counters the module keeps at once
// (over every open file).
const PttMaxSlots = pttMaxSlots

// Metric kinds (PITRACE_PTT_*).
const (
	PttKindTSC  = pttKindTSC  // the time stamp counter
	PttKindPerf = pttKindPerf // a per-CPU perf_event counter (Type, Config)
)

// PttMetric is one metric of PTT_INIT.
type PttMetric struct {
	Kind   uint32 // PttKindTSC or PttKindPerf
	Type   uint32 // perf_event_attr.type (PttKindPerf)
	Config uint64 // perf_event_attr.config (PttKindPerf)
}

// PttInit selects the metrics of the file fd (PTT_INIT). The error wraps
// the errno (ENOENT, EOPNOTSUPP or ENODEV: a counter the machine lacks;
// EBUSY: too many distinct perf counters, or areas still alive).
func PttInit(fd int, ms []PttMetric) error {
	if len(ms) < 1 || len(ms) > pttMaxMetrics {
		return fmt.Errorf("PTT takes 1 to %d metrics, not %d", pttMaxMetrics, len(ms))
	}
	a := pttInitArg{NMetrics: uint32(len(ms))}
	for i, m := range ms {
		a.M[i] = pttMetric(m)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocPttInit, uintptr(unsafe.Pointer(&a))); e != 0 {
		return fmt.Errorf("PTT_INIT: %w", e)
	}
	return nil
}

// PttInitTSC selects n TSC metrics for the file fd (PTT_INIT).
func PttInitTSC(fd, n int) error {
	if n < 1 || n > pttMaxMetrics {
		return fmt.Errorf("PTT takes 1 to %d metrics, not %d", pttMaxMetrics, n)
	}
	ms := make([]PttMetric, n)
	return PttInit(fd, ms)
}

// PttTerm ends PTT for the file fd (PTT_TERM): every area reads dead.
func PttTerm(fd int) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocPttTerm, 0); e != 0 {
		return fmt.Errorf("PTT_TERM: %w", e)
	}
	return nil
}

// PttWatch asks the module to keep an area for thread tid in the file fd
// (PTT_WATCH), without a mapping. The error wraps the errno: ESRCH when
// the thread is gone, EPERM/EACCES when the caller may not watch it.
func PttWatch(fd, tid int) error {
	a := pttWatchArg{Tid: int32(tid)}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocPttWatch, uintptr(unsafe.Pointer(&a))); e != 0 {
		return fmt.Errorf("PTT_WATCH %d: %w", tid, e)
	}
	return nil
}

// PttThread is one area of a PTT_READ snapshot.
type PttThread struct {
	Tid     int    // 0 when the thread is gone from the caller's pid namespace
	Pid     int    // its process
	Comm    string // name when the area was made
	Running bool   // on a CPU at the snapshot: Area.Accum includes up to then
	Mapped  bool   // mapped by the thread itself (false: PTT_WATCH)
	Area    PttArea
}

// PttRead returns a snapshot of every area of the file fd (PTT_READ),
// mapped and watched, alive and dead.
func PttRead(fd int) ([]PttThread, error) {
	buf := make([]pttThread, 64)
	for {
		a := pttReadArg{Max: uint32(len(buf)), Buf: uint64(uintptr(unsafe.Pointer(&buf[0])))}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocPttRead, uintptr(unsafe.Pointer(&a)))
		if e != 0 {
			return nil, fmt.Errorf("PTT_READ: %w", e)
		}
		if a.Total > a.N && a.N == uint32(len(buf)) {
			// More areas than room (some were made meanwhile): grow.
			buf = make([]pttThread, 2*int(a.Total)+16)
			continue
		}
		n := int(a.N)
		if n > len(buf) {
			n = len(buf)
		}
		out := make([]PttThread, n)
		for i := 0; i < n; i++ {
			t := &buf[i]
			comm := t.Comm[:]
			if j := bytes.IndexByte(comm, 0); j >= 0 {
				comm = comm[:j]
			}
			out[i] = PttThread{Tid: int(t.Tid), Pid: int(t.Pid), Comm: string(comm), Running: t.Running != 0, Mapped: t.Mapped != 0, Area: t.A}
		}
		return out, nil
	}
}

// PttBucket is one CPU's interrupt bucket: outermost interrupts PTT saw,
// TSC cycles spent in them, and each metric of the file (Val[i] for the
// file's metric i) spent in them.
type PttBucket struct {
	CPU        int
	Interrupts uint64
	TSC        uint64
	Val        [pttMaxMetrics]uint64
}

// PttStatusInfo is PTT_STATUS over every CPU.
type PttStatusInfo struct {
	Hooks    uint32 // PITRACE_PTT_HOOK_* attached
	NAreas   uint32 // areas being updated (all files)
	NMetrics uint32 // this file's metrics, 0 before PTT_INIT
	NrCPUs   uint32
	CPUs     []PttBucket
}

// PttStatus returns the module's PTT state and every CPU's bucket.
func PttStatus(fd int) (PttStatusInfo, error) {
	var info PttStatusInfo
	for first := uint32(0); ; {
		st := new(pttStatusArg)
		st.FirstCPU = first
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocPttStatus, uintptr(unsafe.Pointer(st))); e != 0 {
			return info, fmt.Errorf("PTT_STATUS: %w", e)
		}
		info.Hooks, info.NAreas, info.NMetrics, info.NrCPUs = st.Hooks, st.NAreas, st.NMetrics, st.NrCPUs
		n := int(st.NCPUs)
		if n > pttStatusCPUs {
			n = pttStatusCPUs
		}
		for i := 0; i < n; i++ {
			b := &st.CPU[i]
			info.CPUs = append(info.CPUs, PttBucket{CPU: int(first) + i, Interrupts: b.Interrupts, TSC: b.TSC, Val: b.Val})
		}
		first += uint32(n)
		if n == 0 || first >= st.NrCPUs {
			return info, nil
		}
	}
}

// PttHooks returns the interrupt hooks the module attached (PTT_STATUS),
// and an error when the module has no PTT support.
func PttHooks(fd int) (uint32, error) {
	var st pttStatusArg
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocPttStatus, uintptr(unsafe.Pointer(&st))); e != 0 {
		return 0, fmt.Errorf("PTT_STATUS: %w", e)
	}
	return st.Hooks, nil
}
