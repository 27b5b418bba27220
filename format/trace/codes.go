package trace

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Major codes. Values below 0x100 are the facility's own; 0x100..0xffff are
// free for user hook records (TraceHook). The JProf/event codes of the
// trace-merge patent (FIG. 30: 0x04, 0x10, 0x30, 0x40, 0x41, 0x50) keep
// their numbers.
const (
	MajorSys       uint16 = 0x01 // facility records: time-high, lost, markers
	MajorMTE       uint16 = 0x02 // module table entries (MTE buffer)
	MajorInterrupt uint16 = 0x04 // interrupt entry / exit (FIG. 30)
	MajorDispatch  uint16 = 0x08 // scheduler dispatch (sched_switch)
	MajorThread    uint16 = 0x10 // JProf thread records (FIG. 30), reserved
	MajorTprof     uint16 = 0x12 // tprof samples
	MajorJITLoad   uint16 = 0x14 // JIT code load / unload, reserved
	MajorITraceU   uint16 = 0x20 // ITrace, user addresses, reserved
	MajorITraceK   uint16 = 0x21 // ITrace, kernel addresses, reserved
	MajorPTT       uint16 = 0x24 // PTT records, reserved
	MajorInterp    uint16 = 0x30 // interpreted method entry / exit (FIG. 30), reserved
	MajorUnwind    uint16 = 0x40 // stack unwind at a timer tick (FIG. 30), reserved
	MajorUnwindEvt uint16 = 0x41 // stack unwind at an instrumented routine, reserved
	MajorJitted    uint16 = 0x50 // jitted method entry / exit (FIG. 30), reserved
	MajorCallFlow  uint16 = 0x60 // C entry/exit hooks (-finstrument-functions), reserved
	MajorUserFirst uint16 = 0x100
)

// ExitBit marks an exit minor code: exit = entry | ExitBit (FIG. 30).
const ExitBit uint32 = 0x80000000

// Minor codes of MajorSys.
const (
	SysTimeHigh uint32 = 1 // high 32 bits of the time stamp changed
	SysInfo     uint32 = 2 // system information at trace start
	SysLost     uint32 = 3 // records were lost before this point
	SysTraceOn  uint32 = 4 // tracing turned on
	SysTraceOff uint32 = 5 // tracing turned off
	SysBufFull  uint32 = 6 // normal mode: a buffer filled and tracing stopped
	SysEvent    uint32 = 7 // event-based tprof: the event sampled and its period
)

// Minor codes of MajorMTE.
const (
	MTEProcess    uint32 = 1 // a process exists (at on) or was named: pid, ppid, name
	MTEFork       uint32 = 2 // process or thread created
	MTEExec       uint32 = 3 // exec: new program path
	MTEExit       uint32 = 4 // a thread or process exited
	MTEThreadName uint32 = 5 // thread exists / was named
	MTESegment    uint32 = 6 // executable segment mapped
	MTEUnmap      uint32 = 7 // executable segment unmapped
	MTEFile       uint32 = 8 // the file (device, inode) the segment before it maps
)

// Minor codes of MajorTprof.
const (
	TprofTick  uint32 = 1 // time-based sample
	TprofEvent uint32 = 2 // event-based sample (hardware counter overflow)
)

// Flags of tprof records.
const (
	TprofKernel uint64 = 1 // the sampled ip is a kernel address
)

// The minor code of MajorUnwind records (FIG. 30) and their flags.
const (
	UnwindTick      uint32 = 0x7fffffff
	UnwindSwitch    uint32 = 0x7ffffffe // the stack of a thread switched out (after its DISPATCH)
	UnwindTruncated uint64 = 1          // the stack was deeper than the depth limit
	UnwindCFI       uint64 = 2          // the user PCs were unwound by call-frame information (else by frame pointers)
	UnwindKernShift        = 16         // flags >> UnwindKernShift: kernel PCs first
	UnwindMaxDepth         = 127        // default depth limit (perf's too)
	UnwindMaxPCs           = 2000       // what one record can hold
)

// Minor codes of MajorDispatch.
const (
	DispatchSwitch uint32 = 1
	DispatchWakeup uint32 = 2 // a thread was woken (sched_wakeup, sched_wakeup_new)
)

