// Command hookit writes the call-flow reports from what libhookit.so
// recorded (scripts/run.hookit runs it after the program). See
// docs/callflow.md.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"perfinsp/analysis/callflow"
	"perfinsp/internal/cliutil"
	"perfinsp/internal/outdir"
)

func main() {
	os.Exit(cliutil.Run(newApp(), os.Args))
}

func newApp() *cli.App {
	app := &cli.App{
		Name:  "hookit",
		Usage: "call-flow reports from libhookit's per-thread files",
		Description: "A program built with -finstrument-functions and run with bin/libhookit.so preloaded\n" +
			"(scripts/run.hookit does both) leaves hookit-PID-TID.bin, hookit-PID.info, hookit-PID.maps (and\n" +
			"hookit-PID.names from agents using hookit_api.h) in its directory. `hookit report` turns them into log-rt (the calibrated call tree), log-gen (flat),\n" +
			"callflow.pb.gz (go tool pprof), callflow.folded (flamegraph.pl; within --folded-max) and, with --chrome, callflow.trace.json\n" +
			"(every call on a wall-clock timeline: ui.perfetto.dev). With several processes, the files of each end in .PID.",
		Commands: []*cli.Command{{
			Name:  "report",
			Usage: "write the reports",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "i", Aliases: []string{"in"}, Value: ".", Usage: "directory with the hookit files"},
				&cli.StringFlag{Name: "o", Aliases: []string{"out"}, Usage: "directory for the reports (default: the input directory)"},
				&cli.StringFlag{Name: "cal", Value: "startup", Usage: "calibration: startup (t_I and t_O measured at start-up), minima (the run's sequence minima, two-pass: exact where the metric is exact, e.g. -icount) or none (the raw metric)"},
				&cli.StringFlag{Name: "train", Usage: "write this run's sequence minima to `FILE` (a trainer run: merged with --minima's table if given); later runs load it with --minima"},
				&cli.StringFlag{Name: "minima", Usage: "load trained sequence minima from `FILE` (written by --train with the same metric) and calibrate with them merged with this run's (per key the lower); implies --cal minima with the file's key width"},
				&cli.StringFlag{Name: "env", Usage: "the environmental overhead (PI's paper §4.2): the `ARC` report (post -arc, scripts/run.itrace) of the uninstrumented trainer; with the sequence minima, each interval loses min - env instead of min"},
				&cli.BoolFlag{Name: "chrome", Usage: "also write callflow.trace.json: every call as a slice on a wall-clock timeline (Chrome trace-event JSON for ui.perfetto.dev; about 160 bytes per call)"},
				&cli.StringFlag{Name: "plain-cpu", Usage: "the CPU time (user + system) of the same work run uninstrumented (`DURATION`, e.g. 55.2ms or 55200000ns; hookit plain measures it): log-gen then gives the residual per call and counts it in ERR"},
				&cli.StringFlag{Name: "folded-max", Value: "64M", Usage: "keep callflow.folded within `SIZE` bytes (K, M, G: times 1024; 0: no bound, every call path a line): past it the lightest call paths are counted in their callers' lines, totals exact (flamegraph.pl and speedscope choke on inputs larger than the default)"},
				&cli.StringFlag{Name: "seq-key", Value: "8x3", Usage: "sequence-minima key width TYPESxTRANSITIONS: 8x3 (PI: 8 method types x entry/exit/exception exit), 6x2 (the 6 Java types x entry/exit) or 1x2 (transitions only)"},
			},
			Action: report,
		}, checkCommand, plainCommand},
	}
	cliutil.Apply(app)
	return app
}

// checkReportOptions refuses a wrong --cal, --seq-key or --plain-cpu
// before anything is read or written (--train's file included).
func checkReportOptions(c *cli.Context) error {
	switch cal := c.String("cal"); cal {
	case "startup", "minima", "none":
	default:
		return cliutil.UsageError(c, fmt.Sprintf("--cal %q: use minima, startup or none", cal))
	}
	if _, err := callflow.ParseSeqKey(c.String("seq-key")); err != nil {
		return cliutil.UsageError(c, "--seq-key: "+err.Error())
	}
	if s := c.String("plain-cpu"); s != "" {
		if d, err := time.ParseDuration(s); err != nil || d <= 0 {
			return cliutil.UsageError(c, fmt.Sprintf("--plain-cpu %q: give a duration such as 55.2ms", s))
		}
	}
	return nil
}

