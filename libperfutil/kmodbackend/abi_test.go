package kmodbackend

import (
	"reflect"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/format/tracebuf"
	"perfinsp/libperfutil/control"
)

// headerStruct and headerField are a struct of kmod/uapi/pitrace.h as the
// C compiler lays it out (zabi_header_test.go, generated with zabi.go).
type headerStruct struct {
	Size   int64
	Fields []headerField
}

type headerField struct {
	Name       string
	Off, Width int64
}

// headerValues is the header by name: every macro's value, and for every
// struct "sizeof S", "offsetof S.f" and "fieldsize S.f".
func headerValues() map[string]uint64 {
	v := map[string]uint64{}
	for n, x := range headerMacros {
		v[n] = x
	}
	for s, st := range headerStructs {
		v["sizeof "+s] = uint64(st.Size)
		for _, f := range st.Fields {
			v["offsetof "+s+"."+f.Name] = uint64(f.Off)
			v["fieldsize "+s+"."+f.Name] = uint64(f.Width)
		}
	}
	return v
}

// cStructs pairs each Go mirror with its C struct and C field names, in order.
var cStructs = []struct {
	c      string
	goType any
	fields []string
}{
	{"pitrace_seg", seg{}, []string{"state", "used", "seq", "records"}},
	{"pitrace_buf_hdr", bufHdr{}, []string{"magic", "abi", "cpu", "kind", "mode", "seg_size", "nseg", "flags", "data_offset", "records", "lost", "bytes", "pending", "next_seq", "cur", "reserved", "seg"}},
	{"pitrace_init_arg", initArg{}, []string{"trace_size", "mte_size", "mode", "reserved"}},
	{"pitrace_mode_arg", modeArg{}, []string{"mode", "reserved", "path"}},
	{"pitrace_majors", majorsArg{}, []string{"mask", "stack_depth", "reserved"}},
	{"pitrace_rate_arg", rateArg{}, []string{"hz", "event_type", "event_config", "event"}},
	{"pitrace_status", statusArg{}, []string{"abi", "state", "mode", "flags", "trace_size", "mte_size", "trace_seg_size", "trace_nseg", "mte_seg_size", "mte_nseg", "ncpus", "rate_hz", "event_type", "drainer_pid", "event_config", "start_wall_ns", "start_clock_ns", "enabled", "on_count", "map_size_trace", "map_size_mte", "event", "path"}},
	{"pitrace_cpu_status", cpuStatusArg{}, []string{"cpu", "flags", "records", "lost", "bytes", "used", "mte_records", "mte_lost", "mte_bytes", "mte_used"}},
	{"pitrace_hook_arg", hookArg{}, []string{"major", "reserved", "minor", "nwords", "len", "words", "data"}},
	{"pitrace_sysinfo", sysinfoArg{}, []string{"abi", "ncpus", "online", "page_size", "clock_id", "segments", "hdr_size", "features", "min_buf", "max_buf", "mem_limit"}},
	{"pitrace_release_arg", releaseArg{}, []string{"cpu", "kind", "seg", "reserved", "seq"}},
	{"pitrace_bench_arg", benchArg{}, []string{"path", "count", "cycles"}},
	{"pitrace_ptt_metric", pttMetric{}, []string{"kind", "type", "config"}},
	{"pitrace_ptt_init", pttInitArg{}, []string{"nmetrics", "flags", "m"}},
	{"pitrace_ptt_area", pttArea{}, []string{"seq", "cpu", "dispatches", "interrupts", "nmetrics", "dead", "accum", "last", "intr_time", "live"}},
	{"pitrace_ptt_bucket", pttBucket{}, []string{"interrupts", "tsc", "val"}},
	{"pitrace_ptt_status", pttStatusArg{}, []string{"first_cpu", "ncpus", "nr_cpus", "hooks", "nareas", "nmetrics", "cpu"}},
	{"pitrace_ptt_watch", pttWatchArg{}, []string{"tid", "flags"}},
	{"pitrace_ptt_thread", pttThread{}, []string{"tid", "pid", "comm", "running", "mapped", "a"}},
	{"pitrace_ptt_read", pttReadArg{}, []string{"max", "n", "total", "pad", "buf"}},
	{"pitrace_msr", msrArg{}, []string{"cpu", "reg", "value", "flags", "reserved"}},
}