// WAKEUP flags.
const (
	WakeupNew uint64 = 1 // the thread is new (sched_wakeup_new: its first wake-up after fork)
)

// DISPATCH prev_state: the scheduler's report of the state the previous
// thread left the CPU in. The low byte is 0 when it was still runnable
// (preempted, or yielded); else its bits are the task states below. Bit 8
// is the tracepoint's preemption mark on the agent's backend; the module
// writes the task's raw state, where bit 8 is TASK_WAKEKILL and bit 10
// TASK_NOLOAD (with D: an idle kernel thread, not I/O).
const (
	StateMask      uint64 = 0xff
	StateSleeping  uint64 = 0x01  // S: interruptible sleep
	StateBlocked   uint64 = 0x02  // D: uninterruptible (I/O, some locks)
	StateStopped   uint64 = 0x04  // T
	StateTraced    uint64 = 0x08  // t
	StateDead      uint64 = 0x10  // X
	StateZombie    uint64 = 0x20  // Z
	StateParked    uint64 = 0x40  // P
	StateIdle      uint64 = 0x80  // I: an idle kernel thread (the tracepoint's TASK_REPORT_IDLE)
	StateRawNoLoad uint64 = 0x400 // the module's raw TASK_NOLOAD (D with it: idle)
	// StateUnknown: the switch is known only from the next thread's
	// switch-in (the agent's, from perf's switch record where
	// sched_switch reported none); the state prev left in is not known.
	// The low byte is 0.
	StateUnknown uint64 = 0x80000000
)

// Minor codes of MajorInterrupt (exit = entry | ExitBit).
const (
	IntrHard    uint32 = 1 // hard IRQ handler
	IntrSoft    uint32 = 2 // softirq
	IntrTimer   uint32 = 3 // local timer
	IntrIPI     uint32 = 4 // inter-processor interrupt
	IntrUnknown uint32 = 5 // other / unknown vector
)

// Minor codes of MajorJITLoad (reserved for the JIT issue; the layout is fixed now).
const (
	JITLoad   uint32 = 1 // code loaded: pid, tid, address, size, name
	JITUnload uint32 = 2 // code unloaded: pid, address, size
)

// MTE fork flags.
const (
	ForkThread uint64 = 1 // the new task shares its parent's address space (a clone)
)

// Lost-record reasons.
const (
	LostBufferFull uint64 = 1 // normal mode or continuous mode: no free segment
	LostOverwrite  uint64 = 2 // wrap mode: the oldest segment was overwritten
	LostWriteFail  uint64 = 3 // wrap/cont mode: the stream file could not be written (a full disk)
)

// Field is one fixed field of a record: its name and width in bytes (4 or 8).
type Field struct {
	Name  string
	Width int
	// Hex makes post.show print the value in hexadecimal.
	Hex bool
}

// Spec describes one major/minor code.
type Spec struct {
	Major  uint16
	Minor  uint32
	Name   string
	Layout int // LayoutFixed, LayoutString or LayoutBytes
	Fields []Field
	// StrName names the trailing string, when Layout is LayoutString.
	StrName string
	Doc     string
}

func u32(n string) Field    { return Field{Name: n, Width: 4} }
func u64(n string) Field    { return Field{Name: n, Width: 8} }
func x64(n string) Field    { return Field{Name: n, Width: 8, Hex: true} }
func x32(n string) Field    { return Field{Name: n, Width: 4, Hex: true} }
func fl(f ...Field) []Field { return f }

