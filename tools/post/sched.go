package main

// Scheduling reports (analysis/offcpu): -sched writes sched.out and
// sched.json (each thread's time by state, switches, interrupt time,
// wake-up latency histograms, the longest wake-ups, interrupts per CPU);
// --offcpu / --offcpu-pprof the off-CPU profile (the stacks threads waited
// in, weighted by the time waited); --wall / --wall-pprof the wall-clock
// profile (on-CPU and off-CPU time of the same threads in one profile).

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/offcpu"
	"perfinsp/analysis/tprof"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

type schedFlagValues struct {
	sched                                   bool
	offFolded, offPprof, wallFolded, wallPP string
}

func schedFlags(v *schedFlagValues) []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "sched", Usage: "write sched.out and sched.json: each thread's running, run-queue, sleeping and blocked time, switches, interrupt time, wake-up latency histograms and the longest wake-ups (swtrace enable dispatch [interrupt])", Destination: &v.sched},
		&cli.StringFlag{Name: "offcpu", Usage: "write the off-CPU profile as folded stacks (ns) to `FILE`: process;thread-tid;[state];root;...;leaf, the stacks threads waited in (swtrace enable dispatch callstack)", Destination: &v.offFolded},
		&cli.StringFlag{Name: "offcpu-pprof", Usage: "write the off-CPU profile as pprof to `FILE`", Destination: &v.offPprof},
		&cli.StringFlag{Name: "wall", Usage: "write the wall-clock profile as folded stacks (ns) to `FILE`: running time by tick stacks and off-CPU time by wait stacks, each thread's adding up to its life in the trace (swtrace enable dispatch tprof callstack)", Destination: &v.wallFolded},
		&cli.StringFlag{Name: "wall-pprof", Usage: "write the wall-clock profile as pprof to `FILE`", Destination: &v.wallPP},
	}
}

func (v schedFlagValues) any() bool {
	return v.sched || v.offFolded != "" || v.offPprof != "" || v.wallFolded != "" || v.wallPP != ""
}

// schedHook feeds every record to an offcpu analyzer after next (names
// of stacks as of their time); the returned end function writes the reports.
// begin: the time from which every CPU's records are in the trace
// (schedBegin).
func schedHook(opt schedFlagValues, r *a2n.Resolver, filt *tprof.Filter, begin uint64, next func(*trace.Record, *a2n.Result), outDir string, stdout, stderr io.Writer) (func(*trace.Record, *a2n.Result), func() error) {
	if !opt.any() {
		return next, func() error { return nil }
	}
	a := offcpu.New(func(pid uint32, pc uint64, kernel bool) string { return r.Resolve(pid, pc, kernel).Symbol })
	a.Begin = begin
	var off uint64
	filt = growingFilter(filt)
	hook := func(rec *trace.Record, res *a2n.Result) {
		if next != nil {
			next(rec, res)
		}
		growFilter(filt, rec)
		if rec.Major == trace.MajorSys && rec.Minor == trace.SysTraceOff {
			off = rec.Time
		}
		a.Record(rec)
	}
	end := func() error {
		a.Finish(off)
		for _, th := range a.Threads() {
			th.Name = r.ThreadName(th.PID, th.TID)
		}
		if a.Dispatches == 0 {
			fmt.Fprintln(stderr, "post: no DISPATCH records in the trace: the scheduling reports need swtrace enable dispatch (run.tprof --sched)")
		}
		if a.LostSwitchIns > 0 {
			fmt.Fprintf(stderr, "post: %d of %d switches out of a wait (or of a thread not seen before, on a CPU that ran another) had no switch-in before them in the trace: those waits' times are counted as unknown (the kernel did not report the switch-in, or the trace lost it)\n", a.LostSwitchIns, a.Dispatches)
		}
		if a.LostSwitchOuts > 0 {
			fmt.Fprintf(stderr, "post: %d switches on a CPU were not from the thread running there: that thread's switch-out was not in the trace (the trace lost it, or the kernel hides the thread from perf); its time from its last tick (or switch-in) to its next record is counted as unknown\n", a.LostSwitchOuts)
		}
		procName := r.ProcessName
		keep := func(cells []offcpu.Cell) []offcpu.Cell {
			if filt == nil {
				return cells
			}
			out := cells[:0]
			for _, c := range cells {
				if schedSelected(filt, c.Thread.PID, c.Thread.TID, procName) {
					out = append(out, c)
				}
			}
			return out
		}
		if opt.sched {
			if filt != nil {
				a.Select(func(th *offcpu.Thread) bool { return schedSelected(filt, th.PID, th.TID, procName) })
			}
			for _, rep := range []struct {
				name  string
				write func(io.Writer, func(uint32) string) error
			}{{"sched.out", a.WriteText}, {"sched.json", a.WriteJSON}} {
				path := filepath.Join(outDir, rep.name)
				if err := writeFile(path, func(w io.Writer) error { return rep.write(w, procName) }); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "post: wrote %s (%d threads, %d dispatches, %d wake-ups)\n", path, len(a.Threads()), a.Dispatches, a.Wakeups)
			}
		}
		for _, p := range []struct {
			path, kind string
			pprof      bool
		}{{opt.offFolded, "off_cpu", false}, {opt.offPprof, "off_cpu", true}, {opt.wallFolded, "wall", false}, {opt.wallPP, "wall", true}} {
			if p.path == "" {
				continue
			}
			var cells []offcpu.Cell
			if p.kind == "wall" {
				cells = keep(a.Wall())
			} else {
				cells = keep(a.OffCPU())
			}
			err := writeFile(p.path, func(w io.Writer) error {
				if p.pprof {
					return offcpu.WritePprof(w, cells, p.kind, procName)
				}
				return offcpu.WriteFolded(w, cells, procName)
			})
			if err != nil {
				return err
			}
			if p.pprof {
				fmt.Fprintf(stdout, "post: wrote %s (go tool pprof -http=: %s)\n", p.path, p.path)
			} else {
				fmt.Fprintf(stdout, "post: wrote %s (flamegraph.pl --countname=ns %s > flame.svg)\n", p.path, p.path)
			}
		}
		return nil
	}
	return hook, end
}

