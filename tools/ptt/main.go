// Command ptt turns PTT (per-thread metrics) on and off for a process or for
// the whole system and dumps the per-thread values.
//
//	ptt on [-m metric,...] [-p pid | -a]
//	ptt dump [--json]
//	ptt off
//	ptt info
//
// `ptt on` starts a small holder process (this binary re-executed as the
// hidden `ptt serve`) that counts every thread of the target, picks up new
// threads by scanning /proc/PID/task, and answers `ptt dump` and `ptt off`
// on a Unix socket only its user can reach (/run/perfinsp/ptt.sock for
// root). On the no-module ("daemon") backend the holder opens per-thread
// perf_event counters. On the pitrace module ("kmod") it opens /dev/pitrace,
// selects the metrics (PTT_INIT) and has the module keep a work area for
// every thread (PTT_WATCH); `ptt dump` reads them (PTT_READ) with the per-CPU
// interrupt buckets (PTT_STATUS). $PERFINSP_BACKEND picks the backend: kmod,
// daemon or auto (the default: the module when it is loaded with PTT and
// keeps every chosen metric). Without -m the metric is tsc on the module and
// task-clock on the daemon backend.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"perfinsp/libperfutil/ptt"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.Run(args)
	var ec cli.ExitCoder
	switch {
	case errors.As(err, &ec):
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, "ptt:", msg)
		}
		return ec.ExitCode()
	case err != nil:
		fmt.Fprintln(stderr, "ptt:", err)
		return 1
	}
	return 0
}

// SocketPath is where the holder listens: $PTT_SOCKET, else
// /run/perfinsp/ptt.sock for root, else a per-user directory.
func SocketPath() string {
	if p := os.Getenv("PTT_SOCKET"); p != "" {
		return p
	}
	if os.Geteuid() == 0 {
		return "/run/perfinsp/ptt.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "perfinsp", "ptt.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("perfinsp-%d", os.Geteuid()), "ptt.sock")
}

var errNotOn = cli.Exit("ptt is not on: run ptt on first", 1)

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "ptt",
		Usage:     "per-thread metrics (PTT): turn on, dump, turn off",
		Writer:    stdout,
		ErrWriter: stderr,
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
			{
				Name:   "serve",
				Hidden: true,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "metrics"},
					&cli.IntFlag{Name: "pid"},
					&cli.StringFlag{Name: "backend", Value: "daemon"},
				},
				Action: func(c *cli.Context) error {
					return serve(ptt.SplitList(c.String("metrics")), c.Int("pid"), c.String("backend"))
				},
			},
		},
	}
}

// request and reply are the socket protocol: one JSON object each way.
type request struct {
	Cmd string `json:"cmd"` // "dump" or "off"
}

type reply struct {
	Error string `json:"error,omitempty"`
	Dump  *Dump  `json:"dump,omitempty"`
}

