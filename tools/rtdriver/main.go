// Command rtdriver sends a command to the call-flow runtime (libhookit) of
// a running program, as PI's rtdriver does: start, end, flush, reset,
// shutdown. See docs/callflow.md.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"perfinsp/internal/cliutil"
)

var commands = map[string]string{
	"start":    "switch recording on (the program may have started with run.hookit -s off)",
	"end":      "switch recording off and write what is recorded to the files",
	"flush":    "write what is recorded to the files now (JProf's agent: its reports too, before it answers)",
	"reset":    "the reports count again from here (the call stacks are kept)",
	"shutdown": "stop recording and close the files as at exit",
}

func main() {
	os.Exit(cliutil.Run(newApp(os.Stdout, os.Stderr), reorder(os.Args)))
}

// valueFlags are the options that take a value (the next argument unless
// written -p=PID).
var valueFlags = map[string]bool{"-d": true, "--d": true, "-dir": true, "--dir": true,
	"-p": true, "--p": true, "-pid": true, "--pid": true, "-timeout": true, "--timeout": true}

// reorder moves the options in front of the command, so that
// `rtdriver flush -p PID` and `rtdriver start --help` work as well as
// `rtdriver -p PID flush` (the CLI library stops at the first argument;
// and its --help followed by a word looks for a subcommand of that name).
func reorder(args []string) []string {
	if len(args) == 0 {
		return args
	}
	flags, pos := cliutil.OptionsFirst(args[1:], valueFlags)
	for _, f := range flags {
		if f == "-h" || f == "--help" || f == "-help" {
			pos = nil // the help is the tool's: it has no command of that name
		}
	}
	return append(append([]string{args[0]}, flags...), pos...)
}

// order is the commands as the help lists them.
var order = []string{"start", "end", "flush", "reset", "shutdown"}

func newApp(stdout, stderr io.Writer) *cli.App {
	var list []string
	for _, c := range order {
		list = append(list, fmt.Sprintf("  %-9s %s", c, commands[c]))
	}
	app := &cli.App{
		Name:      "rtdriver",
		Writer:    stdout,
		ErrWriter: stderr,
		Usage:     "control the call-flow runtime of a running program",
		UsageText: "rtdriver [-d DIR] -p PID COMMAND",
		Description: "Commands:\n" + strings.Join(list, "\n") + "\n\n" +
			"The runtime listens on DIR/hookit-PID.sock (DIR: run.hookit's -o, HOOKIT_DIR).\n" +
			"Without -p, the one socket in DIR is used.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "d", Aliases: []string{"dir"}, Value: "hookit.out", Usage: "the program's hookit directory (run.hookit -o)"},
			&cli.IntFlag{Name: "p", Aliases: []string{"pid"}, Usage: "process id of the program"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "how long to wait for the answer (flush: at least " + flushTimeout.String() + ")"},
		},
		Action: func(c *cli.Context) error { return run(c, stdout) },
	}
	cliutil.Apply(app)
	return app
}

func socketPath(dir string, pid int) (string, error) {
	if pid > 0 {
		return filepath.Join(dir, "hookit-"+strconv.Itoa(pid)+".sock"), nil
	}
	m, err := filepath.Glob(filepath.Join(dir, "hookit-*.sock"))
	if err != nil {
		return "", fmt.Errorf("looking for the runtime's socket: %w", err)
	}
	switch len(m) {
	case 0:
		return "", fmt.Errorf("no hookit-PID.sock in %s: is the program running under scripts/run.hookit with -o %s?", dir, dir)
	case 1:
		return m[0], nil
	}
	return "", fmt.Errorf("%d programs in %s: say which with -p PID", len(m), dir)
}

// checkServer makes sure the socket is served by the program it names
// (the process that listens on it: pid from -p, else from the socket's
// name) and that it runs as this user or root: a socket another user
// planted in a shared directory gets no command and its answer is not
// believed.
func checkServer(conn *net.UnixConn, path string, pid int) error {
	if pid <= 0 {
		m := sockName.FindStringSubmatch(filepath.Base(path))
		if m == nil {
			return fmt.Errorf("%s is not named hookit-PID.sock", path)
		}
		pid, _ = strconv.Atoi(m[1])
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		cerr = err
	}
	if cerr != nil {
		return fmt.Errorf("%s: who serves it: %w", path, cerr)
	}
	if int(cred.Pid) != pid {
		return fmt.Errorf("%s is served by pid %d, not by pid %d: not that program's runtime", path, cred.Pid, pid)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is served by a process of uid %d, neither you (uid %d) nor root: not sending it anything", path, cred.Uid, os.Geteuid())
	}
	return nil
}

// flushTimeout is the least time a flush is given to answer: JProf's agent
// writes PI's reports (and its lock/wall profile) before it answers.
const flushTimeout = 5 * time.Minute

var sockName = regexp.MustCompile(`^hookit-(\d+)\.sock$`)

func run(c *cli.Context, stdout io.Writer) error {
	if c.NArg() != 1 {
		return cliutil.UsageError(c, "give one command: start, end, flush, reset or shutdown")
	}
	cmd := c.Args().First()
	if _, ok := commands[cmd]; !ok {
		if s := cliutil.Nearest(cmd, order); s != "" {
			return cliutil.UsageError(c, fmt.Sprintf("unknown command %q: did you mean %s?", cmd, s))
		}
		return cliutil.UsageError(c, fmt.Sprintf("unknown command %q: use start, end, flush, reset or shutdown", cmd))
	}
	path, err := socketPath(c.String("d"), c.Int("p"))
	if err != nil {
		return err
	}
	conn, err := net.DialTimeout("unix", path, c.Duration("timeout"))
	if err != nil {
		return fmt.Errorf("connecting to %s (has the program exited?): %w", path, err)
	}
	defer conn.Close()
	if err := checkServer(conn.(*net.UnixConn), path, c.Int("p")); err != nil {
		return err
	}
	timeout := c.Duration("timeout")
	if cmd == "flush" && timeout < flushTimeout {
		timeout = flushTimeout // a JVM's agent answers once its reports are written
	}
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return fmt.Errorf("setting the deadline: %w", err)
	}
	if _, err := conn.Write([]byte(cmd + "\n")); err != nil {
		return fmt.Errorf("sending %s: %w", cmd, err)
	}
	reply, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	r := strings.TrimSpace(string(reply))
	if !strings.HasPrefix(r, "ok") {
		return fmt.Errorf("the runtime answered: %s", r)
	}
	fmt.Fprintln(stdout, r)
	return nil
}
