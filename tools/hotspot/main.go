// Command hotspot finds the hot functions of a process by sampling, then
// walks up its call graph with temporary uprobes on entries and exits, one level at a
// time: the hot function, then its callers, then theirs, up to main, in the
// target and the processes it forks. Per instrumented function it reports
// the calls, the wall time (and an -m counter) per call and the callers
// with their share of calls; an overhead budget (5 % by default, from the
// probe cost it measures at the start) bounds the target's slowdown. See
// docs/hotspot.md.
//
//	hotspot -p PID [-s SECONDS] [--threshold PCT | --top N] [--period CALLS|DURATION]
//	hotspot [options] -- cmd args
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"perfinsp/analysis/a2n"
	"perfinsp/internal/cliutil"
	"perfinsp/libperfutil/events"
	"perfinsp/libperfutil/uprobe"
)

func main() {
	if os.Getenv(calibEnv) == "1" {
		os.Exit(calibrationChild(os.Stdin, os.Stdout))
	}
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	code := 0
	app := newApp(stdout, stderr, &code)
	cliutil.Apply(app)
	// cliutil.Run prints an error as every tool does (a usage error: one
	// line and the pointer to --help); code is the walk's own outcome.
	if rc := cliutil.Run(app, args); rc != 0 {
		return rc
	}
	return code
}

func parsePeriod(s string) (Period, error) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil && n > 0 {
		return Period{Calls: n}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return Period{}, fmt.Errorf("--period %q: want a number of calls (1000) or a duration (500ms, 2s)", s)
	}
	return Period{Duration: d}, nil
}

func newApp(stdout, stderr io.Writer, code *int) *cli.App {
	return &cli.App{
		Name:  "hotspot",
		Usage: "sample a process, then walk up from its hot functions with temporary uprobes: calls, time per call, callers",
		UsageText: "hotspot -p PID [-s SECONDS] [--threshold PCT | --top N] [--period CALLS|DURATION] [--max-overhead PCT] [-m EVENT] [--json FILE]\n" +
			"hotspot [options] -- cmd args\n\n" +
			"Sampling needs perf_event_paranoid <= 2 (own processes); uprobes need root or CAP_PERFMON.\n" +
			"Every probe is a perf event fd: they are removed at each level's end, at exit, on Ctrl-C,\n" +
			"and by the kernel if hotspot dies.",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "pid", Aliases: []string{"p"}, Usage: "the running process `PID` (with its threads and the processes it forks, as they appear)"},
			&cli.Float64Flag{Name: "sample", Aliases: []string{"s"}, Value: 2, Usage: "sample for `SECONDS` (cpu-clock, 1 kHz of CPU time)"},
			&cli.Float64Flag{Name: "threshold", Value: 10, Usage: "hot functions: at least `PCT` percent of the samples"},
			&cli.IntFlag{Name: "top", Usage: "at most `N` hot functions (0: every one above --threshold)"},
			&cli.StringFlag{Name: "period", Value: "1s", Usage: "a level lasts `CALLS` calls of its functions or a DURATION (500ms)"},
			&cli.StringFlag{Name: "max-overhead", Value: "5%", Usage: "keep the target's slowdown under `PCT` percent: every probe trap is charged its measured cost, a window of probes ends before it and its closing would exceed the budget, and the next waits until the target has paid for one like it (0: probes always in place)"},
			&cli.Float64Flag{Name: "duty", Value: 100, Usage: "instead of --max-overhead: probes in place `PCT` percent of a level's time (windows of 100ms)"},
			&cli.DurationFlag{Name: "level-max", Value: 5 * time.Second, Usage: "a level also ends after `DURATION` (a function called rarely, or never again, such as an unnamed main)"},
			&cli.IntFlag{Name: "depth", Value: 16, Usage: "at most `N` levels"},
			&cli.StringFlag{Name: "metric", Aliases: []string{"m"}, Value: "time", Usage: "the metric per call besides the wall time: `EVENT` counted on the thread from entry to return (task-clock, page-faults, context-switches; instructions or cycles where a hardware PMU exists; mpevt -l lists the event table), or time (wall time only)"},
			&cli.StringFlag{Name: "json", Usage: "write the result as JSON to `FILE`"},
			&cli.StringFlag{Name: "folded", Usage: "write folded stacks (flame graph input) to `FILE`"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the text report to `FILE` (default: stdout with -p, stderr beside a command, whose stdout is its own)"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
		},
		Action: func(c *cli.Context) error { return action(c, stdout, stderr, code) },
	}
}