func call(cmd string) (*reply, error) {
	conn, err := net.DialTimeout("unix", SocketPath(), 2*time.Second)
	if err != nil {
		return nil, errNotOn
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := json.NewEncoder(conn).Encode(request{Cmd: cmd}); err != nil {
		return nil, fmt.Errorf("send %s to the ptt holder: %w", cmd, err)
	}
	var r reply
	if err := json.NewDecoder(conn).Decode(&r); err != nil {
		return nil, fmt.Errorf("read the ptt holder's answer to %s: %w", cmd, err)
	}
	if r.Error != "" {
		return nil, errors.New(r.Error)
	}
	return &r, nil
}

// chooseBackend picks the holder's backend from $PERFINSP_BACKEND (kmod,
// daemon, auto) and parses the metrics for it. auto takes the module when
// it is loaded with PTT support and keeps every metric (not task-clock).
func chooseBackend(names []string) (string, []ptt.Metric, error) {
	parse := func(be string) ([]ptt.Metric, error) {
		if len(names) == 0 {
			return ptt.ParseMetrics([]string{ptt.DefaultMetric(be)})
		}
		return ptt.ParseMetrics(names)
	}
	if _, err := parse("daemon"); err != nil {
		return "", nil, cli.Exit(err.Error(), 2)
	}
	switch be := os.Getenv(ptt.EnvBackend); be {
	case "kmod":
		if st := ptt.KmodStatus(); !st.Available {
			return "", nil, cli.Exit("ptt backend kmod is not available: "+st.Why, 1)
		}
		ms, _ := parse("kmod")
		if _, err := ptt.ModuleMetrics(ms); err != nil {
			return "", nil, cli.Exit(err.Error(), 1)
		}
		return "kmod", ms, nil
	case "daemon":
		ms, _ := parse("daemon")
		return "daemon", ms, nil
	case "", "auto":
		if ptt.KmodStatus().Available {
			ms, _ := parse("kmod")
			if _, err := ptt.ModuleMetrics(ms); err == nil {
				return "kmod", ms, nil
			}
		}
		ms, _ := parse("daemon")
		return "daemon", ms, nil
	default:
		return "", nil, cli.Exit(fmt.Sprintf("unknown backend %q in $%s: use kmod, daemon or auto", be, ptt.EnvBackend), 2)
	}
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
	backend, ms, err := chooseBackend(names)
	if err != nil {
		return err
	}
	if _, err := call("ping"); err == nil {
		return cli.Exit("ptt is already on: run ptt off first", 1)
	}
	// Check the metrics and the permission here, so that the user gets the
	// error from this command (the module holder checks them at its start
	// and reports through its stderr).
	if backend == "daemon" {
		if err := checkOpen(ms, pid); err != nil {
			return cli.Exit(err.Error(), 1)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the ptt executable: %w", err)
	}
	var mnames []string
	for _, m := range ms {
		mnames = append(mnames, m.Name)
	}
	cmd := exec.Command(exe, "serve", "--metrics", strings.Join(mnames, ","), "--pid", strconv.Itoa(pid), "--backend", backend)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the ptt holder: %w", err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Wait()
		msg := strings.TrimSpace(errBuf.String())
		if msg == "" {
			msg = "the ptt holder exited without a word"
		}
		return cli.Exit(msg, 1)
	}
	holderPid := cmd.Process.Pid
	_ = cmd.Process.Release()
	target := "every thread of every process"
	if pid > 0 {
		target = fmt.Sprintf("the threads of pid %d", pid)
	}
	fmt.Fprintf(stdout, "ptt on: %s for %s (backend %s: holder pid %d, socket %s)\n", strings.Join(mnames, ","), target, backend, holderPid, SocketPath())
	if backend == "kmod" {
		fmt.Fprintln(stdout, "ptt: interrupts are factored out into per-CPU buckets; perf metrics are current to each thread's last dispatch/interrupt (see ptt info)")
	} else {
		fmt.Fprintln(stdout, "ptt: interrupts are not factored out on this backend (see ptt info)")
	}
	return nil
}

// checkOpen opens (and closes) every metric on the target's main thread.
func checkOpen(ms []ptt.Metric, pid int) error {
	tid := pid
	if pid == 0 {
		tid = os.Getpid()
	}
	for _, m := range append(ms, dispatchMetric()) {
		fd, err := ptt.OpenCounter(m, tid, ptt.OpenOpts{})
		if err != nil && !m.Hardware {
			fd, err = ptt.OpenCounter(m, tid, ptt.OpenOpts{ExcludeKernel: true})
		}
		if err != nil {
			return err
		}
		syscall.Close(fd)
	}
	return nil
}

func dispatchMetric() ptt.Metric {
	m, _ := ptt.LookupMetric("context-switches")
	return m
}

func cmdOff(stdout io.Writer) error {
	if _, err := call("off"); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "ptt off")
	return nil
}

func cmdDump(stdout io.Writer, asJSON bool) error {
	r, err := call("dump")
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r.Dump)
	}
	printDump(stdout, r.Dump)
	return nil
}

func printDump(w io.Writer, d *Dump) {
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
		fmt.Fprintf(stdout, "  metric %-17s %-12s hardware=%v\n", m.Name, m.Unit, m.Hardware)
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

// sortThreads orders by pid, then tid.
func sortThreads(ts []ThreadDump) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Pid != ts[j].Pid {
			return ts[i].Pid < ts[j].Pid
		}
		return ts[i].Tid < ts[j].Tid
	})
}
