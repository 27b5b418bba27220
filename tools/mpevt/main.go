// Command mpevt lists the events this machine can count and counts them
// per thread or per CPU, printing them per interval (PI's mpevt). Event
// names come from the project's one table, libperfutil/events: the names
// swtrace setrate -e and ptt on -m take. See docs/hwevents.md.
//
//	mpevt -l                                   what this machine can count
//	mpevt -e task-clock,context-switches -p PID
//	mpevt -e cycles,instructions -a -i 1
//	mpevt -e page-faults -- ./prog args
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"perfinsp/internal/cliutil"
	"perfinsp/libperfutil/events"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	cliutil.Apply(app)
	return cliutil.Run(app, args)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:  "mpevt",
		Usage: "list the events this machine can count, and count them per thread or per CPU",
		UsageText: "mpevt -l [--pfm]\n" +
			"mpevt -e EVENT[,EVENT...] (-p PID | -a | -- cmd args) [-i SECONDS] [-d SECONDS] [--per]\n\n" +
			"EVENT: a name of mpevt -l (cycles, task-clock, L1-dcache-load-misses ...), rHEX (raw),\n" +
			"pmu/term=value,.../ (decoded through /sys/bus/event_source/devices/PMU/format),\n" +
			"subsys:tracepoint, with :u or :k for user or kernel only; pfm:PMU::EVENT[:UMASK] is\n" +
			"encoded by libpfm4 where it is installed (mpevt -l --pfm lists its names).",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "list", Aliases: []string{"l"}, Usage: "list the events this machine can count"},
			&cli.BoolFlag{Name: "pfm", Usage: "with -l: every event of libpfm4's tables for this machine's PMUs (where libpfm4 is installed)"},
			&cli.StringFlag{Name: "events", Aliases: []string{"e"}, Usage: "comma-separated `EVENTS` to count"},
			&cli.IntFlag{Name: "pid", Aliases: []string{"p"}, Usage: "count the threads of process `PID` (until it exits, -d, or Ctrl-C)"},
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "count every CPU (until -d, Ctrl-C, or the command ends)"},
			&cli.Float64Flag{Name: "interval", Aliases: []string{"i"}, Usage: "print the counts every `SECONDS`"},
			&cli.Float64Flag{Name: "duration", Aliases: []string{"d"}, Usage: "stop after `SECONDS`"},
			&cli.BoolFlag{Name: "per", Usage: "one line per thread (or per CPU with -a) besides the total"},
		},
		Action: func(c *cli.Context) error {
			if c.Bool("list") {
				return list(stdout, c.Bool("pfm"))
			}
			return count(c, stdout)
		},
	}
}

