package main

// ITrace reports: -arc (PI's arc report, Figure 3), -itrace (per-function
// instructions, calls, callers and callees) and --callgrind FILE.

import (
	"bufio"
	"fmt"
	"github.com/urfave/cli/v2"
	"io"
	"os"
	"path/filepath"
	"strings"

	"perfinsp/analysis/a2n"

	"perfinsp/analysis/itrace"
	"perfinsp/format/trace"
	"perfinsp/internal/x86branch"
)

type itraceFlagValues struct {
	arc, report             bool
	callgrind, folded, prof string
	// annotate: --annotate's function, whose instructions the pass
	// counts (not an ITrace flag: --annotate covers both kinds of trace)
	annotate string
}

func itraceFlags(itraceOpt *itraceFlagValues) []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "arc", Usage: "write arc: one line per taken branch of the ITrace records (PI's arc report)", Destination: &itraceOpt.arc},
		&cli.BoolFlag{Name: "itrace", Usage: "write itrace.out: per function calls, exclusive and inclusive instructions, callers, callees", Destination: &itraceOpt.report},
		&cli.StringFlag{Name: "callgrind", Usage: "write the ITrace as a callgrind `FILE` (kcachegrind, callgrind_annotate)", Destination: &itraceOpt.callgrind},
		&cli.StringFlag{Name: "itrace-folded", Usage: "write the ITrace's call stacks to `FILE`, folded (pid N;root;...;leaf instructions), for flamegraph.pl", Destination: &itraceOpt.folded},
		&cli.StringFlag{Name: "itrace-pprof", Usage: "write the ITrace as a pprof profile to `FILE`: the value is instructions (flat = exclusive, cum = inclusive)", Destination: &itraceOpt.prof},
	}
}

func (o itraceFlagValues) any() bool {
	return o.arc || o.report || o.callgrind != "" || o.folded != "" || o.prof != ""
}

// writeFile creates path and writes it with fn.
func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// a2nNamer names ITrace addresses with A2N, as of the record replayed.
type a2nNamer struct {
	r     *a2n.Resolver
	cache map[[2]uint64]named
}

type named struct {
	fn   itrace.Func
	off  uint64
	file string
	line int
}

// isPLT tells a PLT stub (A2N names them name@plt, as perf does) or the
// PLT's first entry, the lazy binding path, which A2N leaves unnamed or
// names after a size-less _init before it: A2N knows the PLT sections.
func isPLT(res *a2n.Result) bool {
	return res.PLT || strings.HasSuffix(res.Symbol, "@plt")
}

func (n *a2nNamer) Func(pid uint32, addr uint64) (itrace.Func, uint64, string, int) {
	k := [2]uint64{uint64(pid), addr}
	if v, ok := n.cache[k]; ok {
		return v.fn, v.off, v.file, v.line
	}
	res := n.r.Resolve(pid, addr, false)
	v := named{fn: itrace.Func{Name: res.Symbol, Module: res.Module}, off: res.Offset, file: res.File, line: res.Line}
	if isPLT(&res) {
		v.fn.PLT = true
		if !strings.HasSuffix(res.Symbol, "@plt") {
			v.fn.Name = filepath.Base(res.Module) + ":PLT"
		}
	}
	n.cache[k] = v
	return v.fn, v.off, v.file, v.line
}

// itracePass replays the ITrace records (analysis/itrace) as post reads
// them, names as of each record, and writes the ITrace reports the
// options ask for.
type itracePass struct {
	opt    itraceFlagValues
	in     string
	outDir string
	stdout io.Writer
	r      *a2n.Resolver
	namer  *a2nNamer
	placer *filePlacer // --itrace-pprof's addresses
	rep    *itrace.Report
	blocks *itrace.Blocks // callgrind's instruction positions
	spans  *spans         // annotate's blocks
	arcF   *os.File
	arcW   *bufio.Writer
	arcErr error
}