var specs = []Spec{
	{MajorSys, SysTimeHigh, "TIME_HIGH", LayoutFixed, fl(u32("high")), "", "upper 32 bits of the time stamp of the records that follow in this buffer"},
	{MajorSys, SysInfo, "SYSINFO", LayoutString, fl(u32("ncpus"), u32("clock_id"), u64("clock_hz"), u64("wall_ns")), "uname", "system information at trace start"},
	{MajorSys, SysLost, "LOST", LayoutFixed, fl(u64("count"), u32("reason")), "", "count records were lost before this one (reason 1 buffer full, 2 overwritten, 3 the stream file could not be written)"},
	{MajorSys, SysTraceOn, "TRACE_ON", LayoutFixed, fl(u32("majors_lo"), u32("rate_hz")), "", "tracing turned on"},
	{MajorSys, SysTraceOff, "TRACE_OFF", LayoutFixed, nil, "", "tracing turned off"},
	{MajorSys, SysBufFull, "BUFFER_FULL", LayoutFixed, fl(u32("mte")), "", "normal mode: this CPU's buffer filled (mte=1: the MTE buffer) and tracing stopped"},
	{MajorSys, SysEvent, "TPROF_EVENT_NAME", LayoutString, fl(u32("type"), u64("config"), u64("period")), "event", "event-based tprof: the event sampled (its name as given, perf type and config) and a sample every period events"},

	{MajorMTE, MTEProcess, "MTE_PROCESS", LayoutString, fl(u32("pid"), u32("ppid")), "name", "process exists or was renamed"},
	{MajorMTE, MTEFork, "MTE_FORK", LayoutFixed, fl(u32("ppid"), u32("ptid"), u32("pid"), u32("tid"), u32("flags")), "", "task created; flags bit 0: thread (shares address space)"},
	{MajorMTE, MTEExec, "MTE_EXEC", LayoutString, fl(u32("pid"), u32("tid")), "path", "exec of a new program"},
	{MajorMTE, MTEExit, "MTE_EXIT", LayoutFixed, fl(u32("pid"), u32("tid")), "", "task exited (pid == tid: the process)"},
	{MajorMTE, MTEThreadName, "MTE_THREAD", LayoutString, fl(u32("pid"), u32("tid")), "name", "thread exists or was named"},
	{MajorMTE, MTESegment, "MTE_SEGMENT", LayoutString, fl(u32("pid"), x64("start"), x64("size"), x64("offset"), u32("prot")), "path", "executable segment: start, size, file offset, path"},
	{MajorMTE, MTEUnmap, "MTE_UNMAP", LayoutFixed, fl(u32("pid"), x64("start"), x64("size")), "", "executable segment unmapped"},
	{MajorMTE, MTEFile, "MTE_FILE", LayoutFixed, fl(u32("pid"), x64("start"), u32("dev_major"), u32("dev_minor"), u64("ino")), "", "the file the MTE_SEGMENT just before it maps: its device and inode at the mapping"},

	{MajorTprof, TprofTick, "TPROF_TICK", LayoutFixed, fl(u32("pid"), u32("tid"), x64("ip"), u32("flags")), "", "time-based sample; flags bit 0: kernel address"},
	{MajorTprof, TprofEvent, "TPROF_EVENT", LayoutFixed, fl(u32("pid"), u32("tid"), x64("ip"), u32("flags"), u32("event")), "", "event-based sample"},

	{MajorUnwind, UnwindSwitch, "UNWIND_SWITCH", LayoutBytes, fl(u32("pid"), u32("tid"), u32("flags")), "pcs", "call stack of the thread the DISPATCH record just before it on this CPU switched out while not runnable (prev_state low byte not 0): the PCs and flags as in UNWIND, the kernel's scheduler frames first"},
	{MajorUnwind, UnwindTick, "UNWIND", LayoutBytes, fl(u32("pid"), u32("tid"), u32("flags")), "pcs", "call stack of the tprof sample just before it on this CPU (FIG. 30): the bytes are N u64 PCs, the interrupted one first, the root last; flags: bit 0 truncated at the depth limit, bits 16-31 how many of the PCs are kernel addresses (they come first)"},

	{MajorDispatch, DispatchSwitch, "DISPATCH", LayoutFixed, fl(u32("prev_pid"), u32("prev_tid"), u32("next_pid"), u32("next_tid"), u32("prev_state")), "", "the CPU switched from prev to next; prev_state low byte 0: prev was still runnable (preempted), else 0x1 S sleeping, 0x2 D blocked, 0x80 I idle, 0x4/0x8/0x10/0x20/0x40 T/t/X/Z/P"},
	{MajorDispatch, DispatchWakeup, "WAKEUP", LayoutFixed, fl(u32("pid"), u32("tid"), u32("target_cpu"), u32("waker_pid"), u32("waker_tid"), u32("flags")), "", "thread tid of pid was woken, to run on target_cpu, by the thread running then (waker; 0: the idle task or an interrupt of it); flags bit 0: a new thread's first wake-up"},

	{MajorInterrupt, IntrHard, "IRQ_ENTRY", LayoutFixed, fl(u32("irq")), "", "hard IRQ handler entry"},
	{MajorInterrupt, IntrHard | ExitBit, "IRQ_EXIT", LayoutFixed, fl(u32("irq")), "", "hard IRQ handler exit"},
	{MajorInterrupt, IntrSoft, "SOFTIRQ_ENTRY", LayoutFixed, fl(u32("vec")), "", "softirq entry"},
	{MajorInterrupt, IntrSoft | ExitBit, "SOFTIRQ_EXIT", LayoutFixed, fl(u32("vec")), "", "softirq exit"},
	{MajorInterrupt, IntrTimer, "TIMER_ENTRY", LayoutFixed, fl(u32("vector")), "", "local timer interrupt entry"},
	{MajorInterrupt, IntrTimer | ExitBit, "TIMER_EXIT", LayoutFixed, fl(u32("vector")), "", "local timer interrupt exit"},
	{MajorInterrupt, IntrIPI, "IPI_ENTRY", LayoutFixed, fl(u32("vector")), "", "inter-processor interrupt entry"},
	{MajorInterrupt, IntrIPI | ExitBit, "IPI_EXIT", LayoutFixed, fl(u32("vector")), "", "inter-processor interrupt exit"},
	{MajorInterrupt, IntrUnknown, "INTR_ENTRY", LayoutFixed, fl(u32("vector")), "", "other interrupt entry"},
	{MajorInterrupt, IntrUnknown | ExitBit, "INTR_EXIT", LayoutFixed, fl(u32("vector")), "", "other interrupt exit"},

	{MajorJITLoad, JITLoad, "JIT_LOAD", LayoutString, fl(u32("pid"), u32("tid"), x64("addr"), x64("size")), "name", "JIT code loaded at addr (reserved: JIT issue)"},
	{MajorJITLoad, JITUnload, "JIT_UNLOAD", LayoutFixed, fl(u32("pid"), x64("addr"), x64("size")), "", "JIT code unloaded (reserved: JIT issue)"},
	{MajorJITLoad, JITMethod, "JIT_METHOD", LayoutString, fl(u32("pid"), x64("id")), "name", "a method id of the process (in its 0x30/0x50 entry/exit records) is this method (JProf, docs/jprof.md)"},

	{MajorITraceU, ITraceIntrpt, "ITRACE_INTRPT", LayoutFixed, itraceBlock, "", "taken branch: interrupt / signal handler entry (PI type 0)"},
	{MajorITraceU, ITraceCall, "ITRACE_CALL", LayoutFixed, itraceBlock, "", "taken branch: call; count instructions since the previous branch, the last at block start + from_off"},
	{MajorITraceU, ITraceReturn, "ITRACE_RETURN", LayoutFixed, itraceBlock, "", "taken branch: return"},
	{MajorITraceU, ITraceJump, "ITRACE_JUMP", LayoutFixed, itraceBlock, "", "taken branch: jump (conditional or not, direct or indirect)"},
	{MajorITraceU, ITraceIret, "ITRACE_IRET", LayoutFixed, itraceBlock, "", "taken branch: iret"},
	{MajorITraceU, ITraceOther, "ITRACE_OTHER", LayoutFixed, itraceBlock, "", "taken branch by another instruction"},
	{MajorITraceU, ITraceUndefd, "ITRACE_UNDEFD", LayoutFixed, itraceBlock, "", "control moved after an instruction the tracer could not decode"},
	{MajorITraceU, ITraceThread, "ITRACE_THREAD", LayoutFixed, fl(u32("pid"), u32("tid")), "", "the ITrace records that follow in this buffer are of this thread"},
	{MajorITraceU, ITraceStart, "ITRACE_START", LayoutFixed, fl(u32("pid"), u32("tid"), x64("ip"), u32("flags")), "", "tracing of a thread starts at ip (flags bit 0: at exec)"},
	{MajorITraceU, ITraceEnd, "ITRACE_END", LayoutFixed, fl(u32("pid"), u32("tid"), u32("count"), u32("from_off"), u32("reason")), "", "tracing of a thread ends: count instructions of the last block; reason 1 exit, 2 off, 3 exec, 4 detach error"},
	{MajorITraceK, ITraceSyscall, "ITRACE_SYSCALL", LayoutFixed, fl(x64("to"), u32("count"), x32("from_off"), u32("nr"), u32("dur_ns")), "", "a system call ends the block (the syscall instruction counted); user code resumes at to"},
	{MajorITraceK, ITraceSignal, "ITRACE_SIGNAL", LayoutFixed, fl(x64("to"), u32("count"), x32("from_off"), u32("signo"), u32("flags")), "", "a signal was delivered; flags bit 0: its handler starts at to (else the thread goes on at to)"},
	{MajorITraceK, ITraceInterrupt, "ITRACE_INTERRUPT", LayoutFixed, fl(x64("to"), u32("count"), x32("from_off"), u32("irq"), u32("dur_ns")), "", "an interrupt while the thread ran user code (irq: APIC vector, or 0x100 + a device IRQ); no branch: the block goes on at to"},
	{MajorITraceK, ITraceFault, "ITRACE_FAULT", LayoutFixed, fl(x64("to"), u32("count"), x32("from_off"), x64("addr"), x32("error"), u32("dur_ns")), "", "a page fault of the thread's user code at addr (x86 error code); no branch: the block goes on at to"},
}

