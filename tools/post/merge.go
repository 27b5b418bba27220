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
	"sort"
	"strings"

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
	agent  agentShare
}

// agentShare counts, per process whose method events are merged, the
// ticks merged and those whose interrupted instruction is in the JProf
// agent (its module's file name starts with agentModule: libjprof.so, or
// a copy beside it): what recording the method events costs, which the
// merged tree shows as the agent's functions under the methods recorded.
type agentShare struct {
	ticks, in map[uint32]uint64
	events    map[uint32]bool
	module    map[uint32]string
}

// agentModule starts the file name of the JProf agent's library.
const agentModule = "libjprof"

func (a *agentShare) init() {
	if a.ticks == nil {
		a.ticks, a.in, a.events, a.module = map[uint32]uint64{}, map[uint32]uint64{}, map[uint32]bool{}, map[uint32]string{}
	}
}

func (a *agentShare) tick(pid uint32, module string) {
	a.init()
	a.ticks[pid]++
	if base := filepath.Base(module); strings.HasPrefix(base, agentModule) && strings.Contains(base, ".so") {
		a.in[pid]++
		a.module[pid] = module
	}
}

func (a *agentShare) event(pid uint32) {
	a.init()
	a.events[pid] = true
}

// notes are the report's lines of the processes whose events are merged.
func (a *agentShare) notes() []string {
	pids := make([]uint32, 0, len(a.events))
	for pid := range a.events {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	var out []string
	for _, pid := range pids {
		share := 0.0
		if a.ticks[pid] > 0 {
			share = 100 * float64(a.in[pid]) / float64(a.ticks[pid])
		}
		agent := "the JProf agent"
		if m := a.module[pid]; m != "" {
			agent += " (" + m + ")"
		}
		out = append(out, fmt.Sprintf("Agent : pid %d: %d of its %d ticks (%.1f %%) interrupted %s: the cost of recording its method events, in the methods they were recorded in",
			pid, a.in[pid], a.ticks[pid], share, agent))
	}
	return out
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
		p.agent.tick(k[0], res.Module)
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
	if (rec.Major == trace.MajorInterp || rec.Major == trace.MajorJitted) && len(rec.Fixed) > 0 {
		p.agent.event(uint32(rec.Field(0)))
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
	m.Notes = p.agent.notes()
	for _, n := range m.Notes {
		fmt.Fprintln(p.stdout, "post: "+strings.TrimPrefix(n, "Agent : "))
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