func TestABIStructsMatchHeader(t *testing.T) {
	v := headerValues()
	for _, s := range cStructs {
		typ := reflect.TypeOf(s.goType)
		size, ok := v["sizeof "+s.c]
		if !ok {
			t.Fatalf("struct %s not measured from the header", s.c)
		}
		if uint64(typ.Size()) != size {
			t.Errorf("struct %s: C size %d, Go %s size %d", s.c, size, typ.Name(), typ.Size())
		}
		if typ.NumField() != len(s.fields) {
			t.Errorf("struct %s: Go %s has %d fields, C %d", s.c, typ.Name(), typ.NumField(), len(s.fields))
			continue
		}
		for i, f := range s.fields {
			off, ok := v["offsetof "+s.c+"."+f]
			if !ok {
				t.Errorf("%s.%s missing from the C side", s.c, f)
				continue
			}
			if got := uint64(typ.Field(i).Offset); got != off {
				t.Errorf("%s.%s: C offset %d, Go %s.%s offset %d", s.c, f, off, typ.Name(), typ.Field(i).Name, got)
			}
		}
	}
	if v["sizeof pitrace_rec_hdr"] != trace.HeaderSize || v["PITRACE_REC_HDR_SIZE"] != trace.HeaderSize {
		t.Errorf("record header: C %d/%d bytes, Go trace.HeaderSize %d", v["sizeof pitrace_rec_hdr"], v["PITRACE_REC_HDR_SIZE"], trace.HeaderSize)
	}
}

// Every ioctl of the header is in IoctlNumbers (the fuzzer's list), with
// its number, and IoctlNumbers names nothing else.
func TestABIIoctlNumbersMatchHeader(t *testing.T) {
	v := headerValues()
	ioc := IoctlNumbers()
	n := 0
	for name, c := range v {
		if !strings.HasPrefix(name, "PITRACE_IOC_") || name == "PITRACE_IOC_MAGIC" {
			continue
		}
		n++
		if g, ok := ioc[name]; !ok {
			t.Errorf("%s is not in IoctlNumbers", name)
		} else if uint64(g) != c {
			t.Errorf("%s: header %#x, IoctlNumbers %#x", name, c, g)
		}
	}
	if len(ioc) != n {
		t.Errorf("IoctlNumbers lists %d ioctls, the header %d", len(ioc), n)
	}
}