type key struct {
	major uint16
	minor uint32
}

var byKey = func() map[key]*Spec {
	m := make(map[key]*Spec, len(specs))
	for i := range specs {
		m[key{specs[i].Major, specs[i].Minor}] = &specs[i]
	}
	return m
}()

// fastMajors bounds the majors of fast: the facility's own, UNWIND (a
// record per sample with call stacks) included.
const fastMajors = 0x80

// highMinor is the highest minor code of fastHigh: UNWIND's
// (UnwindTick) and those just below it.
const highMinor = 0x7fffffff

// fast and fastHigh hold the specs of small codes, and of the codes just
// below highMinor, for Lookup's hot path (one per record).
var fast, fastHigh = func() (t, h [fastMajors][8]*Spec) {
	for i := range specs {
		s := &specs[i]
		switch {
		case s.Major >= fastMajors:
		case s.Minor < 8:
			t[s.Major][s.Minor] = s
		case s.Minor <= highMinor && s.Minor > highMinor-8:
			h[s.Major][highMinor-s.Minor] = s
		}
	}
	return
}()

// Lookup returns the spec of a major/minor code, or nil if it is not in the table.
func Lookup(major uint16, minor uint32) *Spec {
	if major < fastMajors {
		if minor < 8 {
			return fast[major][minor]
		}
		if minor <= highMinor && minor > highMinor-8 {
			return fastHigh[major][highMinor-minor]
		}
	}
	return byKey[key{major, minor}]
}

