// Command post turns a perfinsp trace file (swtrace.nrm2) into reports:
// post.show (every record as text) and tprof.out (PI's tprof report), plus
// a pprof profile and folded stacks for flame graphs.
package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"perfinsp/internal/cliutil"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/tprof"
	"perfinsp/format/nrm2"
	"perfinsp/internal/hugeheap"
)

const description = `post reads a trace file (swtrace.nrm2) and writes the reports asked for; with no
report option, -tprof is assumed. Every report starts with a warning when records were lost,
a buffer filled, the file was cut short or damaged, or a module could not be read.
Long options take one or two dashes (-tprof, --tprof). See docs/post.md and docs/itrace.md.

   post -tprof                          tprof.out (PI's form)
   post -tprof --pprof p.pb.gz          go tool pprof -http=: p.pb.gz
   post -tprof --folded f --flame f.svg flame graphs (with swtrace enable callstack: call stacks)
   post -show                           post.show: every record as text
   post -arc -itrace --callgrind cg.out ITrace reports
   post --merge --merge-pprof m.pb.gz   merge.out: JProf method events merged with tprof ticks
   post -sched --offcpu off.folded      sched.out, sched.json: time by state, wake-up latency; off-CPU stacks
   post --timeline t.pftrace            a time line for ui.perfetto.dev: CPU scheduling, samples, ITrace calls
   post --timeline t.json               the same in trace-event JSON (chrome://tracing opens it too)
   post --wall w.folded --wall-pprof w.pb.gz  on-CPU and off-CPU time in one profile`

// options are post's command line, parsed once: the flags' values, then
// what run derives from them (the tick filter, the table cache in use).
type options struct {
	in, outDir, pprofOut, folded, flame, perfmap, root, cpuprofile, cacheDir string
	script, diff, annotate                                                   string
	timeline                                                                 timelineOpts
	show, doTprof, lines, strict, noChildren, noCache, hexIDs, progress      bool
	pids, tids, comms                                                        string
	itrace                                                                   itraceFlagValues
	merge                                                                    mergeFlagValues
	sched                                                                    schedFlagValues
	filter                                                                   *tprof.Filter // --pid, --tid, --comm (nil: every tick)
}