func TestABIConstantsMatchHeaderAndCodes(t *testing.T) {
	v := headerValues()
	// the header's values that other packages repeat
	want := map[string]uint64{
		"PITRACE_CLOCK_ID":     nrm2.ClockMonotonic,
		"PITRACE_MAX_RECORD":   trace.MaxRecordSize,
		"PITRACE_LAYOUT_FIXED": trace.LayoutFixed, "PITRACE_LAYOUT_STRING": trace.LayoutString,
		"PITRACE_LAYOUT_BYTES": trace.LayoutBytes, "PITRACE_LAYOUT_WORDS": trace.LayoutWords,
		"PITRACE_MAJOR_SYS": uint64(trace.MajorSys), "PITRACE_MAJOR_MTE": uint64(trace.MajorMTE),
		"PITRACE_MAJOR_INTERRUPT": uint64(trace.MajorInterrupt), "PITRACE_MAJOR_DISPATCH": uint64(trace.MajorDispatch),
		"PITRACE_MAJOR_THREAD": uint64(trace.MajorThread), "PITRACE_MAJOR_TPROF": uint64(trace.MajorTprof),
		"PITRACE_MAJOR_JITLOAD": uint64(trace.MajorJITLoad), "PITRACE_MAJOR_ITRACE_U": uint64(trace.MajorITraceU),
		"PITRACE_MAJOR_ITRACE_K": uint64(trace.MajorITraceK), "PITRACE_MAJOR_PTT": uint64(trace.MajorPTT),
		"PITRACE_MAJOR_USER_FIRST": uint64(trace.MajorUserFirst), "PITRACE_EXIT_BIT": uint64(trace.ExitBit),
		"PITRACE_SYS_TIME_HIGH": uint64(trace.SysTimeHigh), "PITRACE_SYS_INFO": uint64(trace.SysInfo),
		"PITRACE_SYS_LOST": uint64(trace.SysLost), "PITRACE_SYS_TRACE_ON": uint64(trace.SysTraceOn),
		"PITRACE_SYS_TRACE_OFF": uint64(trace.SysTraceOff), "PITRACE_SYS_BUF_FULL": uint64(trace.SysBufFull),
		"PITRACE_MTE_PROCESS": uint64(trace.MTEProcess), "PITRACE_MTE_FORK": uint64(trace.MTEFork),
		"PITRACE_MTE_EXEC": uint64(trace.MTEExec), "PITRACE_MTE_EXIT": uint64(trace.MTEExit),
		"PITRACE_MTE_THREAD": uint64(trace.MTEThreadName), "PITRACE_MTE_SEGMENT": uint64(trace.MTESegment),
		"PITRACE_MTE_UNMAP": uint64(trace.MTEUnmap), "PITRACE_MTE_FILE": uint64(trace.MTEFile),
		"PITRACE_TPROF_TICK": uint64(trace.TprofTick), "PITRACE_TPROF_EVENT": uint64(trace.TprofEvent),
		"PITRACE_TPROF_KERNEL": trace.TprofKernel, "PITRACE_DISPATCH_SWITCH": uint64(trace.DispatchSwitch),
		"PITRACE_DISPATCH_WAKEUP": uint64(trace.DispatchWakeup), "PITRACE_WAKEUP_NEW": trace.WakeupNew,
		"PITRACE_UNWIND_SWITCH": uint64(trace.UnwindSwitch),
		"PITRACE_INTR_HARD":     uint64(trace.IntrHard), "PITRACE_INTR_SOFT": uint64(trace.IntrSoft),
		"PITRACE_FORK_THREAD": trace.ForkThread, "PITRACE_LOST_FULL": trace.LostBufferFull,
		"PITRACE_LOST_OVERWRITE": trace.LostOverwrite,
		"PITRACE_MODE_NORMAL":    control.ModeNormal, "PITRACE_MODE_WRAP": control.ModeWrap, "PITRACE_MODE_CONT": control.ModeCont,
		"PITRACE_MAX_BUF": control.MaxBufSize, "PITRACE_MAX_RATE": control.MaxRateHz,
		"PITRACE_MAJOR_UNWIND": uint64(trace.MajorUnwind), "PITRACE_UNWIND_TICK": uint64(trace.UnwindTick),
		"PITRACE_UNWIND_TRUNCATED": trace.UnwindTruncated, "PITRACE_UNWIND_KERN_SHIFT": trace.UnwindKernShift,
		"PITRACE_MAX_STACK":    trace.UnwindMaxDepth,
		"PITRACE_MAJOR_INTERP": uint64(trace.MajorInterp), "PITRACE_MAJOR_JITTED": uint64(trace.MajorJitted),
	}
	// Every record code of these families in the header is checked here: a
	// code added to the header must have its twin in format/trace.
	for name := range v {
		for _, family := range []string{"PITRACE_MAJOR_", "PITRACE_SYS_", "PITRACE_MTE_", "PITRACE_INTR_", "PITRACE_DISPATCH_"} {
			if _, ok := want[name]; strings.HasPrefix(name, family) && !ok {
				t.Errorf("%s = %#x: a record code of the header that no Go code is checked against (add it to format/trace/codes.go and to this test)", name, v[name])
			}
		}
	}
	for name, w := range want {
		c, ok := v[name]
		if !ok {
			t.Errorf("%s is not in the header", name)
			continue
		}
		if c != w {
			t.Errorf("%s: header %#x, Go %#x", name, c, w)
		}
	}
	// The segment rule must match the Go buffers' (format/tracebuf).
	if v["PITRACE_MIN_SEGMENT"] != tracebuf.MinSegment || v["PITRACE_SEGMENTS"] != tracebuf.Segments {
		t.Errorf("segments: header min %d count %d, tracebuf min %d count %d", v["PITRACE_MIN_SEGMENT"], v["PITRACE_SEGMENTS"], tracebuf.MinSegment, tracebuf.Segments)
	}
	// every record code the header names must exist in the Go code table
	for _, c := range []struct {
		major uint16
		minor string
	}{
		{trace.MajorSys, "PITRACE_SYS_TIME_HIGH"}, {trace.MajorSys, "PITRACE_SYS_INFO"}, {trace.MajorSys, "PITRACE_SYS_LOST"},
		{trace.MajorMTE, "PITRACE_MTE_SEGMENT"}, {trace.MajorTprof, "PITRACE_TPROF_TICK"}, {trace.MajorDispatch, "PITRACE_DISPATCH_SWITCH"},
	} {
		if trace.Lookup(c.major, uint32(v[c.minor])) == nil {
			t.Errorf("%s (major %#x) is not in trace's code table", c.minor, c.major)
		}
	}
}

