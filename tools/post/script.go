package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/tprof"
	"perfinsp/format/trace"
)

// scriptWriter writes each tprof sample as perf script does, with its
// call stack when the trace has one: a header line (thread name,
// pid/tid, CPU, time, period, event) and a frame a line, the interrupted
// function first, "address symbol+offset (module)", then an empty line.
// stackcollapse-perf.pl and the other tools that read perf script read
// it. A sample's stack is the UNWIND record that follows its tick on the
// same CPU (a TIME_HIGH record may come between); a tick without one is
// printed with its own address alone. A
// frame-pointer stack gets back the caller it lost in a frameless leaf,
// as tprof's stacks do (tprof.LeafFrames).
type scriptWriter struct {
	f       *os.File
	w       *bufio.Writer
	r       *a2n.Resolver
	event   string
	period  uint64
	pending map[int]*scriptTick // per CPU: the tick whose stack may follow
	names   map[scriptPC]a2n.Result
	leaf    *tprof.LeafFrames
	lost    int // the index in the stack being written of a caller put back (-1: none)
}

type scriptTick struct {
	pid, tid uint32
	cpu      int
	time     uint64
	ip       uint64
	kernel   bool
}

type scriptPC struct {
	pid    uint32
	pc     uint64
	kernel bool
}

func newScriptWriter(path string, r *a2n.Resolver, rateHz uint64) (*scriptWriter, error) {
	f, w, err := create(path)
	if err != nil {
		return nil, err
	}
	period := uint64(0)
	if rateHz > 0 {
		period = 1_000_000_000 / rateHz
	}
	return &scriptWriter{f: f, w: w, r: r, event: "cpu-clock", period: period, pending: map[int]*scriptTick{}, names: map[scriptPC]a2n.Result{}, leaf: tprof.NewLeafFrames(r), lost: -1}, nil
}

// record takes each record post reads, in time order (res: a tick's
// name, nil for a tick the selection leaves out).
func (s *scriptWriter) record(rec *trace.Record, res *a2n.Result) {
	if rec.Major == trace.MajorSys && rec.Minor == trace.SysTimeHigh {
		// the buffer's time bookkeeping, written before whichever
		// record crossed a 2^32 ns boundary: also between a tick and
		// its stack
		return
	}
	if rec.Major != trace.MajorUnwind {
		s.flush(rec.CPU) // its stack would have come next
	}
	switch {
	case rec.Major == trace.MajorMTE || rec.Major == trace.MajorJITLoad:
		if len(s.names) > 0 {
			s.names = map[scriptPC]a2n.Result{} // the mappings may have changed
		}
	case rec.Major == trace.MajorSys && rec.Minor == trace.SysEvent:
		s.event, s.period = rec.Str, rec.Field(2)
	case rec.Major == trace.MajorTprof:
		if res == nil {
			return // left out by --pid, --tid or --comm
		}
		s.pending[rec.CPU] = &scriptTick{pid: uint32(rec.Field(0)), tid: uint32(rec.Field(1)), cpu: rec.CPU, time: rec.Time,
			ip: rec.Field(2), kernel: rec.Field(3)&trace.TprofKernel != 0}
	case rec.Major == trace.MajorUnwind:
		t := s.pending[rec.CPU]
		delete(s.pending, rec.CPU)
		if t == nil || t.pid != uint32(rec.Field(0)) || t.tid != uint32(rec.Field(1)) {
			if t != nil {
				s.write(t, nil, 0)
			}
			return
		}
		n := len(rec.Str) / 8
		pcs := make([]uint64, n)
		for i := range pcs {
			pcs[i] = le64(rec.Str[8*i:])
		}
		nk := int(rec.Field(2) >> trace.UnwindKernShift)
		if lost, ok := s.leaf.Missing(t.pid, pcs, nk, rec.Field(2)); ok {
			// the caller the walk lost, between the leaf and its return address
			pcs = append(pcs[:nk+1], append([]uint64{lost}, pcs[nk+1:]...)...)
			s.lost = nk + 1
		} else {
			s.lost = -1
		}
		s.write(t, pcs, nk)
	}
}

// flush writes the tick pending on cpu (no stack followed it).
func (s *scriptWriter) flush(cpu int) {
	if t := s.pending[cpu]; t != nil {
		delete(s.pending, cpu)
		s.write(t, nil, 0)
	}
}

// write writes one sample: its stack pcs (interrupted first, the first
// nk in the kernel), or with none its own address.
func (s *scriptWriter) write(t *scriptTick, pcs []uint64, nk int) {
	comm := s.r.ThreadName(t.pid, t.tid)
	if comm == "" {
		comm = s.r.ProcessName(t.pid)
	}
	fmt.Fprintf(s.w, "%s %d/%d [%03d] %d.%06d: %d %s:\n", strings.ReplaceAll(comm, "\n", " "), t.pid, t.tid, t.cpu, t.time/1e9, t.time%1e9/1e3, s.period, s.event)
	if len(pcs) == 0 {
		s.frame(t.pid, t.ip, t.ip, t.kernel)
	}
	defer func() { s.lost = -1 }()
	for i, pc := range pcs {
		at := pc
		if i > 0 && i != nk && i != s.lost {
			at-- // a return address: name the call, not what follows it
		}
		s.frame(t.pid, pc, at, i < nk)
	}
	s.w.WriteByte('\n')
}

// frame writes one frame line: pc, named as at (pc, or the call before a
// return address).
func (s *scriptWriter) frame(pid uint32, pc, at uint64, kernel bool) {
	k := scriptPC{pid, at, kernel}
	res, ok := s.names[k]
	if !ok {
		res = s.r.Resolve(pid, at, kernel)
		s.names[k] = res
	}
	mod := res.Module
	if mod == "[kernel]" {
		mod = "[kernel.kallsyms]" // perf's name, which stack collapsers know
	}
	off := res.Offset + (pc - at)
	fmt.Fprintf(s.w, "\t%16x %s+0x%x (%s)\n", pc, strings.ReplaceAll(res.Symbol, "\n", " "), off, mod)
}

// close writes the ticks still pending and closes the file.
func (s *scriptWriter) close() error {
	defer s.leaf.Close()
	cpus := make([]int, 0, len(s.pending))
	for cpu := range s.pending {
		cpus = append(cpus, cpu)
	}
	sort.Ints(cpus)
	for _, cpu := range cpus {
		s.flush(cpu)
	}
	if err := s.w.Flush(); err != nil {
		s.f.Close()
		return err
	}
	return s.f.Close()
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
