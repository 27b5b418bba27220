// Command hookit writes the call-flow reports from what libhookit.so
// recorded (scripts/run.hookit runs it after the program). See
// docs/callflow.md.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"perfinsp/libperfutil/callflow"
)

func main() {
	app := &cli.App{
		Name:  "hookit",
		Usage: "call-flow reports from libhookit's per-thread files",
		Description: "A program built with -finstrument-functions and run with bin/libhookit.so preloaded\n" +
			"(scripts/run.hookit does both) leaves hookit-PID-TID.bin, hookit-PID.info, hookit-PID.maps (and\n" +
			"hookit-PID.names from agents using hookit_api.h) in its directory. `hookit report` turns them into log-rt (the calibrated call tree), log-gen (flat),\n" +
			"callflow.pb.gz (go tool pprof), callflow.folded (flamegraph.pl) and callflow.trace.json\n" +
			"(ui.perfetto.dev). With several processes, the files of each end in .PID.",
		Commands: []*cli.Command{{
			Name:  "report",
			Usage: "write the reports",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "i", Aliases: []string{"in"}, Value: ".", Usage: "directory with the hookit files"},
				&cli.StringFlag{Name: "o", Aliases: []string{"out"}, Usage: "directory for the reports (default: the input directory)"},
				&cli.StringFlag{Name: "cal", Value: "startup", Usage: "calibration: startup (t_I and t_O measured at start-up), minima (the run's sequence minima, two-pass: exact where the metric is exact, e.g. -icount) or none (the raw metric)"},
				&cli.StringFlag{Name: "seq-key", Value: "8x3", Usage: "sequence-minima key width TYPESxTRANSITIONS: 8x3 (PI: 8 method types x entry/exit/exception exit), 6x2 (seed 000: the 6 Java types x entry/exit) or 1x2 (transitions only)"},
			},
			Action: report,
		}},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "hookit:", err)
		os.Exit(1)
	}
}

func report(c *cli.Context) error {
	in := c.String("i")
	out := c.String("o")
	if out == "" {
		out = in
	}
	procs, err := callflow.Load(in)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("creating the report directory: %w", err)
	}
	for _, p := range procs {
		var a *callflow.Analysis
		switch c.String("cal") {
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
		suffix := ""
		if len(procs) > 1 {
			suffix = fmt.Sprintf(".%d", p.Info.PID)
		}
		files := []struct {
			name  string
			write func(*os.File) error
		}{
			{"log-rt", func(f *os.File) error { return a.WriteLogRT(f) }},
			{"log-gen", func(f *os.File) error { return a.WriteLogGen(f) }},
			{"callflow.folded", func(f *os.File) error { return a.WriteFolded(f) }},
			{"callflow.pb.gz", func(f *os.File) error { return a.WritePprof(f) }},
			{"callflow.trace.json", func(f *os.File) error { return a.WriteChrome(f) }},
		}
		for _, fl := range files {
			path := filepath.Join(out, fl.name+suffix)
			f, err := os.Create(path)
			if err != nil {
				return fmt.Errorf("creating %s: %w", path, err)
			}
			werr := fl.write(f)
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				return fmt.Errorf("%s: %w", path, werr)
			}
		}
		fmt.Printf("hookit: pid %d (%s): %d threads, total BASE %d %s: %s\n", p.Info.PID, filepath.Base(p.Info.Exe),
			len(p.Threads), a.Total(), p.Info.Metric, filepath.Join(out, "log-rt"+suffix))
	}
	return nil
}
