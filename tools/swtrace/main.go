// Command swtrace controls the perfinsp trace facility: buffer sizes, record
// types, mode, tprof rate, on/off, and writing the buffers to a trace file.
// It works the same with the pitrace kernel module or the pitraced daemon.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
	"perfinsp/internal/cliutil"
	_ "perfinsp/libperfutil/backends"
	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/cpustat"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	return cliutil.Run(newApp(stdout, stderr), reorder(args))
}

// valueFlags are the flags that take a value.
var valueFlags = map[string]bool{"-t": true, "--t": true, "-trace": true, "--trace": true, "-m": true, "--m": true,
	"-mte": true, "--mte": true, "-f": true, "--f": true, "-file": true, "--file": true, "-e": true, "--e": true,
	"-event": true, "--event": true, "-s": true, "--s": true, "-i": true, "--i": true, "-n": true, "--n": true,
	"-interval": true, "--interval": true, "-count": true, "--count": true, "-backend": true, "--backend": true}

// reorder moves a command's options in front of its arguments, so that
// `swtrace mode cont -f big.nrm2` works as well as `swtrace mode -f big.nrm2 cont`
// (the CLI library stops at the first argument).
func reorder(args []string) []string {
	out := []string{args[0]}
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") { // global options
		out = append(out, args[i])
		if valueFlags[args[i]] && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
		i++
	}
	if i >= len(args) {
		return out
	}
	if args[i] == itraceCommand.Name || args[i] == daemonCommand.Name {
		return args // itrace on|off: subcommands parse their own options
	}
	out = append(out, args[i]) // the command
	i++
	flags, pos := cliutil.OptionsFirst(args[i:], valueFlags)
	return append(append(out, flags...), pos...)
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "swtrace",
		Usage:     "control the perfinsp trace facility",
		UsageText: "swtrace [--backend kmod|daemon|auto] COMMAND [options]",
		Description: "Typical session:\n" +
			"   swtrace init -t 8M -m 1M      per-CPU trace and MTE buffer sizes\n" +
			"   swtrace enable tprof          record types (swtrace enable alone lists them)\n" +
			"   swtrace mode normal           normal | wrap | cont\n" +
			"   swtrace setrate 1000          tprof samples per second\n" +
			"   swtrace on; ./workload; swtrace off\n" +
			"   swtrace get                   write swtrace.nrm2; then: post -tprof\n" +
			"The pitrace kernel module is used when loaded (/dev/pitrace), else the pitraced daemon,\n" +
			"which swtrace starts when needed (root). PERFINSP_BACKEND forces one.",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "backend", Value: "auto", Usage: "trace facility backend: kmod, daemon or auto", EnvVars: []string{control.EnvBackend}},
		},
		HideHelpCommand: true,
		Commands: []*cli.Command{
			{Name: "init", Usage: "allocate the per-CPU buffers", UsageText: "swtrace init [-t SIZE] [-m SIZE]",
				Description: fmt.Sprintf("SIZE takes K, M or G suffixes. Defaults: -t %s -m %s per CPU. Drops buffered data.", cliutil.SizeName(int64(control.DefaultTraceBufSize)), cliutil.SizeName(int64(control.DefaultMTEBufSize))),
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "t", Aliases: []string{"trace"}, Usage: "trace buffer `SIZE` per CPU"},
					&cli.StringFlag{Name: "m", Aliases: []string{"mte"}, Usage: "MTE buffer `SIZE` per CPU"},
				}, Action: cmdInit},
			{Name: "enable", Usage: "enable record types by name or major code (none: list them)", UsageText: "swtrace enable [--only] [TYPE ...]",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "only", Usage: "enable exactly these types (and the always-on sys and mte), disabling the others"},
					&cli.IntFlag{Name: "depth", Usage: "with callstack: at most `FRAMES` frames per stack (1..127, default 127); deeper stacks are kept truncated and marked"},
					&cli.StringFlag{Name: "unwind", Usage: "with callstack: how user stacks are unwound, as perf's --call-graph: fp (frame pointers, the default) or dwarf[,BYTES] (the code's .eh_frame call-frame information, from BYTES of user stack copied per sample, default 8192: callers of code built without frame pointers; daemon backend)"}},
				Action: cmdEnable(true)},
			{Name: "disable", Usage: "disable record types", UsageText: "swtrace disable TYPE ...", Action: cmdEnable(false)},
			{Name: "mode", Usage: "select the mode: normal, wrap or cont", UsageText: "swtrace mode normal|wrap|cont [-f FILE]",
				Description: "normal: tracing stops when any buffer fills.\n" +
					"wrap:   trace records overwrite the oldest; MTE records are written to FILE continuously.\n" +
					"cont:   MTE and trace segments are written to FILE as they fill; traces can exceed memory.\n" +
					"FILE defaults to swtrace.nrm2 in the current directory.",
				Flags: []cli.Flag{&cli.StringFlag{Name: "f", Aliases: []string{"file"}, Value: "swtrace.nrm2", Usage: "`FILE` that wrap and cont modes stream to"},
					&cli.StringFlag{Name: "on-write-error", Value: "count", Usage: "when FILE cannot be written (a full disk): `count` the records that cannot be written as lost and go on, or stop tracing (the file always ends on a complete chunk)"}},
				Action: cmdMode},
			{Name: "setrate", Usage: "tprof sampling rate in Hz (time-based), or event-based with -e", UsageText: "swtrace setrate HZ | swtrace setrate -e EVENT -c PERIOD",
				Flags: []cli.Flag{&cli.StringFlag{Name: "e", Aliases: []string{"event"}, Usage: "`EVENT` for event-based sampling, any name of the event table (mpevt -l: cycles, instructions, rHEX, pmu/event=..,umask=../)"},
					&cli.IntFlag{Name: "c", Aliases: []string{"count"}, Usage: "event-based: a sample every `PERIOD` events"}},
				Action: cmdRate},
			{Name: "on", Usage: "start tracing (with default buffers if init was not run)", UsageText: "swtrace on [--discard]",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "discard", Usage: "drop a trace still in the buffers that was never written with get"}},
				Action: cmdOn},
			{Name: "off", Usage: "stop tracing; the data stays in the buffers", Action: cmdSimple("off")},
			{Name: "get", Usage: "write the buffers to a trace file (default swtrace.nrm2), created with your own rights, mode 0600 (a trace holds kernel addresses and command lines); a previous FILE is kept as FILE.old", UsageText: "swtrace get [FILE]",
				Description: "get refuses while tracing is on (run swtrace off first): it never snapshots a running trace.", Action: cmdGet},
			{Name: "info", Usage: "show state, mode, sizes, records and lost records per CPU", Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "JSON output"}}, Action: cmdInfo},
			{Name: "free", Usage: "stop tracing and release the buffers", Action: cmdSimple("free")},
			{Name: "aboveidle", Usage: "per-CPU utilisation: busy, idle and interrupt time (PI's AboveIdle)", UsageText: "swtrace aboveidle [-i SECONDS] [-n COUNT]",
				Description: "Reads the kernel's per-CPU time accounting (/proc/stat) every interval and prints each\n" +
					"CPU's busy (user+system+steal), idle (idle+iowait) and interrupt (irq+softirq) share.\n" +
					"It needs no tracing and costs nothing between readings.",
				Flags: []cli.Flag{
					&cli.Float64Flag{Name: "i", Aliases: []string{"interval"}, Value: 1, Usage: "`SECONDS` between reports"},
					&cli.IntFlag{Name: "n", Aliases: []string{"count"}, Value: 1, Usage: "number of reports (0: until interrupted)"},
				}, Action: cmdAboveIdle},
			{Name: "hook", Usage: "write a user record (as TraceHook does)", UsageText: "swtrace hook MAJOR MINOR [WORD ...] | swtrace hook MAJOR MINOR -s STRING",
				Flags: []cli.Flag{&cli.StringFlag{Name: "s", Usage: "trailing `STRING` data"}}, Action: cmdHook},
			itraceCommand,
			daemonCommand,
		},
	}
	cliutil.Apply(app)
	return app
}