func action(c *cli.Context, stdout, stderr io.Writer, code *int) error {
	metric, err := parseMetric(c.String("metric"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	if d := c.Float64("duty"); d <= 0 || d > 100 {
		return cli.Exit(fmt.Sprintf("--duty %g: want a percentage in (0, 100]", d), 2)
	}
	budget, err := parsePercent(c.String("max-overhead"))
	if err != nil {
		return cli.Exit("--max-overhead: "+err.Error(), 2)
	}
	if c.IsSet("duty") {
		if c.IsSet("max-overhead") {
			return cli.Exit("give --duty or --max-overhead, not both", 2)
		}
		budget = 0 // a fixed duty cycle instead of the budget
	}
	if s := c.Float64("sample"); s <= 0 {
		return cli.Exit(fmt.Sprintf("-s %g: want a sampling time in seconds above 0", s), 2)
	}
	period, err := parsePeriod(c.String("period"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	pid := c.Int("pid")
	argv := c.Args().Slice()
	if (pid > 0) == (len(argv) > 0) {
		return cli.Exit("give either -p PID or -- cmd args (see hotspot --help)", 2)
	}
	if pid > 0 && unix.Kill(pid, 0) == unix.ESRCH {
		return cli.Exit(fmt.Sprintf("process %d does not exist", pid), 1)
	}
	if err := checkOutputs(c); err != nil {
		return cli.Exit(err.Error()+" (nothing was started)", 1)
	}
	pmu, err := uprobe.System()
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	target := "process " + strconv.Itoa(pid)
	var cmd *exec.Cmd
	done := make(chan struct{})
	alive := func() bool { return unix.Kill(pid, 0) == nil }
	if len(argv) > 0 {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return cli.Exit(fmt.Sprintf("start %s: %v", argv[0], err), 127)
		}
		pid = cmd.Process.Pid
		target = strings.Join(argv, " ")
		go func() { _ = cmd.Wait(); close(done) }()
		alive = func() bool {
			select {
			case <-done:
				return false
			default:
				return true
			}
		}
	}
	var exited func() *os.ProcessState // the exit status of a command started here
	if cmd != nil {
		exited = func() *os.ProcessState { <-done; return cmd.ProcessState }
	}
	rep, werr := walk(ctx, pid, target, c, pmu, period, budget, metric, alive, exited, stderr)
	// The command ended before the walk did (or before its mappings could
	// be read: a zombie not yet reaped counts as alive).
	endedFirst := cmd != nil && (!alive() || errors.Is(werr, errExited))
	if rep != nil {
		// The command's stdout is its own: beside a command the report
		// goes to stderr (or -o FILE).
		out := stdout
		if cmd != nil {
			out = stderr
		}
		if err := writeReport(c, rep, out); err != nil && werr == nil {
			werr = err
		}
	}
	if cmd != nil {
		stop() // Ctrl-C from now on goes to the target alone (it shares our terminal)
		signal.Ignore(os.Interrupt, syscall.SIGTERM)
		<-done
		*code = exitCode(cmd.ProcessState)
		if werr != nil && rep == nil && endedFirst {
			// Not a failure: the command was quicker than the sampling.
			fmt.Fprintf(stderr, "hotspot: %s ended before it could be sampled: nothing to report\n", argv[0])
			return nil
		}
		if werr != nil {
			fmt.Fprintln(stderr, "hotspot:", werr)
			if *code == 0 { // the command did its part; hotspot did not
				*code = 1
			}
		}
		if rep != nil && rep.Death != nil {
			fmt.Fprintln(stderr, "hotspot:", rep.Death)
		}
		return nil
	}
	if werr != nil {
		return cli.Exit(werr.Error(), 1)
	}
	if rep != nil && rep.Death != nil {
		return cli.Exit(rep.Death.String(), 1)
	}
	if rep != nil && rep.Stopped == "signal" {
		*code = 130
	}
	return nil
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return 1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// sampleRate is the sampling rate: maxSampleHz, or lower where a sample
// costs more than the budget's aim allows (at least 100 Hz).
func sampleRate(budget, sampleNs float64) int {
	if budget <= 0 || budget >= 100 || sampleNs <= 0 {
		return maxSampleHz
	}
	hz := int(budget / 100 * budgetAim / (sampleNs / 1e9))
	return min(max(hz, 100), maxSampleHz)
}

// parsePercent reads "5", "5%" or "2.5%" as a percentage in [0, 100].
func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v < 0 || v > 100 {
		return 0, fmt.Errorf("%q: want a percentage from 0 to 100 (5%%; 0: no limit)", s)
	}
	return v, nil
}

// parseMetric reads -m: "time" (nil: the wall time only) or an event of
// the event table that this machine can count (checked on hotspot itself,
// so a missing PMU is said before anything starts).
func parseMetric(name string) (*events.Event, error) {
	if name == "time" || name == "" {
		return nil, nil
	}
	ev, err := events.Parse(name)
	if err != nil {
		return nil, fmt.Errorf("-m %s: %w", name, err)
	}
	fd, err := events.Open(ev, 0, -1, events.OpenOpts{})
	if err != nil {
		hint := ""
		if errors.Is(err, events.ErrNoPMU) {
			hint = " (use a software metric here: -m task-clock, page-faults, context-switches)"
		}
		return nil, fmt.Errorf("-m %s: %w%s", name, err, hint)
	}
	unix.Close(fd)
	return &ev, nil
}

func walk(ctx context.Context, pid int, target string, c *cli.Context, pmu uprobe.PMU, period Period, budget float64, metric *events.Event, alive func() bool, exited func() *os.ProcessState, stderr io.Writer) (*Report, error) {
	var cache a2n.Cache
	tree, err := newProcTree(pid, &cache)
	if err != nil {
		return nil, err
	}
	var dw *deathWatch // -p: the signal that kills the target, if one does
	if exited == nil {
		dw = startDeathWatch(tree)
		defer dw.close()
	}
	limits := coreLimit(pid)
	start := time.Now()
	// The costs are measured by a calibration child: a sample's first
	// (it sets the sampling rate within the budget), then a probed call's
	// (the walk's windows) while the sampling step runs.
	// An error, such as uprobes refused, is reported after the sampling.
	meter := newCPUMeter()
	var sr SampleResult
	var rate int
	cal, calErr := calibrate(pmu, func(sampleNs float64) {
		rate = sampleRate(budget, sampleNs)
		sr, err = sampleTarget(ctx, tree, time.Duration(c.Float64("sample")*float64(time.Second)), rate, meter, alive)
	})
	if err != nil {
		return nil, err
	}
	rep := &Report{Target: target, PID: pid, Sample: sr}
	rep.Hot = pickHot(sr, c.Float64("threshold"), c.Int("top"))
	var hot []Func
	for _, h := range rep.Hot {
		if h.NoProbe != "" {
			rep.Notes = append(rep.Notes, fmt.Sprintf("hot %s is not instrumentable: %s", h.Name, h.NoProbe))
			continue
		}
		hot = append(hot, h.Func)
	}
	if sr.Samples == 0 {
		rep.Notes = append(rep.Notes, "no samples: the target and its children used no CPU while sampled")
	}
	if want := c.Float64("sample"); sr.Stretched {
		rep.Notes = append(rep.Notes, fmt.Sprintf("sampled %.2f s, not %g s: the target ran too little for %d samples in %g s (at most %d times -s)", sr.Seconds, want, minSamples, want, stretchSampling))
	}
	if metric != nil {
		rep.Metric = metric.Name
	}
	w := &Walk{PMU: pmu, PID: pid, Period: period, Duty: c.Float64("duty"), Budget: budget, Metric: metric, LevelMax: c.Duration("level-max"), MaxDepth: c.Int("depth"), Alive: alive, tree: tree,
		meter: meter, SampleCostNs: float64(sr.Samples) * cal.SampleNs, watch: dw}
	if !c.Bool("quiet") {
		w.Progress = stderr
	}
	var werr error
	if len(hot) > 0 {
		if calErr != nil {
			werr = calErr
		} else {
			w.Cal = &cal
			rep.Overhead = &Overhead{BudgetPct: budget, Duty: w.Duty, Calibration: cal}
			if w.Progress != nil {
				fmt.Fprintf(w.Progress, "hotspot: a probed call costs %s of CPU here (measured, spread %s; %s with a push first, emulated by the kernel); a sample %s (%d Hz)\n",
					dur(cal.CallNs), dur(cal.SpreadNs), dur(cal.EmulatedNs), dur(cal.SampleNs), rate)
			}
		}
	}
	if werr == nil {
		werr = w.Run(ctx, hot)
	}
	addRootPaths(w.Funcs, sr, tree) // above a caller that never returned: the sampled stacks
	if o := rep.Overhead; o != nil {
		o.ProbedCalls = w.Entries
		o.ProbeCostNs = w.CostNs
		o.Traps = w.Traps
		o.CloseHits = w.CloseHits
		o.EndWaitSec = w.EndWaitSec
		o.Samples, o.SampleCostNs = sr.Samples, w.SampleCostNs
		if w.CPULast > w.CPUStart {
			o.TargetCPUNs = w.CPULast - w.CPUStart
		}
		o.WalkCPUNs = w.meter.ns()
		if own := float64(o.WalkCPUNs) - w.totalCost(); own > 0 {
			o.EstimatedPct = 100 * w.totalCost() / own
		}
	}
	rep.Levels, rep.Funcs, rep.HookHits, rep.Lost = w.Levels, w.Funcs, w.HookHits, w.Lost
	rep.Folded = folded(w.Funcs, rep.Hot)
	rep.Seconds = time.Since(start).Seconds()
	switch {
	case ctx.Err() != nil:
		rep.Stopped = "signal"
	case !alive():
		rep.Stopped = "target exited"
		var ps *os.ProcessState
		if exited != nil {
			ps = exited()
		}
		if rep.Death = deathOf(ps, dw, limits); rep.Death != nil {
			rep.Stopped = "target died"
			rep.Death.During = w.AtDeath
			if rep.Death.During == "" {
				rep.Death.During = "while sampled, before any probe"
			}
			rep.Notes = append(rep.Notes, rep.Death.String())
		}
	}
	if rep.Stopped != "" {
		rep.Notes = append(rep.Notes, "walk stopped early: "+rep.Stopped)
	}
	rep.Notes = append(rep.Notes, cache.Problems()...)
	return rep, werr
}

func writeReport(c *cli.Context, rep *Report, stdout io.Writer) error {
	if p := c.String("json"); p != "" {
		if err := writeFile(p, rep.writeJSON); err != nil {
			return err
		}
	}
	if p := c.String("folded"); p != "" {
		if err := writeFile(p, func(w io.Writer) error {
			for _, l := range rep.Folded {
				if _, err := fmt.Fprintln(w, l); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if p := c.String("output"); p != "" {
		return writeFile(p, func(w io.Writer) error { rep.writeText(w); return nil })
	}
	rep.writeText(stdout)
	return nil
}

// checkOutputs checks, before the walk, that the files of --json,
// --folded and -o can be written: found out after it, its results were
// lost.
func checkOutputs(c *cli.Context) error {
	for _, name := range []string{"json", "folded", "output"} {
		p := c.String(name)
		if p == "" {
			continue
		}
		if err := checkWritable(p); err != nil {
			return fmt.Errorf("--%s %s: %w", name, p, err)
		}
	}
	return nil
}

// checkWritable says why path could not be created or written, if so.
func checkWritable(path string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return errors.New("is a directory: name a file")
		}
		if err := unix.Access(path, unix.W_OK); err != nil {
			return fmt.Errorf("cannot write it: %w", err)
		}
		return nil
	}
	dir := filepath.Dir(path)
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cannot create it in %s: %w", dir, err)
	}
	return nil
}