func newApp(o *options, stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:            "post",
		Usage:           "turn a perfinsp trace into reports",
		UsageText:       "post [-r swtrace.nrm2] [-show] [-tprof] [--pprof FILE] [--folded FILE] [--flame FILE] [-arc] [-itrace] [--callgrind FILE] [options]",
		Description:     description,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "r", Value: "swtrace.nrm2", Usage: "trace `FILE`", Destination: &o.in},
			&cli.BoolFlag{Name: "strict", Usage: "refuse a damaged trace file (default: read every intact chunk and segment of a file cut short or corrupted, and report what was lost)", Destination: &o.strict},
			&cli.BoolFlag{Name: "show", Usage: "write post.show: every record as text, MTE included, tprof ticks with their names", Destination: &o.show},
			&cli.BoolFlag{Name: "tprof", Usage: "write tprof.out: ticks by process, module, thread and symbol (PI's form), and the call tree with call stacks (a previous tprof.out is kept as tprof.out.old)", Destination: &o.doTprof},
			&cli.StringFlag{Name: "pprof", Usage: "also write a pprof profile to `FILE` (go tool pprof -http=: FILE)", Destination: &o.pprofOut},
			&cli.StringFlag{Name: "folded", Usage: "also write folded stacks to `FILE` for flamegraph.pl: process;root;...;leaf with call stacks in the trace (swtrace enable callstack, run.tprof -g), else process;module;symbol", Destination: &o.folded},
			&cli.StringFlag{Name: "flame", Usage: "also write a flame graph as SVG to `FILE` (no Perl needed)", Destination: &o.flame},
			&cli.StringFlag{Name: "diff", Usage: "with --flame: a differential flame graph against the folded stacks in `FILE` (post --folded of the earlier run): red where a frame's share grew, blue where it shrank", Destination: &o.diff},
			&cli.StringFlag{Name: "annotate", Usage: "write annotate.out: the disassembly of the function named `FUNC` with, at each instruction and source line, tprof's ticks and ITrace's exact instruction counts (perf annotate's view)", Destination: &o.annotate},
			&cli.StringFlag{Name: "script", Usage: "write every tprof sample with its call stack to `FILE` as perf script does (stackcollapse-perf.pl reads it)", Destination: &o.script},
			&cli.StringFlag{Name: "o", Value: ".", Usage: "write post.show, tprof.out and the ITrace reports into `DIR`", Destination: &o.outDir},
			&cli.StringFlag{Name: "perfmap-dir", Usage: "`DIR` of perf-PID.map / jit-PID.dump files (default /tmp)", Destination: &o.perfmap},
			&cli.StringFlag{Name: "root", Usage: "`DIR` prefix for module paths (a trace taken on another machine)", Destination: &o.root},
			&cli.BoolFlag{Name: "hex-ids", Usage: "label processes and threads in tprof.out name_hexid, as PI's tprof did (default: name_pid in decimal)", Destination: &o.hexIDs},
			&cli.BoolFlag{Name: "lines", Usage: "add source file:line to post.show ticks (DWARF; slower)", Destination: &o.lines},
			&cli.StringFlag{Name: "pid", Usage: "only these processes (`LIST` of decimal pids) and the processes they create during the trace; what is left out is counted", Destination: &o.pids},
			&cli.BoolFlag{Name: "no-children", Usage: "with --pid: not the processes they create", Destination: &o.noChildren},
			&cli.StringFlag{Name: "tid", Usage: "only these threads (`LIST`)", Destination: &o.tids},
			&cli.StringFlag{Name: "comm", Usage: "only processes of these names (`LIST`)", Destination: &o.comms},
			&cli.StringFlag{Name: "cache-dir", EnvVars: []string{"PERFINSP_CACHE_DIR"}, Value: a2n.DefaultTableCacheDir(), Usage: "keep the symbol tables post parses (modules by file identity, the kernel's by its kallsyms) in `DIR`, read by later runs instead of parsed again", Destination: &o.cacheDir},
			&cli.BoolFlag{Name: "no-cache", Usage: "neither read nor write the table cache (--cache-dir)", Destination: &o.noCache},
			&cli.BoolFlag{Name: "progress", Usage: "print how much of the trace is read on stderr as post reads it, at each tenth and every 2 s (default: every 2 s when stderr is a terminal and the reading takes longer)", Destination: &o.progress},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write post's own CPU profile to `FILE` (for perfinsp developers)", Destination: &o.cpuprofile},
		}, append(append(append(itraceFlags(&o.itrace), mergeFlags(&o.merge)...), schedFlags(&o.sched)...), timelineFlags(&o.timeline)...)...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cliutil.UsageError(c, fmt.Sprintf("unexpected argument %q (the trace file is -r FILE)", c.Args().First()))
			}
			return o.run(c, stdout, stderr)
		},
	}
	cliutil.Apply(app)
	return app
}

func main() {
	// The collector's default pace, unless the heap is in huge pages (see
	// post): in 4 KB pages a larger heap (post ran at 400 %) cost more in
	// page faults on fresh memory than the collections it saved
	// (bench/post/real.sh: flat and stacks reports, less CPU and memory).
	debug.SetGCPercent(100)
	reserveHeap = hugeheap.Reserve
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// reserveHeap is hugeheap.Reserve in the post program (not in tests,
// which share one process): a report's heap is faulted in 2 MB at a time.
var reserveHeap func(n int) (int, string)

// heapPerTraceByte bounds the heap a report fills, per byte of its trace
// (measured on 1 M-tick traces, collector at 400 %: up to 3.1, a
// many-process report with call stacks).
const heapPerTraceByte = 4

// timelineHeapPerTraceByte is what a time line (--timeline) adds to it:
// the function of every address, by process, the stack frames and the
// threads' states. Bounded to the
// report's alone, the collector ran almost without pause while the time
// line was written.
const timelineHeapPerTraceByte = 3

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	return cliutil.Run(newApp(&o, stdout, stderr), append([]string{"post"}, args...))
}