// recordPayloads names the header's payload struct of every record code
// the module writes (C field names are the spec's field names). Codes of
// the table the module does not write are listed in notWritten.
var recordPayloads = []struct {
	major  uint16
	minor  uint32
	cType  string // "" for a record without fixed fields
	layout int
}{
	{trace.MajorSys, trace.SysTimeHigh, "pitrace_rec_time_high", trace.LayoutFixed},
	{trace.MajorSys, trace.SysInfo, "pitrace_rec_sysinfo", trace.LayoutString},
	{trace.MajorSys, trace.SysLost, "pitrace_rec_lost", trace.LayoutFixed},
	{trace.MajorSys, trace.SysTraceOn, "pitrace_rec_trace_on", trace.LayoutFixed},
	{trace.MajorSys, trace.SysTraceOff, "", trace.LayoutFixed},
	{trace.MajorSys, trace.SysBufFull, "pitrace_rec_buf_full", trace.LayoutFixed},
	{trace.MajorMTE, trace.MTEProcess, "pitrace_rec_process", trace.LayoutString},
	{trace.MajorMTE, trace.MTEFork, "pitrace_rec_fork", trace.LayoutFixed},
	{trace.MajorMTE, trace.MTEExec, "pitrace_rec_task", trace.LayoutString},
	{trace.MajorMTE, trace.MTEExit, "pitrace_rec_task", trace.LayoutFixed},
	{trace.MajorMTE, trace.MTEThreadName, "pitrace_rec_task", trace.LayoutString},
	{trace.MajorMTE, trace.MTESegment, "pitrace_rec_segment", trace.LayoutString},
	{trace.MajorMTE, trace.MTEUnmap, "pitrace_rec_unmap", trace.LayoutFixed},
	{trace.MajorMTE, trace.MTEFile, "pitrace_rec_file", trace.LayoutFixed},
	{trace.MajorTprof, trace.TprofTick, "pitrace_rec_tprof_tick", trace.LayoutFixed},
	{trace.MajorTprof, trace.TprofEvent, "pitrace_rec_tprof_event", trace.LayoutFixed},
	{trace.MajorDispatch, trace.DispatchSwitch, "pitrace_rec_dispatch", trace.LayoutFixed},
	{trace.MajorDispatch, trace.DispatchWakeup, "pitrace_rec_wakeup", trace.LayoutFixed},
	{trace.MajorInterrupt, trace.IntrHard, "pitrace_rec_irq", trace.LayoutFixed},
	{trace.MajorInterrupt, trace.IntrHard | trace.ExitBit, "pitrace_rec_irq", trace.LayoutFixed},
	{trace.MajorInterrupt, trace.IntrSoft, "pitrace_rec_softirq", trace.LayoutFixed},
	{trace.MajorInterrupt, trace.IntrSoft | trace.ExitBit, "pitrace_rec_softirq", trace.LayoutFixed},
	{trace.MajorUnwind, trace.UnwindTick, "pitrace_rec_unwind", trace.LayoutBytes},
	{trace.MajorUnwind, trace.UnwindSwitch, "pitrace_rec_unwind", trace.LayoutBytes},
}

// The majors the module's own code writes; every code of them in the spec
// table must have its payload struct checked, except notWritten: the
// daemon's interrupt sources, and TPROF_EVENT_NAME, which user space
// writes into the file for both backends. (Other majors — JIT, ITRACE,
// unwind, user hooks — come from user space.)
var moduleMajors = map[uint16]bool{
	trace.MajorSys: true, trace.MajorMTE: true, trace.MajorTprof: true,
	trace.MajorDispatch: true, trace.MajorInterrupt: true, trace.MajorUnwind: true,
}

var notWritten = map[string]bool{
	"TIMER_ENTRY": true, "TIMER_EXIT": true, "IPI_ENTRY": true, "IPI_EXIT": true,
	"INTR_ENTRY": true, "INTR_EXIT": true, "TPROF_EVENT_NAME": true,
}

// The module's record payloads (kmod/uapi/pitrace.h, the structs the
// module writes through) against the one spec table: same fields in the
// same order, widths and packed offsets, and the same layout.
func TestRecordPayloadsMatchSpecTable(t *testing.T) {
	v := headerValues()
	seen := map[[2]uint64]bool{}
	for _, r := range recordPayloads {
		seen[[2]uint64{uint64(r.major), uint64(r.minor)}] = true
		sp := trace.Lookup(r.major, r.minor)
		if sp == nil {
			t.Errorf("major %#x minor %#x: not in trace's spec table", r.major, r.minor)
			continue
		}
		if sp.Layout != r.layout {
			t.Errorf("%s: spec layout %d, the module writes layout %d", sp.Name, sp.Layout, r.layout)
		}
		if r.cType == "" {
			if len(sp.Fields) != 0 {
				t.Errorf("%s: spec has %d fields, the module writes none", sp.Name, len(sp.Fields))
			}
			continue
		}
		size, ok := v["sizeof "+r.cType]
		if !ok {
			t.Errorf("%s: struct %s not measured from the header", sp.Name, r.cType)
			continue
		}
		off := uint64(0)
		for _, f := range sp.Fields {
			key := r.cType + "." + f.Name
			cOff, ok := v["offsetof "+key]
			if !ok {
				t.Errorf("%s: spec field %s is not a field of struct %s", sp.Name, f.Name, r.cType)
				continue
			}
			if cOff != off || v["fieldsize "+key] != uint64(f.Width) {
				t.Errorf("%s.%s: C offset %d width %d, spec offset %d width %d", sp.Name, f.Name, cOff, v["fieldsize "+key], off, f.Width)
			}
			off += uint64(f.Width)
		}
		if size != off {
			t.Errorf("%s: struct %s is %d bytes, the spec's fields %d", sp.Name, r.cType, size, off)
		}
	}
	for _, sp := range trace.Specs() {
		if !moduleMajors[sp.Major] || notWritten[sp.Name] {
			continue
		}
		if !seen[[2]uint64{uint64(sp.Major), uint64(sp.Minor)}] {
			t.Errorf("%s (major %#x minor %#x): in the spec table but no payload struct of the module is checked against it", sp.Name, sp.Major, sp.Minor)
		}
	}
}

