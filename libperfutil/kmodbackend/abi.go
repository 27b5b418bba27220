package kmodbackend

// The Go mirror of kmod/uapi/pitrace.h, the module's ABI. abi_cgo_test.go
// checks every size, offset, ioctl number and code here against the header.

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ABIVersion is the ABI this package speaks.
const ABIVersion = 1

// Device is the module's device node.
const Device = "/dev/pitrace"

// Modes, states, buffer kinds, segment states and flags (pitrace.h).
const (
	stateFree = 0
	stateInit = 1
	stateOn   = 2
	stateOff  = 3

	kindTrace = 0
	kindMTE   = 1

	mmapShift = 32
	segments  = 16

	segFree    = 0
	segFilling = 1
	segDone    = 2

	bufMagic = 0x46424950
	noSeg    = 0xffffffff

	pathMax   = 256
	eventName = 32

	stStoppedFull = 1
	stUnsaved     = 2
	stEvent       = 4

	cpuTraceFull = 1
	cpuMTEFull   = 2

	hookMaxWords = 64
	hookMaxBytes = 512

	benchTprof = 1
	benchMax   = 1000000

	featKprobeExit = 1
	featKprobeExec = 2
	featUnmap      = 4
	featMmap       = 8
	featCallstack  = 1 << 24 // UNWIND records, ENABLE's stack_depth
)

// mmapOffset is the mmap offset of one CPU's trace or MTE buffer.
func mmapOffset(cpu, kind int) int64 { return int64(cpu*2+kind) << mmapShift }

type seg struct {
	State   uint32
	Used    uint32
	Seq     uint64
	Records uint64
}

type bufHdr struct {
	Magic      uint32
	ABI        uint32
	CPU        uint32
	Kind       uint32
	Mode       uint32
	SegSize    uint32
	NSeg       uint32
	Flags      uint32
	DataOffset uint64
	Records    uint64
	Lost       uint64
	Bytes      uint64
	Pending    uint64
	NextSeq    uint64
	Cur        uint32
	Reserved   uint32
	Seg        [segments]seg
}

type initArg struct {
	TraceSize uint64
	MTESize   uint64
	Mode      uint32
	Reserved  uint32
}

type modeArg struct {
	Mode     uint32
	Reserved uint32
	Path     [pathMax]byte
}

type majorsArg struct {
	Mask       [4]uint64
	StackDepth uint32 // ENABLE: call-stack depth limit, 0 leaves it (PITRACE_FEAT_CALLSTACK)
	Reserved   uint32
}

// majorsSizeV1 is the ABI 1 size of majorsArg (before StackDepth).
const majorsSizeV1 = 32

type rateArg struct {
	Hz          uint32
	EventType   uint32
	EventConfig uint64
	Event       [eventName]byte
}

type statusArg struct {
	ABI          uint32
	State        uint32
	Mode         uint32
	Flags        uint32
	TraceSize    uint64
	MTESize      uint64
	TraceSegSize uint32
	TraceNSeg    uint32
	MTESegSize   uint32
	MTENSeg      uint32
	NCPUs        uint32
	RateHz       uint32
	EventType    uint32
	DrainerPid   uint32
	EventConfig  uint64
	StartWallNs  uint64
	StartClockNs uint64
	Enabled      [4]uint64
	OnCount      uint64
	MapSizeTrace uint64
	MapSizeMTE   uint64
	Event        [eventName]byte
	Path         [pathMax]byte
}

type cpuStatusArg struct {
	CPU        uint32
	Flags      uint32
	Records    uint64
	Lost       uint64
	Bytes      uint64
	Used       uint64
	MTERecords uint64
	MTELost    uint64
	MTEBytes   uint64
	MTEUsed    uint64
}

type hookArg struct {
	Major    uint16
	Reserved uint16
	Minor    uint32
	NWords   uint32
	Len      uint32
	Words    uint64
	Data     uint64
}

type sysinfoArg struct {
	ABI      uint32
	NCPUs    uint32
	Online   uint32
	PageSize uint32
	ClockID  uint32
	Segments uint32
	HdrSize  uint32
	Features uint32
	MinBuf   uint64
	MaxBuf   uint64
	MemLimit uint64
}

type releaseArg struct {
	CPU      uint32
	Kind     uint32
	Seg      uint32
	Reserved uint32
	Seq      uint64
}

type benchArg struct {
	Path   uint32
	Count  uint32
	Cycles uint64
}