func (o *options) run(c *cli.Context, stdout, stderr io.Writer) error {
	if o.cpuprofile != "" {
		pf, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if o.diff != "" && o.flame == "" {
		return cliutil.UsageError(c, "--diff FILE colours the flame graph: give --flame FILE too")
	}
	if !o.show && !o.doTprof && o.pprofOut == "" && o.folded == "" && o.flame == "" && o.script == "" && o.annotate == "" && !o.itrace.any() && !o.merge.any() && !o.sched.any() && o.timeline.path == "" {
		o.doTprof = true
	}
	var err error
	if o.filter, err = parseFilter(o.pids, o.tids, o.comms, !o.noChildren); err != nil {
		fmt.Fprintf(stderr, "post: %v\n\n", err)
		cli.ShowAppHelp(c)
		return cli.Exit("", 2)
	}
	if o.noCache {
		o.cacheDir = ""
	}
	if writesTo(c, stdout) {
		stdout = stderr // post's word on what it wrote would go into the report
	}
	return post(o, stdout, stderr)
}

// writesTo tells whether a file option (--pprof, --folded, --script, ...)
// names the file or pipe that out is: /dev/stdout, or the file stdout was
// redirected to (not a device: /dev/null or a terminal takes both).
func writesTo(c *cli.Context, out io.Writer) bool {
	f, ok := out.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeDevice != 0 {
		return false
	}
	for _, name := range c.FlagNames() {
		if path := c.String(name); path != "" {
			if pi, err := os.Stat(path); err == nil && os.SameFile(fi, pi) {
				return true
			}
		}
	}
	return false
}

// rewrite opens path to be written from its start, as create, but
// without truncating it first: the pages of an old report are written
// over, not freed and made again (truncating a report of megabytes costs
// measurably); endRewrite cuts the file where the writing ended.
func rewrite(path string) (*os.File, *bufio.Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, nil, err
	}
	return f, bufio.NewWriterSize(f, 1<<20), nil
}

// endRewrite flushes w and cuts f (of rewrite) at what was written, also
// when the flush fails (what is left is what was written, never a part of
// an old report after it). A file that is not a regular file is left as
// it is.
func endRewrite(f *os.File, w *bufio.Writer) error {
	ferr := w.Flush()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return ferr
	}
	end, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		err = f.Truncate(end)
	}
	if ferr != nil {
		return ferr
	}
	return err
}

// keepOld keeps a previous report at path as path.old (as perf keeps
// perf.data.old), saying so: a report is never lost to the next run. Only
// a regular file is moved (a report written to a FIFO or a device is left
// alone); one that cannot be moved is written over, said too.
func keepOld(path string, stderr io.Writer) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	if err := os.Rename(path, path+".old"); err != nil {
		fmt.Fprintf(stderr, "post: the previous %s is written over (%v)\n", path, err)
		return
	}
	fmt.Fprintf(stderr, "post: the previous %s is kept as %s.old\n", path, filepath.Base(path))
}

func create(path string) (*os.File, *bufio.Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, bufio.NewWriterSize(f, 1<<20), nil
}

