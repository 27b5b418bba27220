package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"perfinsp/libperfutil/control"

	"perfinsp/libperfutil/itrace"
)

// itraceCommand is `swtrace itrace on|off`: ITrace through the pitrace
// module's single-step tracer, or pitraced's ptrace tracer without it.
var itraceCommand = &cli.Command{
	Name:      "itrace",
	Usage:     "instruction tracing (ITrace) of selected processes: on | off | status",
	UsageText: "swtrace itrace on [-p PID ...] [--pids-from N] [-f] [--step auto|single|verify] [PID ...]\n   swtrace itrace off [-p PID ...] [PID ...]\n   swtrace itrace status",
	Description: "ITrace records every taken branch of the selected threads (and each system call and\n" +
		"signal) into the trace buffers: turn tracing on first (swtrace on), then itrace on; itrace\n" +
		"off (or swtrace off) stops it; post -arc, -itrace and --callgrind FILE report it.\n" +
		"With the pitrace module loaded the module single-steps the threads (trap flag); without\n" +
		"it the daemon does with ptrace, about 20 times slower still (it block-steps, one trap per taken\n" +
		"branch, where the CPU honours BTF: --step). You may trace your own processes\n" +
		"(same user, no capabilities, dumpable); root may trace any. Without the module the\n" +
		"tracer runs with your rights (a setuid program a traced process execs runs without its\n" +
		"privileges), only into a trace you turned on, at most 16 sessions per user. See docs/itrace.md.",
	Subcommands: []*cli.Command{
		{
			Name:      "on",
			Usage:     "start tracing processes (all their threads)",
			UsageText: "swtrace itrace on [-p PID ...] [--pids-from N] [-f] [--max-insns N] [--step auto|single|verify] [PID ...]",
			Flags: []cli.Flag{
				&cli.IntSliceFlag{Name: "p", Aliases: []string{"pid"}, Usage: "trace process `PID` (repeat for more; bare PIDs also work)"},
				&cli.IntFlag{Name: "pids-from", Usage: "trace every process with a pid >= `N` that exists now (PI's lowest pid)"},
				&cli.BoolFlag{Name: "f", Aliases: []string{"follow"}, Usage: "also trace the children the traced processes fork"},
				&cli.BoolFlag{Name: "at-exec", Usage: "attach now, trace from the processes' next exec (what run.itrace uses)"},
				&cli.Uint64Flag{Name: "max-insns", Usage: "end the session once it traced `N` user instructions; the processes run on untraced (pitraced's tracer only)"},
				&cli.StringFlag{Name: "step", Value: "auto", Usage: "`HOW` threads are stepped: auto block-steps (a trap per taken branch, BTF) " +
					"where the CPU honours it; where not (TCG and most hypervisors ignore BTF: found on the first blocks, said at " +
					"itrace off and in the daemon log) it breakpoint-steps (straight lines run natively to a hardware breakpoint " +
					"before the branches that need the registers: fewer stops than taken branches), or single-steps without debug registers; breakpoint always " +
					"breakpoint-steps; single always single-steps; verify single-steps and also " +
					"decodes every block as block-stepping would, reporting disagreements at itrace off (a check of the decoder)"},
			},
			Action: cmdITraceOn,
		},
		{
			Name:      "off",
			Usage:     "stop tracing (the selected processes, or every session you started)",
			UsageText: "swtrace itrace off [-p PID ...] [PID ...]",
			Flags: []cli.Flag{
				&cli.IntSliceFlag{Name: "p", Aliases: []string{"pid"}, Usage: "stop the session tracing `PID`"},
			},
			Action: cmdITraceOff,
		},
		{
			Name:      "status",
			Usage:     "what your sessions have traced so far (instructions, records), while they run (pitraced's tracer)",
			UsageText: "swtrace itrace status",
			Action:    cmdITraceStatus,
		},
	},
}

func cmdITraceStatus(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return usageErr(c, "itrace status takes no arguments")
	}
	if err := itraceBackend(c); err != nil {
		return err
	}
	r, err := itrace.Status()
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "itrace: %d sessions running (%d threads), %d ended; %d instructions, %d records so far\n",
		r.Sessions, r.Threads, r.Ended, r.Instructions, r.Records)
	return nil
}

func itracePIDs(c *cli.Context) ([]int, error) {
	pids := append([]int(nil), c.IntSlice("p")...)
	for _, a := range c.Args().Slice() {
		n, err := strconv.Atoi(a)
		if err != nil || n <= 0 {
			return nil, usageErr(c, "%q is not a process id", a)
		}
		pids = append(pids, n)
	}
	return pids, nil
}

// itraceBackend makes --backend apply to ITrace as well: the pitrace
// module when it is loaded (or forced), else pitraced's ptrace tracer.
func itraceBackend(c *cli.Context) error {
	b := c.String("backend")
	if b != "" && b != "auto" {
		if err := os.Setenv(control.EnvBackend, b); err != nil {
			return fmt.Errorf("itrace: %w", err)
		}
	}
	_, err := itrace.Backend("")
	return err
}

func cmdITraceOn(c *cli.Context) error {
	pids, err := itracePIDs(c)
	if err != nil {
		return err
	}
	if len(pids) == 0 && c.Int("pids-from") <= 0 {
		return usageErr(c, "say what to trace: -p PID, a pid list, or --pids-from N")
	}
	step, err := itraceStep(c)
	if err != nil {
		return err
	}
	if err := itraceBackend(c); err != nil {
		return err
	}
	r, err := itrace.On(itrace.OnArgs{PIDs: pids, PIDsFrom: c.Int("pids-from"), Follow: c.Bool("f"), AtExec: c.Bool("at-exec"), Step: step, MaxInsns: c.Uint64("max-insns")})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "itrace on: session %d, %d threads\n", r.Session, r.Threads)
	if len(r.Skipped) > 0 {
		fmt.Fprintf(c.App.Writer, "itrace: %d processes left out (first: %s)\n", len(r.Skipped), r.Skipped[0])
	}
	return nil
}

func cmdITraceOff(c *cli.Context) error {
	pids, err := itracePIDs(c)
	if err != nil {
		return err
	}
	if err := itraceBackend(c); err != nil {
		return err
	}
	r, err := itrace.Off(itrace.OffArgs{PIDs: pids})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "itrace off: %d sessions, %d threads, %d instructions, %d records\n", r.Sessions, r.Threads, r.Instructions, r.Records)
	if r.ThreadsLeftOut > 0 {
		fmt.Fprintf(c.App.Writer, "itrace: %d threads created past the limit of threads per session ran untraced\n", r.ThreadsLeftOut)
	}
	if r.LimitReached {
		fmt.Fprintf(c.App.Writer, "itrace: the session ended at its --max-insns limit; the processes ran on untraced\n")
	}
	if s := r.Stepping(); s != "" {
		fmt.Fprintf(c.App.Writer, "itrace stepping: %s\n", s)
	}
	return nil
}

// itraceStep reads --step: auto (block-step where honoured, else breakpoint
// stepping where debug registers work), breakpoint, single or verify.
func itraceStep(c *cli.Context) (itrace.Step, error) {
	switch s := c.String("step"); s {
	case "auto", "":
		return itrace.StepAuto, nil
	case string(itrace.StepSingle), string(itrace.StepVerify), string(itrace.StepBreakpoint):
		return itrace.Step(s), nil
	default:
		return "", usageErr(c, "--step %q: say auto, breakpoint, single or verify", s)
	}
}
