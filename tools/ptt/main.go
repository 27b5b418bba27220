// Command ptt turns PTT (per-thread metrics) on and off for a process or for
// the whole system and dumps the per-thread values.
//
//	ptt [--backend kmod|daemon|auto] on [-m metric,...] [-p pid | -a]
//	ptt dump [--json]
//	ptt off
//	ptt info
//
// The counting outlives the command: `ptt on` hands it to the agent
// (pitraced: the system one, or the user's own; docs/agent.md), whose PTT
// holder (daemon/ptthold) counts every thread of the target, picks up new
// threads as they are created, and answers `ptt dump` and `ptt off` for the
// user who turned it on. On the no-module backend (daemon) the holder opens
// per-thread perf_event counters. On the pitrace module (kmod) this command
// opens /dev/pitrace with the user's rights and passes it; the holder
// selects the metrics (PTT_INIT) and has the module keep a work area for
// every thread (PTT_WATCH); `ptt dump` reads them (PTT_READ) with the
// per-CPU interrupt buckets (PTT_STATUS). --backend (or $PERFINSP_BACKEND)
// picks the backend: kmod, daemon or auto (the default: the module when it
// is loaded with PTT and keeps every chosen metric). Without -m the metric
// is tsc on the module and task-clock on daemon.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"perfinsp/internal/cliutil"

	"perfinsp/libperfutil/daemonclient"
	"perfinsp/libperfutil/kmodbackend"
	"perfinsp/libperfutil/ptt"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cliutil.Run(newApp(stdout, stderr), args)
}

var errNotOn = cli.Exit("ptt is not on: run ptt on first", 1)

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "ptt",
		Usage:     "per-thread metrics (PTT): turn on, dump, turn off",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "backend", Value: "auto", EnvVars: []string{ptt.EnvBackend},
				Usage: "kmod (the pitrace module: interrupts factored out), daemon (no module: the agent's perf_event counters; perf is its former name) or auto"},
		},
		// A backend nobody has is refused by every command, info included.
		Before: func(c *cli.Context) error {
			switch b := c.String("backend"); b {
			case "", "auto", "kmod", "daemon", "perf":
				return nil
			default:
				return cli.Exit(fmt.Sprintf("--backend %q (or $%s): use kmod, daemon or auto", b, ptt.EnvBackend), 2)
			}
		},
		Commands: []*cli.Command{
			{
				Name:  "on",
				Usage: "start counting per-thread metrics",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "metrics", Aliases: []string{"m"}, Usage: "comma-separated metrics (up to 8; default tsc on the pitrace module, task-clock without it): " + strings.Join(ptt.MetricNames(), ", ")},
					&cli.IntFlag{Name: "pid", Aliases: []string{"p"}, Usage: "only the threads of this process"},
					&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "every thread of every process (the default)"},
				},
				Action: func(c *cli.Context) error { return cmdOn(c, stdout) },
			},
			{
				Name:   "off",
				Usage:  "stop counting and release the counters",
				Action: func(c *cli.Context) error { return cmdOff(stdout) },
			},
			{
				Name:  "dump",
				Usage: "per thread: tid, name, each metric, dispatches, interrupts, interrupt time; per CPU: interrupt buckets",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "JSON instead of text"}},
				Action: func(c *cli.Context) error {
					return cmdDump(stdout, c.Bool("json"))
				},
			},
			{
				Name:   "info",
				Usage:  "backends and what the active one guarantees",
				Action: func(c *cli.Context) error { return cmdInfo(stdout) },
			},
		},
	}
	cliutil.Apply(app)
	return app
}

// agentCall sends one PTT op to the agent.
func agentCall(op string, args, out any, files ...*os.File) error {
	a, err := daemonclient.DialAgent()
	if err != nil {
		if op != ptt.OpOn {
			return errNotOn
		}
		return fmt.Errorf("ptt needs the agent (pitraced) to hold the counters: %w", err)
	}
	defer a.Close()
	if op == ptt.OpOn || op == ptt.OpDump {
		// on opens a counter per metric for every thread of the target
		// (-a: of the system), dump reads them all: the time grows with
		// the threads, so they get the long limit (a stopped agent is
		// still reported, after it).
		a.Timeout = a.LongTimeout
	}
	err = a.Call(op, args, out, files...)
	if err != nil && strings.Contains(err.Error(), "ptt is not on") {
		return errNotOn
	}
	return err
}