// post writes the reports o asks for.
func post(o *options, stdout, stderr io.Writer) error {
	in, outDir := o.in, o.outDir
	f, err := openTrace(in, o.strict)
	if err != nil {
		return err
	}
	if st, err := os.Stat(in); err == nil && reserveHeap != nil {
		perByte := int64(heapPerTraceByte)
		if o.timeline.path != "" {
			perByte += timelineHeapPerTraceByte
		}
		if n, _ := reserveHeap(int(min(st.Size(), 1<<40) * perByte)); n > 0 {
			// In huge pages a larger heap costs few faults: a quarter
			// of the collections saves a tenth of the CPU of a flat or
			// stacks report, for a quarter more resident memory (still
			// half of perf report's). The reservation
			// bounds it (a soft limit: the collector runs more often
			// near it), so that a trace larger than the memory allows
			// is not read with five times its live heap.
			debug.SetGCPercent(400)
			debug.SetMemoryLimit(int64(n))
		}
	}
	// before the work, not after it: a missing -o DIR is made
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	r := o.resolver(f)
	// The module files the resolver parsed (those not in the table
	// cache) are mapped, unmapped once the resolver is unreachable: that
	// is once the names are made, by a collection during the writing,
	// where each munmap stops every CPU to flush the TLB (dozens of them
	// on a system-wide trace). They go with the process.
	defer runtime.KeepAlive(r)
	r.Lines = o.lines && o.show

	ps, show, err := o.passes(f, r, stdout, stderr)
	if err != nil {
		return err
	}
	if show != nil {
		defer show.f.Close()
	}
	onRecord := ps.onRecord()
	sel := newSelection(o.filter)
	opt := tprof.Options{Filter: o.filter, OnRecord: onRecord, Unnamed: ps.unnamed(),
		// the profile's addresses and lines, annotate's ticks
		Addresses: o.pprofOut != "" || o.annotate != ""}
	var read tprof.Progress
	prog := newProgress(stderr, o.progress, tprof.TraceBytes(f), read.Read)
	if prog != nil {
		opt.Progress = &read // (counted only when shown)
	}
	prog.run()
	rep := tprof.BuildWith(f, r, opt)
	prog.end()
	rep.HexIDs = o.hexIDs
	if rep.Total == 0 {
		if err := sel.check(f); err != nil {
			return err
		}
	}
	if err := ps.finish(); err != nil {
		return err
	}
	warns := warnings(rep)
	if show != nil {
		if err := show.close(warns, stdout); err != nil {
			return err
		}
	}
	for _, w := range stderrWarnings(warns) {
		fmt.Fprintln(stderr, "post:", w)
	}
	if h := stackHint(rep); h != "" {
		fmt.Fprintln(stderr, "post:", h)
	} else if h := rootHint(rep); h != "" {
		fmt.Fprintln(stderr, "post:", h)
	}
	for _, h := range symbolsHints(rep, &r.Cache) {
		fmt.Fprintln(stderr, "post:", h)
	}
	// The report is built: the writing allocates a bounded amount (orders
	// and buffers of its rows), all of it live until post exits. A
	// collection then frees nothing worth its cost (its marking would run
	// beside the writing, on the same CPUs);
	// the memory limit set with the reservation still bounds the heap.
	debug.SetGCPercent(-1)
	if o.doTprof {
		path := filepath.Join(outDir, "tprof.out")
		keepOld(path, stderr)
		tf, tw, err := rewrite(path)
		if err != nil {
			return err
		}
		err = rep.WritePI(tw)
		if eerr := endRewrite(tf, tw); err == nil {
			err = eerr
		}
		if err != nil {
			tf.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := tf.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "post: wrote %s (%d ticks)\n", path, rep.Total)
	}
	if pprofOut := o.pprofOut; pprofOut != "" {
		pf, err := os.Create(pprofOut)
		if err != nil {
			return err
		}
		// The profile's source lines read the modules' DWARF, whose size
		// is the modules', not the trace's: the heap bound made for the
		// report would have the collector run without end.
		debug.SetMemoryLimit(math.MaxInt64)
		debug.SetGCPercent(100)
		if err := rep.WritePprof(pf); err != nil {
			pf.Close()
			return err
		}
		if err := pf.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "post: wrote %s (go tool pprof -http=: %s)\n", pprofOut, pprofOut)
	}
	if o.annotate != "" {
		if err := writeAnnotate(filepath.Join(outDir, "annotate.out"), o.annotate, rep, ps.itrace(), stdout); err != nil {
			return err
		}
	}
	if folded := o.folded; folded != "" {
		ff, fw, err := create(folded)
		if err != nil {
			return err
		}
		if err := rep.WriteFolded(fw); err != nil {
			ff.Close()
			return err
		}
		if err := fw.Flush(); err != nil {
			ff.Close()
			return err
		}
		if err := ff.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "post: wrote %s (flamegraph.pl %s > flame.svg)\n", folded, folded)
	}
	if flame := o.flame; flame != "" {
		ff, fw, err := create(flame)
		if err != nil {
			return err
		}
		title := "tprof of " + filepath.Base(in)
		if rep.StackTicks == 0 {
			title += " (no call stacks in the trace: process, module, symbol; swtrace enable callstack)"
		}
		if o.diff != "" {
			var base *os.File
			if base, err = os.Open(o.diff); err == nil {
				title = "differential " + title + " against " + filepath.Base(o.diff) + " (red: grew, blue: shrank)"
				err = rep.WriteFlameDiffSVG(fw, title, base)
				base.Close()
			}
		} else {
			err = rep.WriteFlameSVG(fw, title)
		}
		if err == nil {
			err = fw.Flush()
		}
		if cerr := ff.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "post: wrote %s (open it in a browser)\n", flame)
	}
	return nil
}

