//go:build cgo

package kmodbackend

import (
	"reflect"
	"testing"

	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/kmodbackend/internal/abic"
	"perfinsp/libperfutil/nrm2"
	"perfinsp/libperfutil/trace"
	"perfinsp/libperfutil/tracebuf"
)

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
	{"pitrace_majors", majorsArg{}, []string{"mask"}},
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
	v := abic.Values()
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

func TestABIIoctlNumbersMatchHeader(t *testing.T) {
	v := abic.Values()
	for name, n := range IoctlNumbers() {
		c, ok := v[name]
		if !ok {
			t.Errorf("%s not in the header", name)
			continue
		}
		if uint64(n) != c {
			t.Errorf("%s: C %#x, Go %#x", name, c, n)
		}
	}
	if len(IoctlNumbers()) != 23 {
		t.Errorf("Go lists %d ioctls, the header 23", len(IoctlNumbers()))
	}
}

func TestABIConstantsMatchHeaderAndCodes(t *testing.T) {
	v := abic.Values()
	want := map[string]uint64{
		"PITRACE_ABI_VERSION": ABIVersion, "PITRACE_CLOCK_ID": nrm2.ClockMonotonic,
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
		"PITRACE_MTE_UNMAP":  uint64(trace.MTEUnmap),
		"PITRACE_TPROF_TICK": uint64(trace.TprofTick), "PITRACE_TPROF_EVENT": uint64(trace.TprofEvent),
		"PITRACE_TPROF_KERNEL": trace.TprofKernel, "PITRACE_DISPATCH_SWITCH": uint64(trace.DispatchSwitch),
		"PITRACE_INTR_HARD": uint64(trace.IntrHard), "PITRACE_INTR_SOFT": uint64(trace.IntrSoft),
		"PITRACE_FORK_THREAD": trace.ForkThread, "PITRACE_LOST_FULL": trace.LostBufferFull,
		"PITRACE_LOST_OVERWRITE": trace.LostOverwrite,
		"PITRACE_MODE_NORMAL":    control.ModeNormal, "PITRACE_MODE_WRAP": control.ModeWrap, "PITRACE_MODE_CONT": control.ModeCont,
		"PITRACE_STATE_FREE": stateFree, "PITRACE_STATE_INIT": stateInit, "PITRACE_STATE_ON": stateOn, "PITRACE_STATE_OFF": stateOff,
		"PITRACE_KIND_TRACE": kindTrace, "PITRACE_KIND_MTE": kindMTE, "PITRACE_MMAP_SHIFT": mmapShift,
		"PITRACE_SEGMENTS": segments, "PITRACE_MIN_BUF": 4096, "PITRACE_MAX_BUF": control.MaxBufSize,
		"PITRACE_SEG_FREE": segFree, "PITRACE_SEG_FILLING": segFilling, "PITRACE_SEG_DONE": segDone,
		"PITRACE_BUF_MAGIC": bufMagic, "PITRACE_NO_SEG": noSeg, "PITRACE_PATH_MAX": pathMax,
		"PITRACE_MAX_RATE": control.MaxRateHz, "PITRACE_EVENT_NAME": eventName,
		"PITRACE_ST_STOPPED_FULL": stStoppedFull, "PITRACE_ST_UNSAVED": stUnsaved, "PITRACE_ST_EVENT": stEvent,
		"PITRACE_CPU_TRACE_FULL": cpuTraceFull, "PITRACE_CPU_MTE_FULL": cpuMTEFull,
		"PITRACE_HOOK_MAX_WORDS": hookMaxWords, "PITRACE_HOOK_MAX_BYTES": hookMaxBytes,
		"PITRACE_FEAT_KPROBE_EXIT": featKprobeExit, "PITRACE_FEAT_KPROBE_EXEC": featKprobeExec, "PITRACE_FEAT_UNMAP": featUnmap, "PITRACE_FEAT_MMAP": featMmap,
		"PITRACE_BENCH_TPROF": benchTprof, "PITRACE_BENCH_MAX": benchMax, "PITRACE_IOC_MAGIC": iocMagic,
		"PITRACE_PTT_MAX_METRICS": pttMaxMetrics, "PITRACE_PTT_MAX_SLOTS": pttMaxSlots, "PITRACE_PTT_STATUS_CPUS": pttStatusCPUs,
		"PITRACE_PTT_TSC": pttKindTSC, "PITRACE_PTT_PERF": pttKindPerf, "PITRACE_PTT_MMAP_OFFSET": pttMmapOffset,
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
	// The segment rule must match the Go buffers' (libperfutil/tracebuf).
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