// chooseBackend picks the holder's backend (kmod, daemon, auto) and parses
// the metrics for it. auto takes the module when it is loaded with PTT
// support and keeps every metric (not task-clock).
func chooseBackend(be string, names []string) (string, []ptt.Metric, error) {
	parse := func(be string) ([]ptt.Metric, error) {
		if len(names) == 0 {
			return ptt.ParseMetrics([]string{ptt.DefaultMetric(be)})
		}
		return ptt.ParseMetrics(names)
	}
	if _, err := parse("daemon"); err != nil {
		return "", nil, cli.Exit(err.Error(), 2)
	}
	switch be {
	case "kmod":
		if st := ptt.KmodStatus(); !st.Available {
			return "", nil, cli.Exit("ptt backend kmod is not available: "+st.Why, 1)
		}
		ms, _ := parse("kmod")
		if _, err := ptt.ModuleMetrics(ms); err != nil {
			return "", nil, cli.Exit(err.Error(), 1)
		}
		return "kmod", ms, nil
	case "daemon", "perf": // "perf": the backend's former name
		ms, _ := parse("daemon")
		return "daemon", ms, moduleOnly(ms, "--backend daemon runs without it")
	case "", "auto":
		st := ptt.KmodStatus()
		if st.Available {
			ms, _ := parse("kmod")
			if _, err := ptt.ModuleMetrics(ms); err == nil {
				return "kmod", ms, nil
			}
		}
		ms, _ := parse("daemon")
		return "daemon", ms, moduleOnly(ms, st.Why)
	default:
		return "", nil, cli.Exit(fmt.Sprintf("unknown backend %q: use kmod, daemon or auto", be), 2)
	}
}

// moduleOnly refuses, on the no-module backend, a metric only the pitrace
// module counts (tsc), saying what to do instead.
func moduleOnly(ms []ptt.Metric, why string) error {
	for _, m := range ms {
		if m.Name == ptt.DefaultMetric("kmod") {
			return cli.Exit(fmt.Sprintf("metric %s needs the pitrace module (%s): load it (sudo insmod kmod/pitrace.ko, docs/kmod.md), "+
				"or count cpu-clock or task-clock (CPU time) instead", m.Name, why), 1)
		}
	}
	return nil
}

func cmdOn(c *cli.Context, stdout io.Writer) error {
	names := ptt.SplitList(c.String("metrics"))
	if c.IsSet("pid") && c.Bool("all") {
		return cli.Exit("give -p PID or -a, not both", 2)
	}
	pid := c.Int("pid")
	if c.IsSet("pid") && pid <= 0 {
		return cli.Exit(fmt.Sprintf("bad pid %d", pid), 2)
	}
	backend, ms, err := chooseBackend(c.String("backend"), names)
	if err != nil {
		return err
	}
	var mnames []string
	for _, m := range ms {
		mnames = append(mnames, m.Name)
	}
	var files []*os.File
	if backend == "kmod" {
		// Opened here, with this user's rights; the agent uses it.
		dev, err := os.OpenFile(kmodbackend.Device, os.O_RDWR, 0)
		if err != nil {
			return cli.Exit(fmt.Sprintf("open %s: %v", kmodbackend.Device, err), 1)
		}
		defer dev.Close()
		files = append(files, dev)
	}
	var res ptt.OnResult
	if err := agentCall(ptt.OpOn, ptt.OnArgs{Metrics: mnames, Pid: pid, Backend: backend}, &res, files...); err != nil {
		return cli.Exit(strings.TrimPrefix(err.Error(), "pitraced: "), 1)
	}
	target := "every thread of every process"
	if pid > 0 {
		target = fmt.Sprintf("the threads of pid %d", pid)
	}
	fmt.Fprintf(stdout, "ptt on: %s for %s (backend %s: held by the agent, pitraced pid %d; %d threads now)\n", strings.Join(mnames, ","), target, backend, res.AgentPid, res.Threads)
	if backend == "kmod" {
		fmt.Fprintln(stdout, "ptt: interrupts are factored out into per-CPU buckets; perf metrics are current to each thread's last dispatch/interrupt (see ptt info)")
	} else {
		fmt.Fprintln(stdout, "ptt: interrupts are not factored out on this backend (see ptt info)")
	}
	return nil
}

func cmdOff(stdout io.Writer) error {
	if err := agentCall(ptt.OpOff, nil, nil); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ptt off")
	return nil
}

func cmdDump(stdout io.Writer, asJSON bool) error {
	var d ptt.Dump
	if err := agentCall(ptt.OpDump, nil, &d); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(&d)
	}
	printDump(stdout, &d)
	return nil
}