// newITracePass starts the ITrace reports of opt (nil: none asked for).
func newITracePass(opt itraceFlagValues, in string, r *a2n.Resolver, outDir string, stdout io.Writer) *itracePass {
	if !opt.any() && opt.annotate == "" {
		return nil
	}
	if opt.callgrind != "" || opt.arc || opt.prof != "" {
		r.Lines = true
	}
	p := &itracePass{opt: opt, in: in, outDir: outDir, stdout: stdout, r: r, namer: &a2nNamer{r: r, cache: map[[2]uint64]named{}}}
	var onBranch func(b *itrace.Branch)
	if opt.arc {
		path := filepath.Join(outDir, "arc")
		if p.arcF, p.arcW, p.arcErr = create(path); p.arcErr == nil {
			fmt.Fprintf(p.arcW, "arc of %s: one line per taken branch (and system call, signal, interrupt, page fault) of the traced threads\n", in)
			fmt.Fprintln(p.arcW, "CPU K/U TYPE INSTS  CALLFLOW / PID_TID          OFFSET  SYMBOL:MODULE  PID_TID_NAME  TYPE-WORD  LINE")
			onBranch = func(b *itrace.Branch) { writeArc(p.arcW, p.namer, r, b) }
		}
	}
	p.rep = itrace.NewReport(p.namer, onBranch)
	if opt.callgrind != "" || opt.annotate != "" {
		p.blocks = itrace.NewBlocks(p.namer)
	}
	if opt.annotate != "" {
		p.spans = newSpans()
		p.blocks.OnBlock = p.spans.add
	}
	if opt.folded != "" || opt.prof != "" {
		p.rep.EnableStacks()
	}
	if opt.prof != "" || opt.callgrind != "" {
		p.placer = newFilePlacer(r)
	}
	if opt.prof != "" {
		p.rep.PlaceStacks(p.placer)
	}
	if opt.callgrind != "" {
		p.blocks.Spreader = p.placer // each instruction's count at its position
	}
	return p
}

func (p *itracePass) record(rec *trace.Record, _ *a2n.Result) {
	if p.blocks != nil {
		p.blocks.Apply(rec)
	}
	switch rec.Major {
	case trace.MajorMTE, trace.MajorJITLoad:
		if len(p.namer.cache) > 0 {
			p.namer.cache = map[[2]uint64]named{} // names may change from here on
		}
		if p.placer != nil {
			p.placer.forget()
		}
	case trace.MajorITraceU, trace.MajorITraceK:
		p.rep.Apply(rec)
	}
}

// finish ends the replay and writes the reports.
func (p *itracePass) finish() error {
	if p.arcErr != nil {
		return p.arcErr
	}
	p.rep.Finish()
	if p.rep.Instructions == 0 && p.opt.any() {
		fmt.Fprintf(p.stdout, "post: %s holds no ITrace records (swtrace itrace on, or scripts/run.itrace)\n", p.in)
	}
	for _, write := range []func() error{p.writeArc, p.writeReport, p.writeCallgrind, p.writeFolded, p.writePprof} {
		if err := write(); err != nil {
			return err
		}
	}
	return nil
}

// writeArc ends the arc report (-arc), written as the replay went.
func (p *itracePass) writeArc() error {
	if p.arcW == nil {
		return nil
	}
	if err := p.arcW.Flush(); err != nil {
		return fmt.Errorf("write arc: %w", err)
	}
	if err := p.arcF.Close(); err != nil {
		return err
	}
	rep := p.rep
	fmt.Fprintf(p.stdout, "post: wrote %s (%d lines)\n", filepath.Join(p.outDir, "arc"), rep.Branches+rep.Syscalls+rep.Signals+rep.Interrupts+rep.Faults)
	return nil
}

// writeReport writes itrace.out (-itrace).
func (p *itracePass) writeReport() error {
	if !p.opt.report {
		return nil
	}
	path := filepath.Join(p.outDir, "itrace.out")
	f, w, err := create(path)
	if err != nil {
		return err
	}
	writeITraceReport(w, p.rep, p.in)
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(p.stdout, "post: wrote %s (%d instructions, %d functions)\n", path, p.rep.Instructions, len(p.rep.Funcs))
	return nil
}

// writeCallgrind writes --callgrind FILE.
func (p *itracePass) writeCallgrind() error {
	path := p.opt.callgrind
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := p.rep.WriteCallgrindWith(f, callgrindOptions(p.rep, p.r, p.in, p.blocks)); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(p.stdout, "post: wrote %s (callgrind_annotate %s, or kcachegrind)\n", path, path)
	return nil
}

// writeFolded writes --itrace-folded FILE.
func (p *itracePass) writeFolded() error {
	path := p.opt.folded
	if path == "" {
		return nil
	}
	if err := writeFile(path, p.rep.WriteFolded); err != nil {
		return err
	}
	fmt.Fprintf(p.stdout, "post: wrote %s (flamegraph.pl --countname instructions %s > flame.svg)\n", path, path)
	return nil
}