// parseEvents parses a comma list with the project's event table, and
// pfm:PMU::EVENT[:UMASK...] names with libpfm4 where it is installed.
func parseEvents(list string) ([]events.Event, error) {
	items := events.SplitList(list)
	if len(items) == 0 {
		return nil, &events.Error{Input: list, Reason: "no event given"}
	}
	var out []events.Event
	for _, it := range items {
		var e events.Event
		var err error
		if name, ok := strings.CutPrefix(it, "pfm:"); ok {
			e, err = pfmEncode(it, name)
		} else {
			e, err = events.Parse(it)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// ParseTarget validates the flags shared with cpi and builds a Spec.
func parseTarget(c *cli.Context, evs []events.Event) (events.Spec, error) {
	spec := events.Spec{Events: evs, PID: c.Int("pid"), All: c.Bool("all"), Cmd: c.Args().Slice()}
	if c.Float64("interval") < 0 || c.Float64("duration") < 0 {
		return spec, cli.Exit("-i and -d take a positive number of seconds", 2)
	}
	spec.Interval = time.Duration(c.Float64("interval") * float64(time.Second))
	spec.Duration = time.Duration(c.Float64("duration") * float64(time.Second))
	if c.IsSet("interval") && spec.Interval < 10*time.Millisecond {
		return spec, cli.Exit("-i: the interval must be at least 0.01 s", 2)
	}
	if spec.PID < 0 {
		return spec, cli.Exit(fmt.Sprintf("-p %d: not a process id", spec.PID), 2)
	}
	if spec.PID == 0 && !spec.All && len(spec.Cmd) == 0 {
		return spec, cli.Exit("nothing to count: give -p PID, -a (every CPU) or a command after --", 2)
	}
	if spec.PID > 0 && (spec.All || len(spec.Cmd) > 0) {
		return spec, cli.Exit("-p cannot be combined with -a or a command", 2)
	}
	return spec, nil
}

func count(c *cli.Context, stdout io.Writer) error {
	if c.String("events") == "" {
		return cli.Exit("no events: give -e EVENT[,EVENT...]; mpevt -l lists them", 2)
	}
	evs, err := parseEvents(c.String("events"))
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	spec, err := parseTarget(c, evs)
	if err != nil {
		return err
	}
	caught := make(chan os.Signal, 1)
	if len(spec.Cmd) > 0 {
		stdout = c.App.ErrWriter // beside a command, as perf stat: its stdout is its own
		// Ctrl-C or SIGTERM ends the count and the command without its
		// exit status: the exit code is then 128+signal.
		signal.Notify(caught, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(caught)
	}
	per := c.Bool("per")
	exit := 0
	var prev [][]events.Reading
	err = events.Measure(spec, func(s events.Sample) error {
		if !s.Final || spec.Interval > 0 {
			printInterval(stdout, evs, s, prev, per)
		}
		if s.Final {
			printTotals(stdout, evs, s, per)
			exit = s.ExitCode
		}
		prev = s.Readings
		return nil
	})
	if err != nil {
		return err
	}
	if exit == 0 {
		exit = interruptedCode(caught)
	}
	if exit != 0 {
		return cli.Exit("", exit)
	}
	return nil
}

// interruptedCode is 128+signal when a signal was caught, else 0.
func interruptedCode(caught <-chan os.Signal) int {
	select {
	case s := <-caught:
		if n, ok := s.(syscall.Signal); ok {
			return 128 + int(n)
		}
		return 1
	default:
		return 0
	}
}

// printInterval prints what each event counted since the last report:
// "TIME VALUE UNIT EVENT [WHO]".
func printInterval(w io.Writer, evs []events.Event, s events.Sample, prev [][]events.Reading, per bool) {
	delta := func(i, j int) uint64 {
		r := s.Readings[i][j]
		if prev != nil {
			r = r.Sub(prev[i][j])
		}
		return r.Scaled()
	}
	for i, e := range evs {
		var total uint64
		for j := range s.Units {
			total += delta(i, j)
		}
		fmt.Fprintf(w, "%10.3f %18d %-12s %s\n", s.Elapsed.Seconds(), total, unitOf(e), e.Name)
		if per {
			for j, u := range s.Units {
				fmt.Fprintf(w, "%10.3f %18d %-12s %s  %s\n", s.Elapsed.Seconds(), delta(i, j), unitOf(e), e.Name, u.Label())
			}
		}
	}
}

// printTotals prints the counts over the whole run: "VALUE UNIT EVENT [WHO]".
func printTotals(w io.Writer, evs []events.Event, s events.Sample, per bool) {
	fmt.Fprintf(w, "# mpevt: totals over %.3f s, %d %s\n", s.Elapsed.Seconds(), len(s.Units), unitsWord(s.Units))
	for i, e := range evs {
		note := ""
		if s.Multiplexed(i) {
			note = "  (scaled: the counter was multiplexed)"
		}
		fmt.Fprintf(w, "%18d %-12s %s%s\n", s.Total(i), unitOf(e), e.Name, note)
		if per {
			for j, u := range s.Units {
				fmt.Fprintf(w, "%18d %-12s %s  %s\n", s.Readings[i][j].Scaled(), unitOf(e), e.Name, u.Label())
			}
		}
	}
}

func unitsWord(us []events.Unit) string {
	if len(us) > 0 && us[0].CPU >= 0 {
		return "CPU(s)"
	}
	return "thread(s)"
}

func unitOf(e events.Event) string {
	if e.Unit != "" {
		return e.Unit
	}
	return "events"
}

// list prints what this machine can count.
func list(w io.Writer, pfmAll bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hw := events.HasPMU()
	section := func(title string, kinds ...events.Kind) {
		fmt.Fprintln(tw, title)
		for _, e := range events.List() {
			match := false
			for _, k := range kinds {
				match = match || e.Kind == k
			}
			if !match {
				continue
			}
			state := "ok"
			if fd, err := events.Open(e, 0, -1, events.OpenOpts{Disabled: true}); err != nil {
				state = "not here"
				if errors.Is(err, events.ErrNoPMU) {
					state = "no PMU"
				}
			} else {
				_ = closeFD(fd)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.Name, state, e.Unit, e.Help)
		}
	}
	if hw {
		section("Hardware events (a hardware PMU is present):", events.KindHardware)
	} else {
		section("Hardware events (no hardware PMU on this machine: not countable here):", events.KindHardware)
	}
	section("Software events:", events.KindSoftware)
	section("Hardware cache events (PERF_TYPE_HW_CACHE):", events.KindCache)
	fmt.Fprintln(tw, "Raw events:")
	fmt.Fprintln(tw, "  rHEX\t\t\tPERF_TYPE_RAW with config HEX (the CPU's event select), e.g. r01c2")
	tw.Flush()

	pmus, err := events.System.PMUs()
	fmt.Fprintf(w, "PMUs in %s (use as pmu/term=value,.../ or pmu/event/):\n", events.System.Devices)
	if err != nil {
		fmt.Fprintf(w, "  (cannot list: %v)\n", err)
	}
	for _, p := range pmus {
		kind := "software"
		if p.Hardware {
			kind = "hardware"
		}
		fmt.Fprintf(w, "  %s (type %d, %s)\n", p.Name, p.Type, kind)
		if len(p.Formats) > 0 {
			var fs []string
			for _, n := range p.FormatNames() {
				fs = append(fs, n+"="+p.Formats[n].Spec)
			}
			fmt.Fprintf(w, "    formats: %s\n", strings.Join(fs, ", "))
		}
		names := p.EventNames()
		for _, n := range names {
			fmt.Fprintf(w, "    %s/%s/\t= %s\n", p.Name, n, p.Events[n])
		}
	}
	fmt.Fprintln(w, "Tracepoints: subsys:event (for example sched:sched_switch); the list is in tracefs events/.")
	listPfm(w, pfmAll)
	return nil
}

// listPfm prints libpfm4's view of this machine when the library is there.
func listPfm(w io.Writer, all bool) {
	pmus, err := pfmPMUs(all)
	if err != nil {
		fmt.Fprintf(w, "libpfm4: %v\n", err)
		return
	}
	fmt.Fprintf(w, "libpfm4 tables (%s; count them as mpevt -e pfm:PMU::EVENT[:UMASK]):\n", pfmLibName)
	sort.Slice(pmus, func(i, j int) bool { return pmus[i].Name < pmus[j].Name })
	for _, p := range pmus {
		fmt.Fprintf(w, "  %s\t%s: %d events, %d counters\n", p.Name, p.Desc, p.NEvents, p.NCounters)
		for _, e := range p.Events {
			fmt.Fprintf(w, "    %s::%s\t%s\n", p.Name, e.Name, e.Desc)
		}
	}
	if !all {
		fmt.Fprintln(w, "  (mpevt -l --pfm lists their events)")
	}
}

func closeFD(fd int) error { return unix.Close(fd) }