func printDump(w io.Writer, d *ptt.Dump) {
	fmt.Fprintf(w, "ptt dump: backend %s, metrics %s, target %s, on since %s\n", d.Backend, strings.Join(d.Metrics, ","), d.Target, d.Started.Format(time.RFC3339))
	fmt.Fprintf(w, "%s\n", d.Note)
	// The module gives each metric's interrupt share; the daemon nothing.
	perMetric := d.Backend == "kmod"
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	hdr := []string{"PID", "TID", "NAME"}
	hdr = append(hdr, d.Metrics...)
	hdr = append(hdr, "DISPATCHES", "INTERRUPTS")
	if perMetric {
		for _, m := range d.Metrics {
			hdr = append(hdr, "INTR-"+m)
		}
	} else {
		hdr = append(hdr, "INTR-TIME")
	}
	hdr = append(hdr, "")
	fmt.Fprintln(tw, strings.Join(hdr, "\t"))
	for _, t := range d.Threads {
		row := []string{strconv.Itoa(t.Pid), strconv.Itoa(t.Tid), t.Name}
		for _, m := range d.Metrics {
			row = append(row, strconv.FormatUint(t.Values[m], 10))
		}
		disp, intr := "n/a", "n/a"
		if t.Dispatches != nil {
			disp = strconv.FormatUint(*t.Dispatches, 10)
		}
		if t.Interrupts != nil {
			intr = strconv.FormatUint(*t.Interrupts, 10)
		}
		row = append(row, disp, intr)
		if perMetric {
			for _, m := range d.Metrics {
				v, ok := t.InterruptValues[m]
				if ok {
					row = append(row, strconv.FormatUint(v, 10))
				} else {
					row = append(row, "n/a")
				}
			}
		} else {
			itime := "n/a"
			if t.InterruptTime != nil {
				itime = strconv.FormatUint(*t.InterruptTime, 10)
			}
			row = append(row, itime)
		}
		state := ""
		switch {
		case t.Exited:
			state = " (exited)"
		case t.Running:
			state = " (running)"
		}
		if t.UncountedStartNs != nil && *t.UncountedStartNs > 0 {
			state += fmt.Sprintf(" (started before it was found: %.3f ms of CPU not counted)", float64(*t.UncountedStartNs)/1e6)
		}
		row = append(row, state)
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	if d.CPUs == nil {
		fmt.Fprintf(w, "per-CPU interrupt buckets: %s\n", d.CPUNote)
	} else {
		fmt.Fprintf(w, "per-CPU interrupt buckets (interrupts PTT saw and each metric spent in them):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		hdr := []string{"CPU", "INTERRUPTS", "TSC"}
		hdr = append(hdr, d.Metrics...)
		fmt.Fprintln(tw, strings.Join(append(hdr, ""), "\t"))
		for _, c := range d.CPUs {
			row := []string{strconv.Itoa(c.CPU), strconv.FormatUint(c.Interrupts, 10), strconv.FormatUint(c.TSC, 10)}
			for _, m := range d.Metrics {
				row = append(row, strconv.FormatUint(c.Values[m], 10))
			}
			fmt.Fprintln(tw, strings.Join(append(row, ""), "\t"))
		}
		tw.Flush()
		if d.CPUNote != "" {
			fmt.Fprintf(w, "%s\n", d.CPUNote)
		}
	}
	if len(d.Errors) > 0 {
		fmt.Fprintf(w, "%d threads could not be counted, first: %s\n", len(d.Errors), d.Errors[0])
	}
}

func cmdInfo(stdout io.Writer) error {
	for _, b := range ptt.Backends() {
		switch {
		case b.Available && b.Why != "":
			fmt.Fprintf(stdout, "backend %-6s available: %s\n", b.Name, b.Why)
		case b.Available:
			fmt.Fprintf(stdout, "backend %-6s available\n", b.Name)
		default:
			fmt.Fprintf(stdout, "backend %-6s not available: %s\n", b.Name, b.Why)
		}
	}
	// The backend's default metric (tsc on the module, task-clock without).
	if err := ptt.Init(); err != nil {
		return err
	}
	defer ptt.Terminate()
	g, err := ptt.GetGuarantees()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "active backend: %s (default metric %s)\n", g.Backend, ptt.DefaultMetric(g.Backend))
	fmt.Fprintf(stdout, "  interrupts factored out: %v\n  per-thread dispatch counts in the work area: %v\n  interrupt counts and per-CPU buckets: %v\n  retry detects: %s\n",
		g.InterruptsFactoredOut, g.DispatchCounts, g.InterruptCounts, g.RetryDetects)
	for _, m := range ptt.Metrics() {
		note := ""
		if m.Name == ptt.DefaultMetric("kmod") && g.Backend != "kmod" {
			note = "  (needs the pitrace module: not on this backend)"
		}
		fmt.Fprintf(stdout, "  metric %-17s %-12s hardware=%v%s\n", m.Name, m.Unit, m.Hardware, note)
	}
	for _, n := range g.Notes {
		fmt.Fprintf(stdout, "  note: %s\n", n)
	}
	for _, m := range g.Metrics {
		fmt.Fprintf(stdout, "in-process read of %s: %s\n", m.Metric, m.Path)
	}
	if g.Backend == "kmod" {
		// What the module promises for the other metric kinds.
		pf, _ := ptt.ParseMetrics([]string{"page-faults"})
		fmt.Fprintf(stdout, "in-process read of a perf metric (page-faults, cpu-clock, ...): %s\n", ptt.ModuleGuarantees(pf, 0).Metrics[0].Path)
	}
	return nil
}