// The size scheme: the ABI 1 sizes are the sizes of the Go mirrors (this
// package speaks ABI 1), and SYSINFO's ABI feature bits are distinct.
func TestSizeSchemeMatchesMirrors(t *testing.T) {
	v := headerValues()
	for c, g := range map[string]any{
		"PITRACE_INIT_ARG_SIZE_V1": initArg{},
		"PITRACE_MODE_ARG_SIZE_V1": modeArg{}, "PITRACE_RATE_ARG_SIZE_V1": rateArg{},
		"PITRACE_STATUS_SIZE_V1": statusArg{}, "PITRACE_CPU_STATUS_SIZE_V1": cpuStatusArg{},
		"PITRACE_HOOK_ARG_SIZE_V1": hookArg{}, "PITRACE_SYSINFO_SIZE_V1": sysinfoArg{},
		"PITRACE_RELEASE_ARG_SIZE_V1": releaseArg{}, "PITRACE_BENCH_ARG_SIZE_V1": benchArg{},
		"PITRACE_PTT_INIT_SIZE_V1": pttInitArg{}, "PITRACE_PTT_STATUS_SIZE_V1": pttStatusArg{},
		"PITRACE_PTT_WATCH_SIZE_V1": pttWatchArg{}, "PITRACE_PTT_READ_SIZE_V1": pttReadArg{},
	} {
		if got, ok := v[c]; !ok || got != uint64(reflect.TypeOf(g).Size()) {
			t.Errorf("%s: header %d (present %v), Go %T %d bytes", c, got, ok, g, reflect.TypeOf(g).Size())
		}
	}
	// Grown structs: ABI 1 ends where the first new field starts.
	if f, ok := reflect.TypeOf(majorsArg{}).FieldByName("StackDepth"); !ok || uint64(f.Offset) != v["PITRACE_MAJORS_SIZE_V1"] ||
		v["offsetof pitrace_majors.stack_depth"] != v["PITRACE_MAJORS_SIZE_V1"] {
		t.Errorf("PITRACE_MAJORS_SIZE_V1 %d, stack_depth at %d, Go StackDepth at %d", v["PITRACE_MAJORS_SIZE_V1"], v["offsetof pitrace_majors.stack_depth"], f.Offset)
	}
	abi := uint64(0)
	for _, b := range []string{"PITRACE_FEAT_SIZED_IOCTL", "PITRACE_FEAT_PTT_INHERIT", "PITRACE_FEAT_CPU_HOTPLUG", "PITRACE_FEAT_EXEC_PATH", "PITRACE_FEAT_BUF_FULL_REC", "PITRACE_FEAT_PTT_SYSCALLS", "PITRACE_FEAT_PTT_FAULTS", "PITRACE_FEAT_PTT_RESUME", "PITRACE_FEAT_CALLSTACK",
		"PITRACE_FEAT_ITRACE", "PITRACE_FEAT_JIT", "PITRACE_FEAT_METHOD", "PITRACE_FEAT_ITRACE_KERNEL", "PITRACE_FEAT_ITRACE_BLOCK", "PITRACE_FEAT_SCHED"} {
		f := v[b]
		if f == 0 || f&(f-1) != 0 || f < 1<<16 || abi&f != 0 {
			t.Errorf("%s = %#x: want a single bit from 16 up, distinct from the others", b, f)
		}
		abi |= f
	}
	if v["PITRACE_FEAT_ABI"] != abi {
		t.Errorf("PITRACE_FEAT_ABI %#x, the bits %#x", v["PITRACE_FEAT_ABI"], abi)
	}
}
