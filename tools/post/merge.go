package main

// Merged trees (the trace-merge patent, analysis/merge): --merge writes merge.out, the
// call tree of every thread built from the method entry/exit records with
// the tprof ticks of the same trace in the nodes current at their time,
// then the flat report and ArcFlow with a ticks column; --merge-pprof FILE
// writes the same trees as pprof with ticks and time.

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/merge"
	"perfinsp/format/trace"
)

type mergeFlagValues struct {
	tree  bool
	pprof string
}

func mergeFlags(mergeOpt *mergeFlagValues) []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "merge", Usage: "write merge.out: method entry/exit events merged with the tprof ticks of the same trace (JProf calltree + tprof): call tree per thread with a ticks column, flat report, ArcFlow", Destination: &mergeOpt.tree},
		&cli.StringFlag{Name: "merge-pprof", Usage: "write the merged trees as a pprof profile with ticks and time to `FILE`", Destination: &mergeOpt.pprof},
	}
}

func (o mergeFlagValues) any() bool { return o.tree || o.pprof != "" }

// mergeHook feeds every record to a merger after next; the returned end
// function writes the reports.
func mergeHook(opt mergeFlagValues, r *a2n.Resolver, next func(*trace.Record, *a2n.Result), outDir string, stdout io.Writer) (func(*trace.Record, *a2n.Result), func() error) {
	if !opt.any() {
		return next, func() error { return nil }
	}
	m := merge.New()
	var recErr error
	name := func(pid uint32, pc uint64, kernel bool) string { return r.Resolve(pid, pc, kernel).Symbol }
	// the threads whose last tick was merged: their next call stack
	// belongs to it (the stacks of ticks left out are left out too)
	tickOf := map[[2]uint32]bool{}
	hook := func(rec *trace.Record, res *a2n.Result) {
		if next != nil {
			next(rec, res)
		}
		switch rec.Major {
		case trace.MajorTprof:
			k := [2]uint32{uint32(rec.Field(0)), uint32(rec.Field(1))}
			if res == nil {
				delete(tickOf, k) // left out by --pid/--tid/--comm
				return
			}
			tickOf[k] = true
			m.Tick(k[0], k[1], rec.Time, res.Symbol)
			return
		case trace.MajorUnwind:
			if rec.Minor != trace.UnwindTick {
				return // a wait's stack (UNWIND_SWITCH)
			}
			k := [2]uint32{uint32(rec.Field(0)), uint32(rec.Field(1))}
			if !tickOf[k] {
				return
			}
			delete(tickOf, k)
		}
		if err := m.Record(rec, name); err != nil && recErr == nil {
			recErr = err
		}
	}
	end := func() error {
		if recErr != nil {
			return recErr
		}
		m.Finish()
		for _, t := range m.Threads {
			t.Name = r.ThreadName(t.PID, t.TID)
		}
		if opt.tree {
			path := filepath.Join(outDir, "merge.out")
			f, w, err := create(path)
			if err != nil {
				return err
			}
			err = m.WriteTree(w, "ns")
			if err == nil {
				fmt.Fprintln(w)
				err = m.WriteArcFlow(w, "ns")
			}
			if err == nil {
				err = w.Flush()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			fmt.Fprintf(stdout, "post: wrote %s (%d threads, %d events, %d ticks)\n", path, len(m.Threads), m.Events, m.Ticks)
		}
		if opt.pprof != "" {
			f, w, err := create(opt.pprof)
			if err != nil {
				return err
			}
			err = m.WritePprof(w, "ns")
			if err == nil {
				err = w.Flush()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", opt.pprof, err)
			}
			fmt.Fprintf(stdout, "post: wrote %s (go tool pprof -sample_index=ticks|time %s)\n", opt.pprof, opt.pprof)
		}
		return nil
	}
	return hook, end
}
