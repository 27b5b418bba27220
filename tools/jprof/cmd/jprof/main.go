// Command jprof attaches JProf's JVMTI agent (bin/libjprof.so) to a running
// JVM through the JDK's jcmd, lets it record for a while or until Ctrl-C,
// then stops it (the JVM runs on, and can be attached again) and says
// where its outputs are. See docs/jprof.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"perfinsp/internal/cliutil"
)

func main() {
	os.Exit(cliutil.Run(newApp(os.Stdout, os.Stderr), os.Args))
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:      "jprof",
		Writer:    stdout,
		ErrWriter: stderr,
		Usage:     "attach JProf's agent to a running JVM, record, detach",
		UsageText: "jprof --pid PID [--duration D] [--dir DIR] [OPTIONS]\n   jprof --pid PID --flush",
		Description: "OPTIONS are the agent's (default tprof), comma-separated:\n" +
			"  tprof        JIT code named in the trace being recorded (swtrace on / run.tprof),\n" +
			"               Java stacks sampled into DIR/jprof-PID.jstk for post (jstacks=off|HZ)\n" +
			"  lock         contended monitor entries and their waits  } DIR/jprof-PID.pb.gz (pprof)\n" +
			"  wall[=MS]    every Java thread's stack every MS (50) ms } and DIR/jprof-PID-KIND.folded\n" +
			"  jitdump      the JVM's code with its bytes, DIR/jit-PID.dump (perf inject --jit)\n" +
			"  sig          names as PI shows them, pkg/Class.method(args)ret;  verbose: counts at the end\n\n" +
			"jprof runs the JDK's jcmd (from JAVA_HOME, else the PATH) as you: only the JVM's own user\n" +
			"can attach to it. The agent stops at the end of --duration, at Ctrl-C, or writes its\n" +
			"outputs when the JVM ends; the JVM runs on and can be attached again. calltree mode\n" +
			"needs the agent from the JVM's start (-agentpath:libjprof.so=calltree).",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "pid", Aliases: []string{"p"}, Usage: "process id of the JVM"},
			&cli.DurationFlag{Name: "duration", Aliases: []string{"t"}, Usage: "record this long (default: until Ctrl-C or the JVM's end)"},
			&cli.StringFlag{Name: "dir", Aliases: []string{"d"}, Usage: "directory of the outputs, writable by the JVM's user (default: the agent's, /tmp)"},
			&cli.StringFlag{Name: "agent", Usage: "the agent library (default: libjprof.so next to jprof)"},
			&cli.BoolFlag{Name: "flush", Usage: "only make the agent running in the JVM write its profile and reports of the run so far (as rtdriver flush), and return"},
		},
		Action: run,
	}
	cliutil.Apply(app)
	return app
}

func run(c *cli.Context) error {
	if c.NArg() > 1 {
		return cliutil.UsageError(c, "give the agent's options as one comma-separated list (tprof,lock,wall=20)")
	}
	if !c.IsSet("pid") || c.Int("pid") <= 0 {
		return cliutil.UsageError(c, "give the JVM's process id: --pid PID")
	}
	if c.Duration("duration") < 0 {
		return cliutil.UsageError(c, "--duration must not be negative")
	}
	if c.Bool("flush") {
		if c.NArg() > 0 || c.IsSet("duration") || c.IsSet("dir") {
			return cliutil.UsageError(c, "--flush takes no options, --duration or --dir: the running agent keeps its own")
		}
		a, err := newAttacher(c.Int("pid"), c.String("agent"), "")
		if err != nil {
			return err
		}
		if err := a.load("flush"); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "jprof: the agent in pid %d wrote its profile and reports of the run so far (the JVM's stderr names them)\n", a.pid)
		return nil
	}
	opts, err := parseOptions(c.Args().First())
	if err != nil {
		return cliutil.UsageError(c, err.Error())
	}
	a, err := newAttacher(c.Int("pid"), c.String("agent"), c.String("dir"))
	if err != nil {
		return err
	}
	return a.record(c.App.ErrWriter, opts, c.Duration("duration"))
}

// record attaches with opts, waits for the duration, a signal or the JVM's
// end, stops the agent and lists its outputs on w.
func (a *attacher) record(w io.Writer, opts options, d time.Duration) error {
	ended := a.watchExit()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	since := time.Now().Add(-50 * time.Millisecond) // file times are the kernel's coarse clock
	if err := a.load(opts.agentString(a.dir)); err != nil {
		return err
	}
	until := "Ctrl-C stops it"
	var timer <-chan time.Time
	if d > 0 {
		until = "for " + d.String() + " (Ctrl-C stops it sooner)"
		timer = time.After(d)
	}
	fmt.Fprintf(w, "jprof: attached to pid %d (%s), %s\n", a.pid, opts, until)
	select {
	case <-ended:
		fmt.Fprintf(w, "jprof: pid %d ended: the agent wrote its outputs at the JVM's end\n", a.pid)
		return a.listOutputs(w, opts, since)
	case <-timer:
	case <-ctx.Done():
	}
	stop() // a second Ctrl-C ends jprof at once
	if err := a.load("stop"); err != nil {
		select {
		case <-ended:
			fmt.Fprintf(w, "jprof: pid %d ended: the agent wrote its outputs at the JVM's end\n", a.pid)
			return a.listOutputs(w, opts, since)
		default:
			return fmt.Errorf("stopping the agent: %w", err)
		}
	}
	fmt.Fprintf(w, "jprof: detached from pid %d (it runs on; attach again at will)\n", a.pid)
	return a.listOutputs(w, opts, since)
}

// listOutputs names the files the agent wrote since the attach; an error
// when one it writes at its end is not there.
func (a *attacher) listOutputs(w io.Writer, opts options, since time.Time) error {
	dir := a.dir
	if dir == "" {
		dir = "/tmp"
	}
	missing := 0
	for _, o := range opts.outputs(dir, a.pid) {
		st, err := os.Stat(o.path)
		switch {
		case err == nil && !st.ModTime().Before(since):
			fmt.Fprintf(w, "jprof: %s: %s\n", o.what, o.path)
		case o.atEnd:
			fmt.Fprintf(w, "jprof: no %s in %s\n", o.what, o.path)
			missing++
		}
	}
	if opts.has("tprof") {
		fmt.Fprintf(w, "jprof: JIT records: in the trace being recorded, if tracing was on (post --perfmap-dir %s names interpreted frames)\n", dir)
	}
	if missing > 0 {
		return fmt.Errorf("the agent did not write %d of its files: it says why on the JVM's stderr (a --dir the JVM's user cannot write?)", missing)
	}
	return nil
}

// absDir is dir made absolute (the JVM resolves it from its own working
// directory), "" kept.
func absDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--dir %s: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("--dir: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("--dir %s is not a directory", abs)
	}
	if strings.ContainsAny(abs, ",\"") {
		return "", fmt.Errorf("--dir %s: the agent's options cannot carry a path with a comma or a quote", abs)
	}
	return abs, nil
}