func open(c *cli.Context) (control.Facility, error) {
	f, err := control.Open(c.String("backend"))
	if err != nil {
		return nil, err
	}
	if n, ok := f.(control.Noticer); ok {
		for _, msg := range n.Notices() {
			fmt.Fprintf(c.App.ErrWriter, "swtrace: %s\n", msg)
		}
	}
	return f, nil
}

func usageErr(c *cli.Context, format string, args ...any) error {
	return cliutil.UsageError(c, fmt.Sprintf(format, args...))
}

// parseSize parses a buffer size: 8M, 512K, 1G or a byte count, not 0.
func parseSize(s string) (int, error) {
	v, err := cliutil.ParseSize(s)
	if err == nil && (v == 0 || v >= 1<<40) {
		err = fmt.Errorf("bad size %q: use a number with an optional K, M or G suffix, from 1 to below 1T", s)
	}
	return int(v), err
}

func cmdInit(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErr(c, "unexpected argument %q", c.Args().First())
	}
	var cfg control.Config
	var err error
	if s := c.String("t"); s != "" {
		if cfg.TraceBufSize, err = parseSize(s); err != nil {
			return usageErr(c, "-t: %v", err)
		}
	}
	if s := c.String("m"); s != "" {
		if cfg.MTEBufSize, err = parseSize(s); err != nil {
			return usageErr(c, "-m: %v", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return usageErr(c, "%v", err)
	}
	f, err := open(c)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Init(cfg); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "swtrace: %s buffers: trace %s, MTE %s per CPU\n", f.Backend(), cliutil.SizeName(int64(cfg.TraceBufSize)), cliutil.SizeName(int64(cfg.MTEBufSize)))
	return nil
}

