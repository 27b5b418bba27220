// Command post turns a perfinsp trace file (swtrace.nrm2) into reports:
// post.show (every record as text) and tprof.out (PI's tprof report), plus
// a pprof profile and folded stacks for flame graphs.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"

	"perfinsp/libperfutil/a2n"
	"perfinsp/libperfutil/nrm2"
	"perfinsp/libperfutil/tprof"
	"perfinsp/libperfutil/trace"
)

const usage = `post: turn a perfinsp trace into reports

usage: post [-r swtrace.nrm2] [-show] [-tprof] [--pprof FILE] [--folded FILE] [options]

  -r FILE        trace file (default swtrace.nrm2)
  -strict        refuse a damaged trace file (default: read every intact chunk and
                 segment of a file cut short or corrupted, and report what was lost)
  -show          write post.show: every record as text, MTE included, tprof ticks with their names
  -tprof         write tprof.out: ticks by process, module, thread and symbol (PI's form)
  --pprof FILE   also write a pprof profile (open with: go tool pprof -http=: FILE)
  --folded FILE  also write folded stacks for flamegraph.pl: process;root;...;leaf count with call
                 stacks in the trace (swtrace enable callstack, run.tprof -g), else process;module;symbol
  --flame FILE   also write a flame graph as SVG (no Perl needed)
  -o DIR         directory for post.show and tprof.out (default: the current directory)
  --perfmap-dir DIR  where perf-PID.map / jit-PID.dump files are (default /tmp)
  --root DIR     prefix for module paths (a trace taken on another machine)
  --lines        add source file:line to post.show ticks (DWARF; slower)
  --pid LIST     only these processes (decimal pids, comma-separated) and the processes they
                 create during the trace (--no-children: not those); what is left out is counted
  --tid LIST     only these threads
  --comm LIST    only processes of these names
  --cpuprofile FILE  write post's own CPU profile (for perfinsp developers)

With no report option, -tprof is assumed. Every report starts with a warning when
records were lost, a buffer filled, or a module could not be read.
`

func main() {
	// post holds the whole trace in memory and allocates little else: a
	// rarer collector costs memory it has anyway and saves time.
	debug.SetGCPercent(400)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("post", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	in := fs.String("r", "swtrace.nrm2", "")
	show := fs.Bool("show", false, "")
	doTprof := fs.Bool("tprof", false, "")
	pprofOut := fs.String("pprof", "", "")
	folded := fs.String("folded", "", "")
	flame := fs.String("flame", "", "")
	outDir := fs.String("o", ".", "")
	perfmap := fs.String("perfmap-dir", "", "")
	root := fs.String("root", "", "")
	lines := fs.Bool("lines", false, "")
	cpuprofile := fs.String("cpuprofile", "", "")
	strict := fs.Bool("strict", false, "")
	pidList := fs.String("pid", "", "")
	tidList := fs.String("tid", "", "")
	commList := fs.String("comm", "", "")
	noChildren := fs.Bool("no-children", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "post: unexpected argument %q\n\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	if *cpuprofile != "" {
		pf, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, "post:", err)
			return 1
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if !*show && !*doTprof && *pprofOut == "" && *folded == "" && *flame == "" {
		*doTprof = true
	}
	filt, err := parseFilter(*pidList, *tidList, *commList, !*noChildren)
	if err != nil {
		fmt.Fprintf(stderr, "post: %v\n\n", err)
		fs.Usage()
		return 2
	}
	if err := post(*in, *outDir, *show, *doTprof, *pprofOut, *folded, *flame, *perfmap, *root, *lines, *strict, filt, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "post:", err)
		return 1
	}
	return 0
}

func create(path string) (*os.File, *bufio.Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return f, bufio.NewWriterSize(f, 1<<20), nil
}

func post(in, outDir string, show, doTprof bool, pprofOut, folded, flame, perfmap, root string, lines, strict bool, filt *tprof.Filter, stdout, stderr io.Writer) error {
	f, err := openTrace(in, strict)
	if err != nil {
		return err
	}
	r := a2n.New(f.Kallsyms)
	r.PerfMapDir = perfmap
	r.Cache.Root = root
	r.Lines = lines && show

	var showF *os.File
	var showW *bufio.Writer
	var onRecord func(rec *trace.Record, res *a2n.Result)
	if show {
		showPath := filepath.Join(outDir, "post.show")
		if showF, showW, err = create(showPath); err != nil {
			return err
		}
		defer showF.Close()
		fmt.Fprintf(showW, "post.show of %s: %d CPUs, %s mode, kernel %s\n", in, f.Header.NCPUs, nrm2.ModeName(f.Header.Mode), f.Header.KernelRelease)
		fmt.Fprintln(showW, "CPU TIME(s)             RECORD        FIELDS")
		onRecord = func(rec *trace.Record, res *a2n.Result) {
			if rec.Major == trace.MajorSys && rec.Minor == trace.SysTimeHigh {
				return
			}
			kind := ' '
			if rec.MTE {
				kind = 'M'
			}
			showW.WriteString(trace.Format(rec))
			if res != nil {
				fmt.Fprintf(showW, " -> %s %s+0x%x", res.Module, res.Symbol, res.Offset)
				if res.File != "" {
					fmt.Fprintf(showW, " %s:%d", res.File, res.Line)
				}
			}
			if kind == 'M' {
				showW.WriteString(" [MTE]")
			}
			showW.WriteByte('\n')
		}
	}
	rep := tprof.BuildFiltered(f, r, filt, onRecord)
	warns := warnings(rep)
	if show {
		for _, l := range warns {
			fmt.Fprintln(showW, l)
		}
		if err := showW.Flush(); err != nil {
			return fmt.Errorf("write post.show: %w", err)
		}
		fmt.Fprintf(stdout, "post: wrote %s\n", filepath.Join(outDir, "post.show"))
	}
	for _, w := range warns {
		fmt.Fprintln(stderr, "post:", w)
	}
	if doTprof {
		path := filepath.Join(outDir, "tprof.out")
		tf, tw, err := create(path)
		if err != nil {
			return err
		}
		if err := rep.WritePI(tw); err != nil {
			tf.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := tw.Flush(); err != nil {
			tf.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := tf.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "post: wrote %s (%d ticks)\n", path, rep.Total)
	}
	if pprofOut != "" {
		pf, err := os.Create(pprofOut)
		if err != nil {
			return err
		}
		if err := rep.WritePprof(pf); err != nil {
			pf.Close()
			return err
		}
		if err := pf.Close(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "post: wrote %s (go tool pprof -http=: %s)\n", pprofOut, pprofOut)
	}
	if folded != "" {
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
	if flame != "" {
		ff, fw, err := create(flame)
		if err != nil {
			return err
		}
		title := "tprof of " + filepath.Base(in)
		if len(rep.Stacks) == 0 {
			title += " (no call stacks in the trace: process, module, symbol; swtrace enable callstack)"
		}
		err = rep.WriteFlameSVG(fw, title)
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
