package main

import (
	"fmt"
	"strconv"
	"strings"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// execThread is what a trace holds of one thread's ITrace.
type execThread struct {
	records   int      // ITrace records attributed to it (THREAD included)
	starts    []uint64 // ITRACE_START flags
	ends      []uint64 // ITRACE_END reasons
	endCounts []uint64 // ITRACE_END count fields
	afterEnd  int      // records after its first ITRACE_END
	endTime   uint64
	ended     bool
}

// itraceThreads attributes a trace's ITrace records to threads: each CPU's
// records belong to the thread its last THREAD, START or END record named.
func itraceThreads(path string) (map[uint32]*execThread, error) {
	f, err := nrm2.Open(path)
	if err != nil {
		return nil, err
	}
	ths := map[uint32]*execThread{}
	cur := map[int]uint32{}
	get := func(tid uint32) *execThread {
		t := ths[tid]
		if t == nil {
			t = &execThread{}
			ths[tid] = t
		}
		return t
	}
	err = f.Records(func(r *trace.Record) error {
		if r.Major != trace.MajorITraceU && r.Major != trace.MajorITraceK {
			return nil
		}
		if r.Major == trace.MajorITraceU {
			switch r.Minor {
			case trace.ITraceThread, trace.ITraceStart, trace.ITraceEnd:
				cur[r.CPU] = uint32(r.Field(1))
			}
		}
		tid, ok := cur[r.CPU]
		if !ok {
			return nil
		}
		t := get(tid)
		t.records++
		if t.ended {
			t.afterEnd++
		}
		if r.Major == trace.MajorITraceU {
			switch r.Minor {
			case trace.ITraceStart:
				t.starts = append(t.starts, r.Field(3))
			case trace.ITraceEnd:
				t.ends = append(t.ends, r.Field(4))
				t.endCounts = append(t.endCounts, r.Field(2))
				if !t.ended {
					t.ended, t.endTime = true, r.Time
				}
			}
		}
		return nil
	})
	return ths, err
}

// itraceExec checks the trace harden itracesuid left (args: FILE N
// setuid=PID atexec=PID plain=PID): the setuid child's ITrace started,
// ended once with reason exec and wrote nothing after, fewer records than
// the image's loop of N branches; the at-exec one never started and has
// only its ITRACE_END, reason exec, count 0; the plain one went on across
// its exec (at least N records) and ended by ITRACE_OFF.
func itraceExec(args []string) error {
	if len(args) != 5 {
		return fmt.Errorf("usage: pitest itrace-exec FILE N setuid=PID atexec=PID plain=PID")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	pids := map[string]uint32{}
	for _, a := range args[2:] {
		k, v, ok := strings.Cut(a, "=")
		p, err := strconv.Atoi(v)
		if !ok || err != nil {
			return fmt.Errorf("bad argument %q", a)
		}
		pids[k] = uint32(p)
	}
	ths, err := itraceThreads(args[0])
	if err != nil {
		return err
	}
	var bad []string
	for _, k := range []string{"setuid", "atexec", "plain"} {
		t := ths[pids[k]]
		if t == nil {
			bad = append(bad, fmt.Sprintf("%s (tid %d): no ITrace record in the trace", k, pids[k]))
			continue
		}
		fmt.Printf("itrace-exec: %s tid %d: %d records, START flags %v, END reasons %v counts %v, %d records after the first END\n",
			k, pids[k], t.records, t.starts, t.ends, t.endCounts, t.afterEnd)
		switch k {
		case "setuid":
			if len(t.starts) != 1 || len(t.ends) != 1 || t.ends[0] != trace.ITraceEndExec || t.afterEnd != 0 || t.records >= n {
				bad = append(bad, fmt.Sprintf("setuid: want one START, one END with reason %d (exec), nothing after it and fewer than %d records", trace.ITraceEndExec, n))
			}
		case "atexec":
			if len(t.starts) != 0 || len(t.ends) != 1 || t.ends[0] != trace.ITraceEndExec || t.endCounts[0] != 0 || t.afterEnd != 0 {
				bad = append(bad, fmt.Sprintf("atexec: want no START and only an END with reason %d (exec), count 0", trace.ITraceEndExec))
			}
		case "plain":
			if len(t.starts) != 1 || len(t.ends) != 1 || t.ends[0] != trace.ITraceEndOff || t.records < n {
				bad = append(bad, fmt.Sprintf("plain: want one START, one END with reason %d (off) and at least %d records (the exec'd image's loop)", trace.ITraceEndOff, n))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}