func cmdEnable(on bool) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 && !on {
			return usageErr(c, "name at least one record type")
		}
		var majors []uint16
		for _, a := range c.Args().Slice() {
			m, err := trace.ParseMajor(a)
			if err != nil {
				return usageErr(c, "%v", err)
			}
			majors = append(majors, m)
		}
		// A wrong --unwind is a usage error, said before anything changes.
		var unwind control.Unwind
		if c.IsSet("unwind") {
			var err error
			if unwind, err = control.ParseUnwind(c.String("unwind")); err != nil {
				return usageErr(c, "--unwind: %v", strings.TrimPrefix(err.Error(), "unwind "))
			}
		}
		f, err := open(c)
		if err != nil {
			if c.NArg() == 0 {
				listTypes(c.App.Writer, nil)
				return nil
			}
			return err
		}
		defer f.Close()
		if c.NArg() == 0 {
			st, err := f.Info()
			if err != nil {
				return err
			}
			listTypes(c.App.Writer, st.Enabled)
			return nil
		}
		if on && c.Bool("only") {
			// Exactly these (and the always-on types): drop the others first.
			st, err := f.Info()
			if err != nil {
				return err
			}
			want := map[uint16]bool{trace.MajorSys: true, trace.MajorMTE: true}
			for _, m := range majors {
				want[m] = true
			}
			var drop []uint16
			for _, m := range st.Enabled {
				if !want[m] {
					drop = append(drop, m)
				}
			}
			if len(drop) > 0 {
				if err := f.Disable(drop); err != nil {
					return err
				}
			}
		}
		if on {
			err = f.Enable(majors)
		} else {
			err = f.Disable(majors)
		}
		if err != nil {
			return err
		}
		if c.IsSet("depth") {
			sd, ok := f.(control.StackDepth)
			if !ok {
				return fmt.Errorf("--depth: the %s backend records no call stacks", f.Backend())
			}
			if err := sd.SetStackDepth(c.Int("depth")); err != nil {
				return err
			}
		}
		if c.IsSet("unwind") {
			u := unwind
			su, ok := f.(control.StackUnwinder)
			switch {
			case ok:
				if err := su.SetStackUnwind(u); err != nil {
					return err
				}
			case u.DWARF:
				return fmt.Errorf("--unwind dwarf: the %s backend unwinds user stacks by frame pointers only; DWARF unwinding is the daemon backend's (PERFINSP_BACKEND=daemon swtrace ...)", f.Backend())
			}
		}
		st, err := f.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "swtrace: enabled: %s\n", enabledNames(st.Enabled))
		return nil
	}
}