// FieldOffsets returns the byte offset, from the start of a record, of
// each fixed field of code (major, minor), in the table's order, and the
// record's least size with them; ok is false for a code not in the table.
// (For readers that take fields from the record's bytes: Reader.NextOf.)
func FieldOffsets(major uint16, minor uint32) (offs []int, size int, ok bool) {
	spec := Lookup(major, minor)
	if spec == nil {
		return nil, 0, false
	}
	size = HeaderSize
	for _, f := range spec.Fields {
		offs = append(offs, size)
		size += f.Width
	}
	return offs, size, true
}

// Specs returns the code table sorted by major and minor.
func Specs() []Spec {
	out := append([]Spec(nil), specs...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Major != out[j].Major {
			return out[i].Major < out[j].Major
		}
		return out[i].Minor < out[j].Minor
	})
	return out
}

// Group is a named set of major codes a user enables with `swtrace enable`.
type Group struct {
	Name   string
	Major  uint16
	Doc    string
	Always bool // cannot be disabled
	// Available is false for groups reserved for later work.
	Available bool
}

// Groups lists the record types that can be enabled, by name.
var Groups = []Group{
	{"sys", MajorSys, "facility records (time-high, lost, on/off markers)", true, true},
	{"mte", MajorMTE, "processes, threads and executable segments", true, true},
	{"interrupt", MajorInterrupt, "interrupt entry/exit (hard IRQ, softirq)", false, true},
	{"dispatch", MajorDispatch, "scheduler dispatch and wake-ups (sched_switch, sched_wakeup, sched_wakeup_new)", false, true},
	{"tprof", MajorTprof, "tprof samples (time- or event-based)", false, true},
	{"callstack", MajorUnwind, "the call stack of every tprof sample (kernel and user, frame pointers); with dispatch, also of every thread switched out to wait", false, true},
	{"jit", MajorJITLoad, "JIT code load/unload records", false, true},
	{"itrace", MajorITraceU, "ITrace records (taken branches, system calls, signals) of the processes swtrace itrace on traces", false, true},
	{"ptt", MajorPTT, "PTT records (not yet available)", false, false},
}

