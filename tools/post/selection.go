package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"perfinsp/analysis/tprof"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/cliutil"
)

// selection is what --pid, --tid and --comm asked for, kept before the
// report's build (which adds the children of the pids to its filter).
type selection struct {
	pids, tids []uint32
	comms      []string
}

func newSelection(f *tprof.Filter) *selection {
	if f == nil {
		return nil
	}
	s := &selection{}
	for p := range f.Pids {
		s.pids = append(s.pids, p)
	}
	for t := range f.Tids {
		s.tids = append(s.tids, t)
	}
	for c := range f.Comms {
		s.comms = append(s.comms, c)
	}
	sort.Slice(s.pids, func(i, j int) bool { return s.pids[i] < s.pids[j] })
	sort.Slice(s.tids, func(i, j int) bool { return s.tids[i] < s.tids[j] })
	sort.Strings(s.comms)
	return s
}

// traceTasks are the processes, threads and names a trace's MTE records
// know of.
type traceTasks struct {
	pids, tids map[uint32]bool
	names      map[string]bool
}

func readTasks(f *nrm2.File) (*traceTasks, error) {
	t := &traceTasks{pids: map[uint32]bool{}, tids: map[uint32]bool{}, names: map[string]bool{}}
	err := f.RecordsOf(nrm2.ChunkMTE, func(r *trace.Record) error {
		if r.Major != trace.MajorMTE {
			return nil
		}
		switch r.Minor {
		case trace.MTEProcess:
			t.pids[uint32(r.Field(0))] = true
			t.names[r.Str] = true
		case trace.MTEFork:
			t.pids[uint32(r.Field(2))] = true
			t.tids[uint32(r.Field(3))] = true
		case trace.MTEThreadName:
			t.pids[uint32(r.Field(0))] = true
			t.tids[uint32(r.Field(1))] = true
			t.names[r.Str] = true
		case trace.MTEExec:
			t.pids[uint32(r.Field(0))] = true
			t.names[filepath.Base(r.Str)] = true
		}
		return nil
	})
	for p := range t.pids {
		t.tids[p] = true // a process's main thread
	}
	return t, err
}

// check fails when nothing asked for is in the trace at all (a typo, a pid
// of another run): a report of no ticks would look like an idle process.
// A process that is in the trace but used no CPU is not an error.
func (s *selection) check(f *nrm2.File) error {
	if s == nil {
		return nil
	}
	t, err := readTasks(f)
	if err != nil {
		return nil // a damaged trace: the report says so; no guess here
	}
	ids := func(flag, what string, want []uint32, have map[uint32]bool) error {
		if len(want) == 0 {
			return nil
		}
		var list []string
		for _, id := range want {
			if have[id] {
				return nil
			}
			list = append(list, strconv.FormatUint(uint64(id), 10))
		}
		return fmt.Errorf("--%s %s: no such %s in the trace (it holds %d processes; post -show lists them)", flag, strings.Join(list, ","), what, len(t.pids))
	}
	if err := ids("pid", "process", s.pids, t.pids); err != nil {
		return err
	}
	if err := ids("tid", "thread", s.tids, t.tids); err != nil {
		return err
	}
	if len(s.comms) > 0 {
		for _, c := range s.comms {
			if t.names[c] {
				return nil
			}
		}
		names := make([]string, 0, len(t.names))
		for n := range t.names {
			names = append(names, n)
		}
		msg := fmt.Sprintf("--comm %s: no process of that name in the trace", strings.Join(s.comms, ","))
		if close := cliutil.Closest(s.comms[0], names, 3); len(close) > 0 {
			msg += "; the closest: " + strings.Join(close, ", ")
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}