func listTypes(w io.Writer, enabled []uint16) {
	en := map[uint16]bool{}
	for _, m := range enabled {
		en[m] = true
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tMAJOR\tSTATE\tRECORDS")
	for _, g := range trace.Groups {
		state := "off"
		switch {
		case g.Always:
			state = "always"
		case !g.Available:
			state = "n/a"
		case enabled == nil:
			state = "?"
		case en[g.Major]:
			state = "on"
		}
		fmt.Fprintf(tw, "%s\t0x%02x\t%s\t%s\n", g.Name, g.Major, state, g.Doc)
	}
	tw.Flush()
	fmt.Fprintln(w, "User hook records (TraceHook) use majors 0x100 and above and are always recorded.")
}

func enabledNames(ms []uint16) string {
	sort.Slice(ms, func(i, j int) bool { return ms[i] < ms[j] })
	var names []string
	for _, m := range ms {
		names = append(names, trace.MajorName(m))
	}
	return strings.Join(names, " ")
}

func cmdMode(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageErr(c, "name one mode: normal, wrap or cont")
	}
	mode, err := control.ParseMode(c.Args().First())
	if err != nil {
		return usageErr(c, "%v", err)
	}
	file := ""
	if mode != control.ModeNormal {
		file = c.String("f")
	}
	f, err := open(c)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.SetMode(mode, file); err != nil {
		return fmt.Errorf("mode: %w", err)
	}
	switch policy := c.String("on-write-error"); policy {
	case "count", "stop":
		if p, ok := f.(control.WriteErrorPolicy); ok {
			if err := p.SetStopOnWriteError(policy == "stop"); err != nil {
				return fmt.Errorf("mode: %w", err)
			}
		} else if policy == "stop" {
			return fmt.Errorf("mode: --on-write-error stop is not available on the %s backend yet (it counts what cannot be written as lost)", f.Backend())
		}
	default:
		return usageErr(c, "--on-write-error takes count or stop, not %q", policy)
	}
	if file != "" {
		fmt.Fprintf(c.App.Writer, "swtrace: mode %s, streaming to %s\n", control.ModeName(mode), file)
	} else {
		fmt.Fprintf(c.App.Writer, "swtrace: mode %s\n", control.ModeName(mode))
	}
	return nil
}

func cmdRate(c *cli.Context) error {
	var hz int
	switch {
	case c.IsSet("c"):
		if c.String("e") == "" || c.NArg() != 0 {
			return usageErr(c, "-c PERIOD goes with -e EVENT and no rate")
		}
		hz = c.Int("c")
		if hz <= 0 {
			return usageErr(c, "bad period %d: a sample every PERIOD events, PERIOD >= 1", hz)
		}
	case c.NArg() != 1:
		return usageErr(c, "give one rate in Hz (or -e EVENT -c PERIOD)")
	default:
		var err error
		hz, err = strconv.Atoi(c.Args().First())
		if err != nil || hz <= 0 || (c.String("e") == "" && hz > control.MaxRateHz) {
			return usageErr(c, "bad rate %q: use 1..%d", c.Args().First(), control.MaxRateHz)
		}
	}
	f, err := open(c)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.SetRate(hz, c.String("e")); err != nil {
		return fmt.Errorf("setrate: %w", err)
	}
	if e := c.String("e"); e != "" {
		fmt.Fprintf(c.App.Writer, "swtrace: tprof every %d %s events\n", hz, e)
	} else {
		fmt.Fprintf(c.App.Writer, "swtrace: tprof at %d Hz\n", hz)
	}
	return nil
}

