//go:build ignore

// The input of `go generate` (internal/abigen, `cgo -godefs`): the Go names
// of the module's ABI, each bound to its C name in kmod/uapi/pitrace.h.
// The generator writes zabi.go from it (types, constants, ioctl numbers,
// all with the values and layouts the C compiler gives the header) and
// zabi_header_test.go (every macro and struct layout of the header, for
// the cross-checks with format/trace). Edit this file and the
// header; never the generated ones.

package kmodbackend

/*
#include "pitrace.h"
*/
import "C"

// Device is the module's device node.
const Device = C.PITRACE_DEVICE

// ABIVersion is the ABI this package speaks.
const ABIVersion = C.PITRACE_ABI_VERSION

// Modes, states, buffer kinds, segment states and flags.
const (
	stateFree = C.PITRACE_STATE_FREE
	stateInit = C.PITRACE_STATE_INIT
	stateOn   = C.PITRACE_STATE_ON
	stateOff  = C.PITRACE_STATE_OFF

	kindTrace = C.PITRACE_KIND_TRACE
	kindMTE   = C.PITRACE_KIND_MTE

	mmapShift = C.PITRACE_MMAP_SHIFT
	segments  = C.PITRACE_SEGMENTS

	segFree    = C.PITRACE_SEG_FREE
	segFilling = C.PITRACE_SEG_FILLING
	segDone    = C.PITRACE_SEG_DONE

	bufMagic = C.PITRACE_BUF_MAGIC

	pathMax   = C.PITRACE_PATH_MAX
	eventName = C.PITRACE_EVENT_NAME

	stStoppedFull = C.PITRACE_ST_STOPPED_FULL
	stUnsaved     = C.PITRACE_ST_UNSAVED

	cpuTraceFull = C.PITRACE_CPU_TRACE_FULL
	cpuMTEFull   = C.PITRACE_CPU_MTE_FULL

	hookMaxWords = C.PITRACE_HOOK_MAX_WORDS
	hookMaxBytes = C.PITRACE_HOOK_MAX_BYTES

	featCallstack = C.PITRACE_FEAT_CALLSTACK // UNWIND records, ENABLE's stack_depth
)

// PTT (per-thread metrics): the module's work area and its ioctls. The Go
// PTT library's module backend reads pttArea through the mapping at
// pttMmapOffset (see docs/ptt.md).
const (
	pttMaxMetrics = C.PITRACE_PTT_MAX_METRICS
	pttMaxSlots   = C.PITRACE_PTT_MAX_SLOTS
	pttStatusCPUs = C.PITRACE_PTT_STATUS_CPUS
	pttKindTSC    = C.PITRACE_PTT_TSC
	pttKindPerf   = C.PITRACE_PTT_PERF
	pttMmapOffset = C.PITRACE_PTT_MMAP_OFFSET
)

// ITrace (PITRACE_IOC_ITRACE_ON / _OFF / _STATS).
const (
	itraceSelf       = C.PITRACE_ITRACE_SELF
	itraceFollow     = C.PITRACE_ITRACE_FOLLOW
	itraceAtExec     = C.PITRACE_ITRACE_AT_EXEC
	itraceMaxPids    = C.PITRACE_ITRACE_MAX_PIDS
	featITrace       = C.PITRACE_FEAT_ITRACE
	featITraceKernel = C.PITRACE_FEAT_ITRACE_KERNEL // ITRACE_INTERRUPT / _FAULT records, ITRACE_STATS
	featITraceBlock  = C.PITRACE_FEAT_ITRACE_BLOCK  // block-stepping, STEP_*, ITRACE_STATS' block fields
	itraceStepSingle = C.PITRACE_ITRACE_STEP_SINGLE
	itraceStepVerify = C.PITRACE_ITRACE_STEP_VERIFY
)

// The ioctl numbers (IoctlNumbers lists them all by their C names).
const (
	iocInit        = C.PITRACE_IOC_INIT
	iocEnable      = C.PITRACE_IOC_ENABLE
	iocDisable     = C.PITRACE_IOC_DISABLE
	iocSetMode     = C.PITRACE_IOC_SETMODE
	iocSetRate     = C.PITRACE_IOC_SETRATE
	iocOn          = C.PITRACE_IOC_ON
	iocOff         = C.PITRACE_IOC_OFF
	iocStatus      = C.PITRACE_IOC_STATUS
	iocCPUStatus   = C.PITRACE_IOC_CPU_STATUS
	iocHook        = C.PITRACE_IOC_HOOK
	iocSysinfo     = C.PITRACE_IOC_SYSINFO
	iocFree        = C.PITRACE_IOC_FREE
	iocRelease     = C.PITRACE_IOC_RELEASE
	iocDrain       = C.PITRACE_IOC_DRAIN
	iocSaved       = C.PITRACE_IOC_SAVED
	iocBench       = C.PITRACE_IOC_BENCH
	iocPttInit     = C.PITRACE_IOC_PTT_INIT
	iocPttTerm     = C.PITRACE_IOC_PTT_TERM
	iocPttStatus   = C.PITRACE_IOC_PTT_STATUS
	iocPttWatch    = C.PITRACE_IOC_PTT_WATCH
	iocPttRead     = C.PITRACE_IOC_PTT_READ
	iocITraceOn    = C.PITRACE_IOC_ITRACE_ON
	iocITraceOff   = C.PITRACE_IOC_ITRACE_OFF
	iocITraceStats = C.PITRACE_IOC_ITRACE_STATS
	iocJIT         = C.PITRACE_IOC_JIT
	iocMethod      = C.PITRACE_IOC_METHOD
	iocMSRRead     = C.PITRACE_IOC_MSR_READ
	iocMSRWrite    = C.PITRACE_IOC_MSR_WRITE
)

type seg C.struct_pitrace_seg

type bufHdr C.struct_pitrace_buf_hdr

type initArg C.struct_pitrace_init_arg

type modeArg C.struct_pitrace_mode_arg

type majorsArg C.struct_pitrace_majors

type rateArg C.struct_pitrace_rate_arg

type statusArg C.struct_pitrace_status

type cpuStatusArg C.struct_pitrace_cpu_status

type hookArg C.struct_pitrace_hook_arg

type sysinfoArg C.struct_pitrace_sysinfo

type releaseArg C.struct_pitrace_release_arg

type benchArg C.struct_pitrace_bench_arg

type pttMetric C.struct_pitrace_ptt_metric

type pttInitArg C.struct_pitrace_ptt_init

type pttArea C.struct_pitrace_ptt_area

type pttBucket C.struct_pitrace_ptt_bucket

type pttStatusArg C.struct_pitrace_ptt_status

type pttWatchArg C.struct_pitrace_ptt_watch

type pttThread C.struct_pitrace_ptt_thread

type pttReadArg C.struct_pitrace_ptt_read

type msrArg C.struct_pitrace_msr

type itraceOnArg C.struct_pitrace_itrace_on

type itraceOffArg C.struct_pitrace_itrace_off

type itraceStats C.struct_pitrace_itrace_stats

// JIT and METHOD: JProf's agent (tools/jprof/agent/jittrace.c) calls them
// from C; these mirrors are for the ABI test and the ioctl fuzzer.
type jitArg C.struct_pitrace_jit_arg

type methodArg C.struct_pitrace_method_arg