// writePprof writes --itrace-pprof FILE.
func (p *itracePass) writePprof() error {
	path := p.opt.prof
	if path == "" {
		return nil
	}
	if err := writeFile(path, p.rep.WritePprof); err != nil {
		return err
	}
	fmt.Fprintf(p.stdout, "post: wrote %s (go tool pprof -http=: %s; values are instructions)\n", path, path)
	return nil
}

func writeArc(w *bufio.Writer, n *a2nNamer, r *a2n.Resolver, b *itrace.Branch) {
	ku := 'U'
	if b.Kernel {
		ku = 'K'
	}
	fn, off, file, line := n.Func(b.PID, b.From)
	word := x86branch.TypeWord(b.Type)
	switch {
	case b.Syscall >= 0:
		word = fmt.Sprintf("SYSCALL_%d", b.Syscall)
	case b.Signal > 0:
		word = fmt.Sprintf("SIGNAL_%d", b.Signal)
	case b.Irq >= int(trace.ITraceIRQDevice):
		word = fmt.Sprintf("IRQ_%d_%dns", b.Irq-int(trace.ITraceIRQDevice), b.DurationNs)
	case b.Irq >= 0:
		word = fmt.Sprintf("INTERRUPT_%d_%dns", b.Irq, b.DurationNs)
	case b.Fault:
		word = fmt.Sprintf("PAGEFAULT_0x%x_err%d_%dns", b.Addr, b.Error, b.DurationNs)
	}
	indent := strings.Repeat(" ", min(b.Depth, 40))
	tname := r.ThreadName(b.PID, b.TID)
	if tname == "" {
		tname = r.ProcessName(b.PID)
	}
	src := ""
	if file != "" {
		src = fmt.Sprintf("%s:%d", filepath.Base(file), line)
	}
	fmt.Fprintf(w, "%3d %c %d %6d %s%d_%d 0x%x %s:%s %d_%d_%s %s %s\n", b.CPU, ku, b.Type, b.Count, indent, b.PID, b.TID,
		off, fn.Name, filepath.Base(fn.Module), b.PID, b.TID, tname, word, src)
}

func writeITraceReport(w *bufio.Writer, rep *itrace.Report, in string) {
	fmt.Fprintf(w, "itrace.out of %s: %d instructions, %d taken branches, %d system calls, %d signals, %d threads\n",
		in, rep.Instructions, rep.Branches, rep.Syscalls, rep.Signals, rep.Threads)
	if rep.Interrupts+rep.Faults > 0 || rep.KernelNs > 0 {
		fmt.Fprintf(w, "kernel: %d interrupts and %d page faults in user code (not branches); %.3f ms in system calls, interrupts and faults\n",
			rep.Interrupts, rep.Faults, float64(rep.KernelNs)/1e6)
	}
	if rep.Instructions > 0 {
		secs := float64(rep.Last-rep.First) / 1e9
		fmt.Fprintf(w, "%d ITrace records, %d bytes: %.2f bytes per instruction; traced for %.3f s: %.0f instructions/s, %.0f records/s\n",
			rep.Records, rep.Bytes, float64(rep.Bytes)/float64(rep.Instructions), secs, float64(rep.Instructions)/max(secs, 1e-9), float64(rep.Records)/max(secs, 1e-9))
	}
	if rep.Unattributed > 0 {
		fmt.Fprintf(w, "warning: %d instructions in records before their thread's context record (wrap mode overwrote it)\n", rep.Unattributed)
	}
	fmt.Fprintln(w, "\n     CALLS    EXCLUSIVE    INCLUSIVE  FUNCTION:MODULE")
	sorted := rep.Sorted()
	for _, f := range sorted {
		fmt.Fprintf(w, "%10d %12d %12d  %s:%s\n", f.Calls, f.Exclusive, f.Inclusive, f.Name, filepath.Base(f.Module))
	}
	fmt.Fprintln(w, "\nCallers and callees (calls, callee's inclusive instructions from that caller)")
	for _, f := range sorted {
		if len(f.Callers) == 0 && len(f.Callees) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:%s\n", f.Name, filepath.Base(f.Module))
		for k, n := range f.Callers {
			if c := rep.Funcs[k]; c != nil {
				fmt.Fprintf(w, "  caller %10d  %s:%s\n", n, c.Name, filepath.Base(c.Module))
			}
		}
		for k, a := range f.Callees {
			if c := rep.Funcs[k]; c != nil {
				fmt.Fprintf(w, "  callee %10d %12d  %s:%s\n", a.Calls, a.Inclusive, c.Name, filepath.Base(c.Module))
			}
		}
	}
}