// resolver is a resolver of f's addresses with o's table cache, perf
// map directory and root.
func (o *options) resolver(f *nrm2.File) *a2n.Resolver {
	r := a2n.NewCached(f.Kallsyms, o.cacheDir)
	r.PerfMapDir = o.perfmap
	r.Cache.Root = o.root
	r.KernelRelease = f.Header.KernelRelease // (tprof's: names [vdso] when this is that kernel)
	r.Clock = wallClock(f.Header)
	return r
}

// wallClock turns a record time of a trace with header h into wall time,
// ns since the epoch (nil: the header does not say how).
func wallClock(h nrm2.Header) func(uint64) int64 {
	if h.ClockHz == 0 || h.StartWallNs == 0 {
		return nil
	}
	return func(t uint64) int64 {
		d := float64(int64(t - h.StartClockNs))
		return int64(h.StartWallNs) + int64(d*1e9/float64(h.ClockHz))
	}
}

// passes makes the record passes o asks for, in the order they take each
// record: post.show (also returned: its end waits for the tprof report),
// --script, the ITrace, merge and scheduling reports, the time line.
func (o *options) passes(f *nrm2.File, r *a2n.Resolver, stdout, stderr io.Writer) (passes, *showPass, error) {
	var ps passes
	var show *showPass
	if o.show {
		var err error
		if show, err = newShowPass(o.outDir, o.in, f.Header); err != nil {
			return nil, nil, err
		}
		ps = append(ps, show)
	}
	if o.script != "" {
		w, err := newScriptWriter(o.script, r, uint64(f.Header.RateHz))
		if err != nil {
			if show != nil {
				show.f.Close()
			}
			return nil, nil, err
		}
		ps = append(ps, scriptPass{w, o.script, stdout})
	}
	itraceOpt := o.itrace
	itraceOpt.annotate = o.annotate
	if p := newITracePass(itraceOpt, o.in, r, o.outDir, stdout); p != nil {
		ps = append(ps, p)
	}
	if p := newMergePass(o.merge, r, o.outDir, stdout); p != nil {
		ps = append(ps, p)
	}
	if o.sched.any() {
		rec, end := schedHook(o.sched, r, o.filter, schedBegin(f), nil, o.outDir, stdout, stderr)
		ps = append(ps, hookPass{rec, end, true}) // (the stacks it names itself)
	}
	if o.timeline.path != "" {
		// Without a selection the time line is written beside the
		// reading, with a resolver of its own that takes the mapping
		// records as the reader's does; with one, the selected
		// processes are the reader's (a fork adds to them), so the
		// reader writes the time line.
		var own *a2n.Resolver
		if o.filter == nil && timelineBeside {
			own = o.resolver(f)
		}
		tlOpt := o.timeline
		tlOpt.begin = schedBegin(f)
		rec, end, err := timelineHook(tlOpt, r, own, o.filter, nil, stdout)
		if err != nil {
			if show != nil {
				show.f.Close()
			}
			return nil, nil, err
		}
		ps = append(ps, hookPass{rec, end, true})
	}
	return ps, show, nil
}

// parseFilter builds the tick selection of --pid, --tid and --comm (nil
// when none is given).
func parseFilter(pids, tids, comms string, children bool) (*tprof.Filter, error) {
	if pids == "" && tids == "" && comms == "" {
		return nil, nil
	}
	f := &tprof.Filter{Children: children}
	ids := func(flag, list string) (map[uint32]bool, error) {
		if list == "" {
			return nil, nil
		}
		m := map[uint32]bool{}
		for _, p := range strings.Split(list, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(p), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("--%s: %q is not a decimal id", flag, p)
			}
			m[uint32(v)] = true
		}
		return m, nil
	}
	var err error
	if f.Pids, err = ids("pid", pids); err != nil {
		return nil, err
	}
	if f.Tids, err = ids("tid", tids); err != nil {
		return nil, err
	}
	if comms != "" {
		f.Comms = map[string]bool{}
		for _, c := range strings.Split(comms, ",") {
			f.Comms[strings.TrimSpace(c)] = true
		}
	}
	return f, nil
}
