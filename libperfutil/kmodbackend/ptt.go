package kmodbackend

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PTT entry points for libperfutil/ptt: the module's per-thread metric
// virtualization (docs/ptt.md). The types mirror kmod/uapi/pitrace.h and
// are checked against it by the ABI test.

// PttArea is a thread's work area as the module maps it (read-only).
type PttArea = pttArea

// PttMmapOffset is the mmap offset that maps the calling thread's area.
const PttMmapOffset = pttMmapOffset

// PttMaxMetrics is the most metrics PTT keeps at once.
const PttMaxMetrics = pttMaxMetrics

// PttInitTSC selects n TSC metrics for the file fd (PTT_INIT).
func PttInitTSC(fd, n int) error {
	if n < 1 || n > pttMaxMetrics {
		return fmt.Errorf("PTT takes 1 to %d metrics, not %d", pttMaxMetrics, n)
	}
	a := pttInitArg{NMetrics: uint32(n)}
	for i := 0; i < n; i++ {
		a.M[i] = pttMetric{Kind: pttKindTSC}
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocPttInit, uintptr(unsafe.Pointer(&a))); e != 0 {
		return fmt.Errorf("PTT_INIT: %w", e)
	}
	return nil
}

// PttTerm ends PTT for the file fd (PTT_TERM): every area reads dead.
func PttTerm(fd int) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), iocPttTerm, 0); e != 0 {
		return fmt.Errorf("PTT_TERM: %w", e)
	}
	return nil
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
