package kmodbackend

// The module's ABI is kmod/uapi/pitrace.h. Its Go mirror (types, constants,
// ioctl numbers) is generated into zabi.go from abi_defs.go by cgo -godefs
// (internal/abigen); TestGeneratedABIIsCurrent fails when the header or
// abi_defs.go changed and the mirror was not generated again.

//go:generate go run ./internal/mkabi

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmapOffset is the mmap offset of one CPU's trace or MTE buffer.
func mmapOffset(cpu, kind int) int64 { return int64(cpu*2+kind) << mmapShift }

// IoctlNumbers lists every ioctl by its C name (for the ABI test, which
// checks it against every PITRACE_IOC_ of the header, and the fuzzer).
func IoctlNumbers() map[string]uintptr {
	return map[string]uintptr{
		"PITRACE_IOC_INIT": iocInit, "PITRACE_IOC_ENABLE": iocEnable, "PITRACE_IOC_DISABLE": iocDisable,
		"PITRACE_IOC_SETMODE": iocSetMode, "PITRACE_IOC_SETRATE": iocSetRate, "PITRACE_IOC_ON": iocOn,
		"PITRACE_IOC_OFF": iocOff, "PITRACE_IOC_STATUS": iocStatus, "PITRACE_IOC_CPU_STATUS": iocCPUStatus,
		"PITRACE_IOC_HOOK": iocHook, "PITRACE_IOC_SYSINFO": iocSysinfo, "PITRACE_IOC_FREE": iocFree,
		"PITRACE_IOC_RELEASE": iocRelease, "PITRACE_IOC_DRAIN": iocDrain, "PITRACE_IOC_SAVED": iocSaved,
		"PITRACE_IOC_BENCH": iocBench, "PITRACE_IOC_PTT_INIT": iocPttInit, "PITRACE_IOC_PTT_TERM": iocPttTerm,
		"PITRACE_IOC_PTT_STATUS": iocPttStatus, "PITRACE_IOC_PTT_WATCH": iocPttWatch, "PITRACE_IOC_PTT_READ": iocPttRead,
		"PITRACE_IOC_MSR_READ": iocMSRRead, "PITRACE_IOC_MSR_WRITE": iocMSRWrite,
		"PITRACE_IOC_ITRACE_ON": iocITraceOn, "PITRACE_IOC_ITRACE_OFF": iocITraceOff, "PITRACE_IOC_ITRACE_STATS": iocITraceStats,
		"PITRACE_IOC_JIT": iocJIT, "PITRACE_IOC_METHOD": iocMethod,
	}
}

// MSR reads (write false) or writes one MSR on one CPU through the module
// file fd (PITRACE_IOC_MSR_READ / _WRITE) and returns the value read. The
// errno is returned as is (EPERM: not root, EACCES: not in the write
// allowlist, EIO: the MSR faults, ENXIO: no such CPU); callers word it.
func MSR(fd int, write bool, cpu, reg uint32, value uint64) (uint64, error) {
	a := msrArg{CPU: cpu, Reg: reg, Value: value}
	var req uintptr = iocMSRRead
	if write {
		req = iocMSRWrite
	}
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&a)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return a.Value, nil
	}
}
