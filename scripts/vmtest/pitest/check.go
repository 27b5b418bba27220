package main

import (
	"debug/elf"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

type sym struct {
	name       string
	start, end uint64
}

func elfSyms(exe string, names ...string) ([]sym, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", exe, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		return nil, fmt.Errorf("%s is not a non-PIE static executable (type %v)", exe, f.Type)
	}
	ss, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("symbols of %s: %w", exe, err)
	}
	var out []sym
	for _, n := range names {
		for _, s := range ss {
			if s.Name == n && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
				out = append(out, sym{n, s.Value, s.Value + s.Size})
			}
		}
	}
	if len(out) != len(names) {
		return nil, fmt.Errorf("%s: found %d of the symbols %v", exe, len(out), names)
	}
	return out, nil
}

// summary is what a file holds.
type summary struct {
	f          *nrm2.File
	byCode     map[[2]uint64]int
	traceRecs  []uint64 // per CPU: non-TIME_HIGH, non-LOST records in trace chunks
	mteRecs    []uint64
	lostInFile uint64 // sum of LOST record counts
	recs       []trace.Record
}

func load(path string) (*summary, error) {
	f, err := nrm2.Open(path)
	if err != nil {
		return nil, err
	}
	s := &summary{f: f, byCode: map[[2]uint64]int{}, traceRecs: make([]uint64, f.Header.NCPUs), mteRecs: make([]uint64, f.Header.NCPUs)}
	err = f.Records(func(r *trace.Record) error {
		s.byCode[[2]uint64{uint64(r.Major), uint64(r.Minor)}]++
		if r.Major == trace.MajorSys && r.Minor == trace.SysTimeHigh {
			return nil
		}
		if r.Major == trace.MajorSys && r.Minor == trace.SysLost {
			s.lostInFile += r.Field(0)
			return nil
		}
		if r.MTE {
			s.mteRecs[r.CPU]++
		} else {
			s.traceRecs[r.CPU]++
		}
		c := *r
		c.Fixed = append([]uint64(nil), r.Fixed...)
		s.recs = append(s.recs, c)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("records of %s: %w", path, err)
	}
	return s, nil
}

func (s *summary) count(major uint16, minor uint32) int {
	return s.byCode[[2]uint64{uint64(major), uint64(minor)}]
}

func checkTprof(path, exe string) error {
	s, err := load(path)
	if err != nil {
		return err
	}
	h := s.f.Header
	if h.Backend != nrm2.BackendKmod {
		return fmt.Errorf("file backend %d, want %d (kmod)", h.Backend, nrm2.BackendKmod)
	}
	if !s.f.Complete {
		return fmt.Errorf("file is not complete")
	}
	if len(s.f.Kallsyms) == 0 {
		return fmt.Errorf("no kallsyms chunk")
	}
	syms, err := elfSyms(exe, "heavy", "medium", "light")
	if err != nil {
		return err
	}
	base := exe[strings.LastIndex(exe, "/")+1:]
	// the example's pid: an EXEC of exe
	pid := uint64(0)
	for _, r := range s.recs {
		if r.Major == trace.MajorMTE && r.Minor == trace.MTEExec && strings.HasSuffix(r.Str, base) {
			pid = r.Field(0)
		}
	}
	if pid == 0 {
		return fmt.Errorf("no MTE_EXEC record of %s", base)
	}
	hits := map[string]int{}
	total, mine, kernel := 0, 0, 0
	for _, r := range s.recs {
		if r.Major != trace.MajorTprof || r.Minor != trace.TprofTick {
			continue
		}
		total++
		if r.Field(0) != pid {
			continue
		}
		mine++
		if r.Field(3)&trace.TprofKernel != 0 {
			kernel++
			continue
		}
		ip := r.Field(2)
		for _, sy := range syms {
			if ip >= sy.start && ip < sy.end {
				hits[sy.name]++
			}
		}
	}
	fmt.Printf("check-tprof: %d tprof samples, %d in %s (pid %d, %d in the kernel): heavy %d medium %d light %d\n",
		total, mine, base, pid, kernel, hits["heavy"], hits["medium"], hits["light"])
	names := []string{"heavy", "medium", "light"}
	sort.SliceStable(names, func(i, j int) bool { return hits[names[i]] > hits[names[j]] })
	fmt.Printf("check-tprof: hottest first: %s\n", strings.Join(names, " "))
	if mine < 50 {
		return fmt.Errorf("only %d samples in %s: too few to judge", mine, base)
	}
	if names[0] != "heavy" || hits["heavy"] <= hits["medium"] || hits["medium"] <= hits["light"] {
		return fmt.Errorf("order of hot functions is %v (%v), want heavy > medium > light", names, hits)
	}
	three := hits["heavy"] + hits["medium"] + hits["light"]
	if share := float64(hits["heavy"]) / float64(three); share < 0.45 || share > 0.75 {
		return fmt.Errorf("heavy has %.0f%% of the three functions' samples, want about 60%%", 100*share)
	}

	// MTE: the forked child that exited during tracing.
	child, threads := uint64(0), 0
	for _, r := range s.recs {
		if r.Major == trace.MajorMTE && r.Minor == trace.MTEFork && r.Field(0) == pid {
			if r.Field(4)&trace.ForkThread != 0 {
				threads++
			} else {
				child = r.Field(2)
			}
		}
	}
	if child == 0 {
		return fmt.Errorf("no MTE_FORK of a child process of pid %d", pid)
	}
	var exited, segs, named bool
	progSegs := map[uint64]string{} // the child's segments of the program, by start
	files := 0
	for _, r := range s.recs {
		if r.Major != trace.MajorMTE {
			continue
		}
		switch r.Minor {
		case trace.MTEFile:
			path, ok := progSegs[r.Field(1)]
			if r.Field(0) != child || !ok {
				continue
			}
			var st unix.Stat_t
			if err := unix.Stat(path, &st); err != nil {
				return fmt.Errorf("MTE_FILE of %s: %v", path, err)
			}
			if r.Field(2) != uint64(unix.Major(st.Dev)) || r.Field(3) != uint64(unix.Minor(st.Dev)) || r.Field(4) != st.Ino {
				return fmt.Errorf("MTE_FILE of %s: device %d:%d inode %d, stat says %d:%d inode %d",
					path, r.Field(2), r.Field(3), r.Field(4), unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
			}
			files++
		case trace.MTEExit:
			exited = exited || (r.Field(0) == child && r.Field(1) == child)
		case trace.MTESegment:
			if r.Field(0) == child && strings.HasSuffix(r.Str, base) && r.Field(2) > 0 {
				segs = true
				progSegs[r.Field(1)] = r.Str
				if r.Field(1) > syms[0].start || r.Field(1)+r.Field(2) < syms[0].end {
					return fmt.Errorf("child segment %#x+%#x does not cover heavy at %#x", r.Field(1), r.Field(2), syms[0].start)
				}
			}
		case trace.MTEThreadName:
			named = named || (r.Field(0) == pid && r.Str == "cpuburn-worker")
		}
	}
	fmt.Printf("check-tprof: child %d: exit %v, executable segment %v (%d MTE_FILE of it, device and inode as stat says); %d thread(s) created, worker named %v\n", child, exited, segs, files, threads, named)
	if !exited || !segs {
		return fmt.Errorf("the child %d that exited during tracing is not described (exit %v, segment %v)", child, exited, segs)
	}
	if files != len(progSegs) {
		return fmt.Errorf("the child %d: %d executable segments of %s, %d MTE_FILE records of them", child, len(progSegs), base, files)
	}
	if threads == 0 || !named {
		return fmt.Errorf("thread creation (%d) or naming (%v) not recorded", threads, named)
	}
	// statistics agree with the file
	for cpu, st := range s.f.Stats {
		if st.Records != s.traceRecs[cpu] || st.MTERecords != s.mteRecs[cpu] {
			return fmt.Errorf("CPU %d: statistics say %d trace / %d MTE records, the file holds %d / %d", cpu, st.Records, st.MTERecords, s.traceRecs[cpu], s.mteRecs[cpu])
		}
	}
	fmt.Println("check-tprof: ok")
	return nil
}