func cmdOn(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErr(c, "unexpected argument %q", c.Args().First())
	}
	f, err := open(c)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Info()
	if err != nil {
		return err
	}
	switch {
	case st.State == control.StateFree:
		fmt.Fprintf(c.App.ErrWriter, "swtrace: buffers not initialized: using the defaults (init -t %s -m %s)\n", cliutil.SizeName(int64(control.DefaultTraceBufSize)), cliutil.SizeName(int64(control.DefaultMTEBufSize)))
		if err := f.Init(control.Config{}); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	case c.Bool("discard") && st.State == control.StateOff:
		if err := f.Free(); err != nil {
			return fmt.Errorf("discard: %w", err)
		}
		if err := f.Init(control.Config{TraceBufSize: st.TraceBufSize, MTEBufSize: st.MTEBufSize}); err != nil {
			return fmt.Errorf("init: %w", err)
		}
	}
	if err := f.On(); err != nil {
		return fmt.Errorf("on: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "swtrace: tracing on (%s backend)%s\n", f.Backend(), streamNote(st))
	return nil
}

// streamNote says where a wrap or cont trace streams to: a mode set long
// ago (by swtrace mode, or a run.tprof -s) keeps its file, which on
// starts over.
func streamNote(st *control.Status) string {
	if st.Mode == control.ModeNormal || st.ContFile == "" {
		return ""
	}
	return fmt.Sprintf(", mode %s: streaming to %s (swtrace mode normal to keep the trace in memory)", control.ModeName(st.Mode), st.ContFile)
}

func cmdSimple(op string) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() > 0 {
			return usageErr(c, "unexpected argument %q", c.Args().First())
		}
		f, err := open(c)
		if err != nil {
			return err
		}
		defer f.Close()
		switch op {
		case "off":
			err = f.Off()
			if err != nil && !errors.Is(err, control.ErrNotOwner) {
				// Tracing stopped by itself when a buffer filled (normal
				// mode): off has nothing left to stop; say what was kept
				// and lost instead of failing. (Another user's trace is
				// refused, stopped or not.)
				if st, ierr := f.Info(); ierr == nil && st.StoppedFull && st.State == control.StateOff {
					recs, lost := totals(st)
					fmt.Fprintf(c.App.Writer, "swtrace: tracing had already stopped: a buffer filled (normal mode): %d records, %d lost; "+
						"for a longer run give more with swtrace init -t SIZE, or use swtrace mode cont\n", recs, lost)
					return nil
				}
			}
		case "free":
			err = f.Free()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if op == "off" {
			if st, err := f.Info(); err == nil {
				recs, lost := totals(st)
				msg := ""
				if st.StoppedFull {
					msg = " (a buffer had filled: tracing had stopped)"
				}
				fmt.Fprintf(c.App.Writer, "swtrace: tracing off: %d records, %d lost%s\n", recs, lost, msg)
				if st.Mode == control.ModeCont {
					fmt.Fprintf(c.App.Writer, "swtrace: cont mode: trace written to %s\n", st.ContFile)
				}
				if st.Unwound != "" {
					fmt.Fprintf(c.App.Writer, "swtrace: call stacks: %s\n", st.Unwound)
				}
				return nil
			}
		}
		fmt.Fprintf(c.App.Writer, "swtrace: %s done\n", op)
		return nil
	}
}

func totals(st *control.Status) (recs, lost uint64) {
	for _, c := range st.CPUs {
		recs += c.Records + c.MTERecords
		lost += c.Lost + c.MTELost
	}
	return
}

func cmdGet(c *cli.Context) error {
	if c.NArg() > 1 {
		return usageErr(c, "give at most one file name")
	}
	path := "swtrace.nrm2"
	if c.NArg() == 1 {
		path = c.Args().First()
	}
	f, err := open(c)
	if err != nil {
		return err
	}
	defer f.Close()
	target := path
	if st, err := f.Info(); err == nil {
		if target, err = keepOld(c.App.Writer, path, st); err != nil {
			return fmt.Errorf("get: %w", err)
		}
	}
	if err := f.Get(target); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	st, _ := f.Info()
	if st != nil {
		recs, lost := totals(st)
		fmt.Fprintf(c.App.Writer, "swtrace: wrote %s (%d records, %d lost)\n", path, recs, lost)
	} else {
		fmt.Fprintf(c.App.Writer, "swtrace: wrote %s\n", path)
	}
	return nil
}

