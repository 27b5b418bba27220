// Command cpi prints cycles, instructions and cycles per instruction (PI's
// cpi) of a process and each of its threads, of a command, or of every CPU.
// It needs a hardware PMU; without one it says so in one line and exits 1.
// See docs/hwevents.md.
//
//	cpi -p PID [-i SECONDS]     per thread and total, until the process exits
//	cpi -a -i 1 -d 10           per CPU and total
//	cpi -- ./prog args          the command and its children
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"perfinsp/internal/cliutil"

	"perfinsp/libperfutil/events"
)

// errNoPMU is the whole output on a machine without hardware counters.
const errNoPMU = "no hardware PMU on this machine: cpi needs cycles and instructions"

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr, events.HasPMU))
}

func run(args []string, stdout, stderr io.Writer, hasPMU func() bool) int {
	app := newApp(stdout, stderr, hasPMU)
	cliutil.Apply(app)
	return cliutil.Run(app, args)
}

func newApp(stdout, stderr io.Writer, hasPMU func() bool) *cli.App {
	return &cli.App{
		Name:  "cpi",
		Usage: "cycles, instructions and cycles per instruction of a process (per thread), a command, or every CPU",
		UsageText: "cpi -p PID [-i SECONDS] [-d SECONDS]\n" +
			"cpi -a [-i SECONDS] [-d SECONDS]\n" +
			"cpi [-i SECONDS] -- cmd args\n\n" +
			"Needs a hardware PMU (perf's cycles and instructions); see mpevt -l.",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "pid", Aliases: []string{"p"}, Usage: "the threads of process `PID`, until it exits"},
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "every CPU, until -d or Ctrl-C"},
			&cli.Float64Flag{Name: "interval", Aliases: []string{"i"}, Usage: "print every `SECONDS`"},
			&cli.Float64Flag{Name: "duration", Aliases: []string{"d"}, Usage: "stop after `SECONDS`"},
		},
		Action: func(c *cli.Context) error { return cpi(c, stdout, hasPMU) },
	}
}

func cpi(c *cli.Context, stdout io.Writer, hasPMU func() bool) error {
	if c.Float64("interval") < 0 || c.Float64("duration") < 0 {
		return cli.Exit("-i and -d take a positive number of seconds", 2)
	}
	spec := events.Spec{
		PID: c.Int("pid"), All: c.Bool("all"), Cmd: c.Args().Slice(),
		Interval: time.Duration(c.Float64("interval") * float64(time.Second)),
		Duration: time.Duration(c.Float64("duration") * float64(time.Second)),
	}
	if spec.PID == 0 && !spec.All && len(spec.Cmd) == 0 {
		return cli.Exit("nothing to measure: give -p PID, -a (every CPU) or a command after --", 2)
	}
	if spec.PID < 0 {
		return cli.Exit(fmt.Sprintf("-p %d: not a process id", spec.PID), 2)
	}
	if spec.PID > 0 && (spec.All || len(spec.Cmd) > 0) {
		return cli.Exit("-p cannot be combined with -a or a command", 2)
	}
	if c.IsSet("interval") && spec.Interval < 10*time.Millisecond {
		return cli.Exit("-i: the interval must be at least 0.01 s", 2)
	}
	if !hasPMU() {
		return cli.Exit(errNoPMU, 1)
	}
	for _, n := range []string{"cycles", "instructions"} {
		e, _ := events.Lookup(n)
		spec.Events = append(spec.Events, e)
	}
	if len(spec.Cmd) > 0 {
		stdout = c.App.ErrWriter // beside a command, as perf stat: its stdout is its own
	}
	fmt.Fprintf(stdout, "%10s %18s %18s %8s  %s\n", "TIME", "CYCLES", "INSTRUCTIONS", "CPI", "WHO")
	var prev [][]events.Reading
	exit := 0
	err := events.Measure(spec, func(s events.Sample) error {
		if !s.Final || spec.Interval > 0 {
			printRows(stdout, fmt.Sprintf("%10.3f", s.Elapsed.Seconds()), s, prev)
		}
		if s.Final {
			fmt.Fprintf(stdout, "# totals over %.3f s\n", s.Elapsed.Seconds())
			printRows(stdout, fmt.Sprintf("%10s", "total"), s, nil)
			exit = s.ExitCode
		}
		prev = s.Readings
		return nil
	})
	if errors.Is(err, events.ErrNoPMU) {
		return cli.Exit(errNoPMU, 1)
	}
	if err != nil {
		return err
	}
	if exit != 0 {
		return cli.Exit("", exit)
	}
	return nil
}

// printRows prints the total and, with more than one thread or CPU, one
// row each; since prev when given (an interval), else since the start.
func printRows(w io.Writer, when string, s events.Sample, prev [][]events.Reading) {
	val := func(ev, j int) uint64 {
		r := s.Readings[ev][j]
		if prev != nil {
			r = r.Sub(prev[ev][j])
		}
		return r.Scaled()
	}
	row := func(cyc, ins uint64, who string) {
		ratio := "-"
		if ins > 0 {
			ratio = fmt.Sprintf("%.3f", float64(cyc)/float64(ins))
		}
		fmt.Fprintf(w, "%s %18d %18d %8s  %s\n", when, cyc, ins, ratio, who)
	}
	var tc, ti uint64
	for j := range s.Units {
		tc += val(0, j)
		ti += val(1, j)
	}
	row(tc, ti, "all")
	if len(s.Units) > 1 {
		for j, u := range s.Units {
			row(val(0, j), val(1, j), u.Label())
		}
	}
}