func report(c *cli.Context) error {
	if err := checkReportOptions(c); err != nil {
		return err
	}
	in := c.String("i")
	out := c.String("o")
	if out == "" {
		out = in
	}
	foldedMax, err := cliutil.ParseSize(c.String("folded-max"))
	if err != nil {
		return cliutil.UsageError(c, "--folded-max: "+err.Error())
	}
	procs, err := callflow.Load(in)
	if err != nil {
		return err
	}
	od, err := outdir.Open(out)
	if err != nil {
		return fmt.Errorf("the report directory: %w", err)
	}
	defer od.Close()
	var trained *callflow.Minima
	var trainedMetric string
	if path := c.String("minima"); path != "" {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("opening the minima file: %w", err)
		}
		trained, trainedMetric, err = callflow.ReadMinima(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	for _, p := range procs {
		if path := c.String("train"); path != "" {
			if err := writeTraining(path, p, c.String("seq-key"), trained, trainedMetric); err != nil {
				return err
			}
		}
		var a *callflow.Analysis
		cal := c.String("cal")
		if trained != nil {
			cal = "trained"
		}
		switch cal {
		case "trained":
			ca, err := callflow.TrainedCalibration(p, trained, trainedMetric)
			if err != nil {
				return fmt.Errorf("%s: %w", c.String("minima"), err)
			}
			a = callflow.AnalyzeWith(p, ca)
		case "minima":
			k, err := callflow.ParseSeqKey(c.String("seq-key"))
			if err != nil {
				return err
			}
			a = callflow.AnalyzeWith(p, callflow.MinimaCalibration(p, k))
		case "startup":
			a = callflow.Analyze(p)
		case "none":
			a = callflow.AnalyzeWith(p, callflow.Calibration{})
		default:
			return fmt.Errorf("--cal %q: use minima, startup or none", c.String("cal"))
		}
		if path := c.String("env"); path != "" {
			if a.Cal.Minima == nil {
				return fmt.Errorf("--env applies to the sequence minima: add --cal minima (or --minima FILE)")
			}
			env, err := callflow.LoadEnv(path, p, a.Cal.Minima.Key)
			if err != nil {
				return err
			}
			cal := a.Cal
			cal.Minima.Env = env
			a = callflow.AnalyzeWith(p, cal)
		}
		if s := c.String("plain-cpu"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return fmt.Errorf("--plain-cpu %q: give a duration such as 55.2ms", s)
			}
			if len(procs) > 1 {
				return fmt.Errorf("--plain-cpu: %d processes in %s; the uninstrumented run's CPU time compares with one", len(procs), in)
			}
			if err := a.SetPlain(float64(d.Nanoseconds())); err != nil {
				return fmt.Errorf("--plain-cpu: %w", err)
			}
		}
		suffix := ""
		if len(procs) > 1 {
			suffix = fmt.Sprintf(".%d", p.Info.PID)
		}
		var cut callflow.FoldedCut
		files := []struct {
			name  string
			write func(*os.File) error
		}{
			{"log-rt", func(f *os.File) error { return a.WriteLogRT(f) }},
			{"log-gen", func(f *os.File) error { return a.WriteLogGen(f) }},
			{"callflow.folded", func(f *os.File) (err error) { cut, err = a.WriteFoldedMax(f, foldedMax); return err }},
			{"callflow.pb.gz", func(f *os.File) error { return a.WritePprof(f) }},
		}
		if c.Bool("chrome") {
			files = append(files, struct {
				name  string
				write func(*os.File) error
			}{"callflow.trace.json", func(f *os.File) error { return a.WriteChrome(f) }})
		}
		if a.Err != nil {
			fmt.Fprintf(os.Stderr, "hookit: warning: %v: the reports cover what was read\n", a.Err)
		}
		for _, fl := range files {
			f, err := od.Create(fl.name + suffix)
			if err != nil {
				return err
			}
			path := f.Name()
			werr := fl.write(f)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				return fmt.Errorf("%s: %w", path, werr)
			}
		}
		if note := foldedNote("callflow.folded"+suffix, cut, foldedMax); note != "" {
			fmt.Fprintf(os.Stderr, "hookit: %s\n", note)
		}
		fmt.Printf("hookit: pid %d (%s): %d threads, total BASE %d %s: %s\n", p.Info.PID, filepath.Base(p.Info.Exe),
			len(p.Threads), a.Total(), p.Info.Metric, filepath.Join(out, "log-rt"+suffix))
	}
	return nil
}

// writeTraining writes the sequence minima of p (merged with a loaded
// table) to path.
func writeTraining(path string, p *callflow.Process, key string, trained *callflow.Minima, metric string) error {
	k, err := callflow.ParseSeqKey(key)
	if err != nil {
		return err
	}
	if trained != nil {
		k = trained.Key
		if metric != p.Info.Metric {
			return fmt.Errorf("--train: the loaded minima are of metric %s, this run used %s", metric, p.Info.Metric)
		}
	}
	m := callflow.SequenceMinima(p.Threads, k)
	if err := m.Merge(trained); err != nil {
		return err
	}
	f, err := outdir.CreateFile(path)
	if err != nil {
		return fmt.Errorf("the training file: %w", err)
	}
	werr := callflow.WriteMinima(f, m, p.Info.Metric)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("%s: %w", path, werr)
	}
	fmt.Printf("hookit: sequence minima of pid %d (%d keys, %s) written to %s\n", p.Info.PID, len(m.Min), k, path)
	return nil
}
