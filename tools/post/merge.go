package main

// Merged trees (the trace-merge patent, analysis/merge): --merge writes merge.out, the
// call tree of every thread built from the method entry/exit records with
// the tprof ticks of the same trace in the nodes current at their time,
// then the flat report and ArcFlow with a ticks column; --merge-pprof FILE
// writes the same trees as pprof with ticks and time.

import (
	"bufio"
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

// mergePass merges the method entry/exit records with the tprof ticks as
// post reads them (analysis/merge) and writes the merged trees.
type mergePass struct {
	opt    mergeFlagValues
	outDir string
	stdout io.Writer
	r      *a2n.Resolver
	m      *merge.Merger
	recErr error // the first record the merger refused
	// the threads whose last tick was merged: their next call stack
	// belongs to it (the stacks of ticks left out are left out too)
	tickOf map[[2]uint32]bool
}

// newMergePass starts the merge reports of opt (nil: none asked for).
func newMergePass(opt mergeFlagValues, r *a2n.Resolver, outDir string, stdout io.Writer) *mergePass {
	if !opt.any() {
		return nil
	}
	return &mergePass{opt: opt, outDir: outDir, stdout: stdout, r: r, m: merge.New(), tickOf: map[[2]uint32]bool{}}
}

// name is a frame's symbol as of the record merged.
func (p *mergePass) name(pid uint32, pc uint64, kernel bool) string {
	return p.r.Resolve(pid, pc, kernel).Symbol
}

func (p *mergePass) record(rec *trace.Record, res *a2n.Result) {
	switch rec.Major {
	case trace.MajorTprof:
		k := [2]uint32{uint32(rec.Field(0)), uint32(rec.Field(1))}
		if res == nil {
			delete(p.tickOf, k) // left out by --pid/--tid/--comm
			return
		}
		p.tickOf[k] = true
		p.m.Tick(k[0], k[1], rec.Time, res.Symbol)
		return
	case trace.MajorUnwind:
		if rec.Minor != trace.UnwindTick {
			return // a wait's stack (UNWIND_SWITCH)
		}
		k := [2]uint32{uint32(rec.Field(0)), uint32(rec.Field(1))}
		if !p.tickOf[k] {
			return
		}
		delete(p.tickOf, k)
	}
	if err := p.m.Record(rec, p.name); err != nil && p.recErr == nil {
		p.recErr = err
	}
}

// finish ends the merge and writes merge.out (--merge) and the profile
// (--merge-pprof).
func (p *mergePass) finish() error {
	if p.recErr != nil {
		return p.recErr
	}
	m := p.m
	m.Finish()
	for _, t := range m.Threads {
		t.Name = p.r.ThreadName(t.PID, t.TID)
	}
	if p.opt.tree {
		path := filepath.Join(p.outDir, "merge.out")
		err := writeBuffered(path, func(w *bufio.Writer) error {
			err := m.WriteTree(w, "ns")
			if err == nil {
				fmt.Fprintln(w)
				err = m.WriteArcFlow(w, "ns")
			}
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(p.stdout, "post: wrote %s (%d threads, %d events, %d ticks)\n", path, len(m.Threads), m.Events, m.Ticks)
	}
	if path := p.opt.pprof; path != "" {
		if err := writeBuffered(path, func(w *bufio.Writer) error { return m.WritePprof(w, "ns") }); err != nil {
			return err
		}
		fmt.Fprintf(p.stdout, "post: wrote %s (go tool pprof -sample_index=ticks|time %s)\n", path, path)
	}
	return nil
}

// writeBuffered creates path and writes it with fn through a buffer; an
// error of the writing names the file (one of creating it does not, as
// create's callers do).
func writeBuffered(path string, fn func(w *bufio.Writer) error) error {
	f, w, err := create(path)
	if err != nil {
		return err
	}
	err = fn(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