// PTT (per-thread metrics): the module's work area and its ioctls. The Go
// PTT library's module backend reads pttArea through the mapping at
// pttMmapOffset (see docs/ptt.md).
const (
	pttMaxMetrics = 8
	pttMaxSlots   = 8
	pttStatusCPUs = 64
	pttKindTSC    = 0
	pttKindPerf   = 1
	pttMmapOffset = 1 << 47
)

type pttMetric struct {
	Kind   uint32
	Type   uint32
	Config uint64
}

type pttInitArg struct {
	NMetrics uint32
	Flags    uint32
	M        [pttMaxMetrics]pttMetric
}

type pttArea struct {
	Seq        uint32
	CPU        uint32
	Dispatches uint32
	Interrupts uint32
	NMetrics   uint32
	Dead       uint32
	Accum      [pttMaxMetrics]uint64
	Last       [pttMaxMetrics]uint64
	IntrTime   [pttMaxMetrics]uint64
	Live       [pttMaxMetrics]uint64
}

type pttBucket struct {
	Interrupts uint64
	TSC        uint64
	Val        [pttMaxMetrics]uint64
}

type pttStatusArg struct {
	FirstCPU uint32
	NCPUs    uint32
	NrCPUs   uint32
	Hooks    uint32
	NAreas   uint32
	NMetrics uint32
	CPU      [pttStatusCPUs]pttBucket
}

type pttWatchArg struct {
	Tid   int32
	Flags uint32
}

type pttThread struct {
	Tid     int32
	Pid     int32
	Comm    [16]byte
	Running uint32
	Mapped  uint32
	A       pttArea
}

type pttReadArg struct {
	Max   uint32
	N     uint32
	Total uint32
	Pad   uint32
	Buf   uint64
}

// msrArg is struct pitrace_msr (MSR_READ / MSR_WRITE, pitrace_msr.c).
type msrArg struct {
	CPU      uint32
	Reg      uint32
	Value    uint64
	Flags    uint32
	Reserved uint32
}

// ioctl number encoding (asm-generic/ioctl.h).
const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2
	iocMagic = 0xE1
)

func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | iocMagic<<8 | nr
}

var (
	iocInit      = ioc(iocWrite, 1, unsafe.Sizeof(initArg{}))
	iocEnable    = ioc(iocWrite, 2, unsafe.Sizeof(majorsArg{}))
	iocDisable   = ioc(iocWrite, 3, unsafe.Sizeof(majorsArg{}))
	iocSetMode   = ioc(iocWrite, 4, unsafe.Sizeof(modeArg{}))
	iocSetRate   = ioc(iocWrite, 5, unsafe.Sizeof(rateArg{}))
	iocOn        = ioc(iocNone, 6, 0)
	iocOff       = ioc(iocNone, 7, 0)
	iocStatus    = ioc(iocRead, 8, unsafe.Sizeof(statusArg{}))
	iocCPUStatus = ioc(iocRead|iocWrite, 9, unsafe.Sizeof(cpuStatusArg{}))
	iocHook      = ioc(iocWrite, 10, unsafe.Sizeof(hookArg{}))
	iocSysinfo   = ioc(iocRead, 11, unsafe.Sizeof(sysinfoArg{}))
	iocFree      = ioc(iocNone, 12, 0)
	iocRelease   = ioc(iocWrite, 13, unsafe.Sizeof(releaseArg{}))
	iocDrain     = ioc(iocNone, 14, 0)
	iocSaved     = ioc(iocNone, 15, 0)
	iocBench     = ioc(iocRead|iocWrite, 16, unsafe.Sizeof(benchArg{}))
	iocPttInit   = ioc(iocWrite, 17, unsafe.Sizeof(pttInitArg{}))
	iocPttTerm   = ioc(iocNone, 18, 0)
	iocPttStatus = ioc(iocRead|iocWrite, 19, unsafe.Sizeof(pttStatusArg{}))
	iocPttWatch  = ioc(iocWrite, 20, unsafe.Sizeof(pttWatchArg{}))
	iocPttRead   = ioc(iocRead|iocWrite, 21, unsafe.Sizeof(pttReadArg{}))
	iocMSRRead   = ioc(iocRead|iocWrite, 40, unsafe.Sizeof(msrArg{}))
	iocMSRWrite  = ioc(iocWrite, 41, unsafe.Sizeof(msrArg{}))
)

// IoctlNumbers lists every ioctl by name (for the ABI test and the fuzzer).
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
	req := iocMSRRead
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