// keepOld moves a previous trace at path to path.old, and says so, when
// get is about to write a new one there (as perf keeps perf.data.old):
// only a regular file, and not the stream file a wrap or cont trace is
// being completed in. It returns the path to give get: the stream file's
// own name when path is that file by another (a symbolic link on the
// way), which get completes in place rather than writes anew over it.
func keepOld(w io.Writer, path string, st *control.Status) (string, error) {
	writes := st.State == control.StateOff || st.State == control.StateOn && st.StoppedFull
	if !writes {
		return path, nil // get will say why it writes nothing
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return path, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return path, nil
	}
	if st.Mode != control.ModeNormal && st.ContFile != "" {
		if abs == st.ContFile {
			return path, nil
		}
		if sf, err := os.Stat(st.ContFile); err == nil && os.SameFile(fi, sf) {
			return st.ContFile, nil
		}
	}
	if !mayKeepOld(path) {
		return path, nil // get's own checks apply
	}
	if err := os.Rename(path, path+".old"); err != nil {
		return path, fmt.Errorf("keeping the previous %s: %w", path, err)
	}
	fmt.Fprintf(w, "swtrace: kept the previous %s as %s.old\n", path, path)
	return path, nil
}

// mayKeepOld says whether path may be renamed to path.old: a regular file
// of the caller's, path.old absent or another, in a directory on an
// ordinary file system that nobody else may write (so that no entry
// changes between these checks and the rename, and no other user's file
// is moved or replaced: a root swtrace get in a shared directory renames
// nothing there).
func mayKeepOld(path string) bool {
	euid := uint32(os.Geteuid())
	own := func(p string) bool {
		var st unix.Stat_t
		return unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Uid == euid
	}
	if !own(path) {
		return false
	}
	var none unix.Stat_t
	if err := unix.Lstat(path+".old", &none); err == nil && !own(path+".old") {
		return false
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return false
	}
	defer dir.Close()
	var st unix.Stat_t
	if unix.Fstat(int(dir.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR ||
		(st.Uid != euid && st.Uid != 0) || st.Mode&0o022 != 0 {
		return false
	}
	return control.CheckFileSystem(dir) == nil
}

// infoJSON is swtrace info --json: the status with the names the text
// gives (mode "normal", record types "tprof") where the backend has codes.
type infoJSON struct {
	*control.Status
	Mode    string   `json:"mode"`
	Enabled []string `json:"enabled"`
}

func newInfoJSON(st *control.Status) infoJSON {
	j := infoJSON{Status: st, Mode: control.ModeName(st.Mode), Enabled: []string{}}
	ms := append([]uint16(nil), st.Enabled...)
	sort.Slice(ms, func(i, k int) bool { return ms[i] < ms[k] })
	for _, m := range ms {
		j.Enabled = append(j.Enabled, trace.MajorName(m))
	}
	return j
}

func cmdInfo(c *cli.Context) error {
	f, err := open(c)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Info()
	if err != nil {
		return err
	}
	w := c.App.Writer
	if c.Bool("json") {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(newInfoJSON(st))
	}
	fmt.Fprintf(w, "backend: %s   state: %s", st.Backend, st.State)
	if st.StoppedFull {
		fmt.Fprint(w, " (stopped: a buffer filled)")
	}
	fmt.Fprintln(w)
	rate := fmt.Sprintf("%d Hz", st.RateHz)
	if st.Event != "" {
		rate = fmt.Sprintf("every %d %s", st.RateHz, st.Event)
	}
	bufs := fmt.Sprintf("trace buffer: %s/CPU   MTE buffer: %s/CPU", cliutil.SizeName(int64(st.TraceBufSize)), cliutil.SizeName(int64(st.MTEBufSize)))
	if st.State == control.StateFree {
		bufs = "buffers: not allocated (swtrace init, or on with the defaults)"
	}
	fmt.Fprintf(w, "mode: %s   %s   tprof: %s\n", control.ModeName(st.Mode), bufs, rate)
	if st.ContFile != "" && st.Mode != control.ModeNormal {
		fmt.Fprintf(w, "stream file: %s\n", st.ContFile)
	}
	fmt.Fprintf(w, "enabled: %s\n", enabledNames(st.Enabled))
	if st.Owner >= 0 && st.State != control.StateFree {
		fmt.Fprintf(w, "owner: uid %d (only they or root may stop, write or free this trace)\n", st.Owner)
	}
	if st.StreamError != "" {
		fmt.Fprintf(w, "STREAM WRITE FAILED: %s\n", st.StreamError)
	}
	if st.Note != "" {
		fmt.Fprintf(w, "note: %s\n", st.Note)
	}
	if st.Unwound != "" {
		fmt.Fprintf(w, "call stacks: %s\n", st.Unwound)
	}
	for _, why := range control.NotChosen(st.Backend) {
		fmt.Fprintf(w, "not used: %s\n", why)
	}
	if len(st.CPUs) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CPU\tRECORDS\tLOST\tUSED\tMTE-RECORDS\tMTE-LOST\tMTE-USED\tFULL\t")
	var t control.CPUStatus
	for _, s := range st.CPUs {
		full := ""
		if s.Full {
			full = "yes"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", s.CPU, s.Records, s.Lost, s.Used, s.MTERecords, s.MTELost, s.MTEUsed, full)
		t.Records += s.Records
		t.Lost += s.Lost
		t.Used += s.Used
		t.MTERecords += s.MTERecords
		t.MTELost += s.MTELost
		t.MTEUsed += s.MTEUsed
	}
	fmt.Fprintf(tw, "all\t%d\t%d\t%d\t%d\t%d\t%d\t\t\n", t.Records, t.Lost, t.Used, t.MTERecords, t.MTELost, t.MTEUsed)
	return tw.Flush()
}

func cmdHook(c *cli.Context) error {
	if c.NArg() < 2 {
		return usageErr(c, "give MAJOR and MINOR")
	}
	major, err := strconv.ParseUint(c.Args().Get(0), 0, 16)
	if err != nil {
		return usageErr(c, "bad major %q", c.Args().Get(0))
	}
	if major < uint64(trace.MajorUserFirst) {
		return usageErr(c, "user records need a major code of 0x%x or more", trace.MajorUserFirst)
	}
	minor, err := strconv.ParseUint(c.Args().Get(1), 0, 32)
	if err != nil {
		return usageErr(c, "bad minor %q", c.Args().Get(1))
	}
	var words []uint32
	for _, a := range c.Args().Slice()[2:] {
		v, err := strconv.ParseUint(a, 0, 32)
		if err != nil {
			return usageErr(c, "bad word %q", a)
		}
		words = append(words, uint32(v))
	}
	if len(words) > 0 && c.String("s") != "" {
		return usageErr(c, "a hook record carries words or a string (-s), not both")
	}
	f, err := open(c)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Hook(uint16(major), uint32(minor), words, c.String("s")); err != nil {
		return fmt.Errorf("hook: %w", err)
	}
	return nil
}

func cmdAboveIdle(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErr(c, "unexpected argument %q", c.Args().First())
	}
	iv := c.Float64("i")
	if iv <= 0 || iv > 3600 {
		return usageErr(c, "interval must be between 0 and 3600 seconds")
	}
	n := c.Int("n")
	if n < 0 {
		return usageErr(c, "count must be 0 or more")
	}
	prev, err := cpustat.Read()
	if err != nil {
		return err
	}
	w := c.App.Writer
	for i := 0; n == 0 || i < n; i++ {
		time.Sleep(time.Duration(iv * float64(time.Second)))
		cur, err := cpustat.Read()
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "CPU\tBUSY%%\tIDLE%%\tINTR%%\t\n")
		for _, s := range cpustat.Between(prev, cur) {
			name := strings.TrimPrefix(s.Name, "cpu")
			if name == "" {
				name = "all"
			}
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t\n", name, s.Busy, s.Idle, s.Intr)
		}
		tw.Flush()
		prev = cur
		if n == 0 || i < n-1 {
			fmt.Fprintln(w)
		}
	}
	return nil
}
