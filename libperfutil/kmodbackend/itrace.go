package kmodbackend

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ITrace through the module (kmod/pitrace_itrace.c): PITRACE_IOC_ITRACE_ON
// and _OFF; the records are the same as the daemon's ptrace tracer's.

// ITraceSel selects the threads for ITraceOn.
type ITraceSel struct {
	Self     bool   // the calling thread (ITraceOn)
	PIDs     []int  // processes, all their threads
	PIDsFrom int    // every process with pid >= PIDsFrom (not the caller's)
	Follow   bool   // forked children too
	AtExec   bool   // PIDs start at their next exec
	Step     string // how traps are taken: libperfutil/itrace's Step (block-step where honoured, by default)
}

// stepFlags maps an ITrace step mode (libperfutil/itrace's Step: "" block-
// steps where the CPU honours BTF, "single", "verify") to ITRACE_ON's
// PITRACE_ITRACE_STEP_* flags.
func stepFlags(s string) (uint32, error) {
	switch s {
	case "":
		return 0, nil
	case "single":
		return itraceStepSingle, nil
	case "verify":
		return itraceStepVerify, nil
	case "breakpoint":
		return 0, fmt.Errorf("itrace: --step breakpoint is pitraced's ptrace tracer's (PERFINSP_BACKEND=daemon); the module takes \"single\", \"verify\" or none")
	}
	return 0, fmt.Errorf("itrace: unknown step mode %q: use \"single\", \"verify\" or none (block-step where the CPU honours it)", s)
}

// HasITraceBlock says whether the loaded module takes Step (block-stepping).
func (b *Backend) HasITraceBlock() bool {
	var si sysinfoArg
	return b.ioctl(iocSysinfo, unsafe.Pointer(&si)) == nil && si.Features&featITraceBlock != 0
}

// ITraceOffResult counts what ITraceOff stopped.
type ITraceOffResult struct {
	Threads      int
	Instructions uint64
	Records      uint64
}

func pidArray(pids []int) ([]int32, error) {
	if len(pids) > itraceMaxPids {
		return nil, fmt.Errorf("itrace: at most %d processes at once (got %d)", itraceMaxPids, len(pids))
	}
	out := make([]int32, len(pids))
	for i, p := range pids {
		if p <= 0 || p > 1<<30 {
			return nil, fmt.Errorf("itrace: %d is not a process id", p)
		}
		out[i] = int32(p)
	}
	return out, nil
}

// HasITrace says whether the loaded module has single-step ITrace.
func (b *Backend) HasITrace() bool {
	var si sysinfoArg
	return b.ioctl(iocSysinfo, unsafe.Pointer(&si)) == nil && si.Features&featITrace != 0
}

func itraceErr(op string, err error) error {
	switch {
	case errors.Is(err, unix.ENODATA):
		return fmt.Errorf("itrace %s: tracing is not on: run swtrace init and swtrace on first", op)
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("itrace %s: not allowed: you may trace your own (dumpable) processes; root may trace any", op)
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("itrace %s: no such process", op)
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("itrace %s: this thread is already traced", op)
	case errors.Is(err, unix.ENOTTY):
		return fmt.Errorf("itrace %s: the loaded pitrace module has no ITrace: load a newer one (make kmod)", op)
	}
	return fmt.Errorf("itrace %s: %w", op, err)
}

// ITraceOn starts single-stepping the selected threads; it returns the
// threads selected (processes waiting for exec with AtExec) and the
// processes --pids-from left out.
func (b *Backend) ITraceOn(s ITraceSel) (threads, skipped int, err error) {
	pids, err := pidArray(s.PIDs)
	if err != nil {
		return 0, 0, err
	}
	step, err := stepFlags(s.Step)
	if err != nil {
		return 0, 0, err
	}
	if step != 0 && !b.HasITraceBlock() {
		return 0, 0, fmt.Errorf("itrace on: the loaded pitrace module has no step modes (%q): load a newer one (make kmod) or leave the step mode out", string(s.Step))
	}
	a := itraceOnArg{Flags: step, NPids: uint32(len(pids)), PidsFrom: int32(s.PIDsFrom)}
	if s.Self {
		a.Flags |= itraceSelf
	}
	if s.Follow {
		a.Flags |= itraceFollow
	}
	if s.AtExec {
		a.Flags |= itraceAtExec
	}
	if len(pids) > 0 {
		a.Pids = uint64(uintptr(unsafe.Pointer(&pids[0])))
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, b.fd, iocITraceOn, uintptr(unsafe.Pointer(&a)))
	runtime.KeepAlive(pids)
	if e != 0 {
		return 0, 0, itraceErr("on", e)
	}
	return int(a.Threads), int(a.Skipped), nil
}

// ITraceOff stops the calling thread (self), the processes pids, or with
// neither every traced thread.
func (b *Backend) ITraceOff(self bool, pids []int) (ITraceOffResult, error) {
	p, err := pidArray(pids)
	if err != nil {
		return ITraceOffResult{}, err
	}
	a := itraceOffArg{NPids: uint32(len(p))}
	if self {
		a.Flags = itraceSelf
	}
	if len(p) > 0 {
		a.Pids = uint64(uintptr(unsafe.Pointer(&p[0])))
	}
	err = b.ioctl(iocITraceOff, unsafe.Pointer(&a))
	runtime.KeepAlive(p)
	if err != nil {
		return ITraceOffResult{}, itraceErr("off", err)
	}
	return ITraceOffResult{Threads: int(a.Threads), Instructions: a.Instructions, Records: a.Records}, nil
}