// schedBegin is the time from which every CPU's records are in a
// wrap-mode trace: the latest of the first trace records of the CPUs
// that lost records (whose oldest ones were overwritten). 0 for a trace
// of another mode, or where no CPU lost records: there records are lost
// after the start, not before.
func schedBegin(f *nrm2.File) uint64 {
	if f.Header.Mode != nrm2.ModeWrap {
		return 0
	}
	wrapped := map[int]bool{}
	for c, st := range f.Stats {
		if st.Lost > 0 {
			wrapped[c] = true
		}
	}
	if len(wrapped) == 0 {
		return 0
	}
	var begin uint64
	errDone := errors.New("done")
	err := f.RecordsOf(nrm2.ChunkTrace, func(rec *trace.Record) error {
		if rec.Major == trace.MajorSys {
			return nil // the trace's own start and end
		}
		if wrapped[rec.CPU] {
			delete(wrapped, rec.CPU)
			begin = rec.Time
		}
		if len(wrapped) == 0 {
			return errDone
		}
		return nil
	})
	if err != nil && err != errDone {
		return 0
	}
	return begin
}

// growingFilter is a copy of f for a pass that selects threads by it
// (nil: none): with --pid and its children, growFilter adds to it the
// processes the selected ones create, as the tick reader does to its own.
func growingFilter(f *tprof.Filter) *tprof.Filter {
	if f == nil || !f.Children || len(f.Pids) == 0 {
		return f
	}
	cp := *f
	cp.Pids = make(map[uint32]bool, len(f.Pids))
	for p := range f.Pids {
		cp.Pids[p] = true
	}
	return &cp
}

// growFilter adds the process an MTE_FORK record of a selected process
// creates to f (growingFilter's).
func growFilter(f *tprof.Filter, rec *trace.Record) {
	if f != nil && f.Children && len(f.Pids) > 0 && rec.Major == trace.MajorMTE && rec.Minor == trace.MTEFork && f.Pids[uint32(rec.Field(0))] {
		f.Pids[uint32(rec.Field(2))] = true
	}
}

// schedSelected is --pid/--tid/--comm for threads (--pid takes in the
// processes the selected ones create when f is growingFilter's).
func schedSelected(f *tprof.Filter, pid, tid uint32, procName func(uint32) string) bool {
	if len(f.Pids) > 0 && !f.Pids[pid] {
		return false
	}
	if len(f.Tids) > 0 && !f.Tids[tid] {
		return false
	}
	return len(f.Comms) == 0 || f.Comms[procName(pid)]
}