// ParseMajor turns a group name or a major code (decimal or 0x hex) into a
// major code.
func ParseMajor(s string) (uint16, error) {
	for _, g := range Groups {
		if strings.EqualFold(g.Name, s) {
			if !g.Available {
				return 0, fmt.Errorf("record type %q is not available yet", s)
			}
			return g.Major, nil
		}
	}
	v, err := strconv.ParseUint(s, 0, 16)
	if err != nil {
		names := make([]string, 0, len(Groups))
		for _, g := range Groups {
			names = append(names, g.Name)
		}
		return 0, fmt.Errorf("unknown record type %q: use a name (%s) or a major code such as 0x12", s, strings.Join(names, ", "))
	}
	return uint16(v), nil
}

// MajorName returns a short name for a major code.
func MajorName(major uint16) string {
	for _, g := range Groups {
		if g.Major == major {
			return g.Name
		}
	}
	switch major {
	case MajorITraceK:
		return "itrace-k"
	case MajorThread:
		return "thread"
	case MajorInterp:
		return "interp"
	case MajorUnwind:
		return "unwind"
	case MajorUnwindEvt:
		return "unwind-evt"
	case MajorJitted:
		return "jitted"
	case MajorCallFlow:
		return "callflow"
	}
	if major >= MajorUserFirst {
		return fmt.Sprintf("user-0x%x", major)
	}
	return fmt.Sprintf("major-0x%x", major)
}

// Minor codes of MajorITraceU: the branch records' minor is PI's type of the
// instruction that ended the block (arc report, Figure 3).
const (
	ITraceIntrpt uint32 = 0
	ITraceCall   uint32 = 1
	ITraceReturn uint32 = 2
	ITraceJump   uint32 = 3
	ITraceIret   uint32 = 4
	ITraceOther  uint32 = 5
	ITraceUndefd uint32 = 6
	ITraceThread uint32 = 0x10 // context: pid, tid of the records that follow
	ITraceStart  uint32 = 0x11 // tracing of a thread starts
	ITraceEnd    uint32 = 0x12 // tracing of a thread ends
)

// Minor codes of MajorITraceK: kernel work inside a traced thread, one record each.
const (
	ITraceSyscall   uint32 = 1
	ITraceSignal    uint32 = 2
	ITraceInterrupt uint32 = 3 // no branch: the user block goes on
	ITraceFault     uint32 = 4 // a page fault; no branch either
)

// ITraceIRQDevice is added to a device interrupt's IRQ number in
// ITRACE_INTERRUPT's irq field; smaller values are APIC vectors.
const ITraceIRQDevice uint64 = 0x100

// ITRACE_START flags and ITRACE_END reasons.
const (
	ITraceStartExec uint64 = 1

	ITraceEndExit   uint64 = 1
	ITraceEndOff    uint64 = 2
	ITraceEndExec   uint64 = 3
	ITraceEndDetach uint64 = 4

	ITraceSignalHandler uint64 = 1 // ITRACE_SIGNAL flags: a handler runs
)

// itraceBlock are the fields of a branch record: the target, the number of
// instructions executed since the previous record of the thread (the block,
// starting at the previous target) and the offset of the block's last
// instruction (the branch) from the block's start.
var itraceBlock = fl(x64("to"), u32("count"), x32("from_off"))

// JITMethod is the minor code of MajorJITLoad that names a method id of a
// process for the method entry/exit records (JProf; docs/jprof.md).
const JITMethod uint32 = 3
