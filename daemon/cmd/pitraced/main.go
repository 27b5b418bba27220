// Command pitraced is the user-space half of the perfinsp trace facility.
// On kernels without the pitrace module it implements the facility from
// mainline mechanisms (perf_event sampling, side-band records and
// tracepoints, /proc) and serves swtrace and libperfutil over a Unix socket.
package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"perfinsp/daemon/facility"
	"perfinsp/daemon/itrace"
	"perfinsp/daemon/server"
	"perfinsp/internal/cliutil"
	"perfinsp/internal/daemonproto"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == itrace.HelperArg {
		// One ITrace session's tracer, started by the daemon with the
		// caller's credentials (daemon/itrace/helper.go).
		os.Exit(itrace.HelperMain())
	}
	app := &cli.App{
		Name:  "pitraced",
		Usage: "perfinsp trace facility daemon (serves swtrace when the pitrace module is not loaded)",
		Description: "pitraced owns the per-CPU MTE and trace buffers, samples with perf_event, records\n" +
			"process lifecycle and executable mappings, and drains continuous mode to files.\n" +
			"swtrace starts it on demand; it can also run as a service (see daemon/pitraced.service).\n" +
			"The control socket is root-only unless --group names a group whose members may use it.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Value: daemonproto.SocketPath(), Usage: "control socket path (env " + daemonproto.EnvSocket + ")"},
			&cli.StringFlag{Name: "group", Usage: "let members of `GROUP` use the control socket (mode 0660)"},
			&cli.DurationFlag{Name: "idle-exit", Usage: "exit after this long without requests while not tracing and holding no unsaved trace (0: never)"},
			&cli.BoolFlag{Name: "quiet", Usage: "log nothing but errors"},
			&cli.DurationFlag{Name: "request-timeout", Value: server.RequestTimeout, Usage: "close a connection whose request is not complete this long after its first byte"},
			&cli.BoolFlag{Name: "user", Usage: "run as a user's own agent (no root): host the ptt holder and the module's stream drainer for this user only; started on demand by ptt and swtrace"},
		},
		Commands: []*cli.Command{continuousCommand()},
		Action:   run,
	}
	cliutil.Apply(app)
	os.Exit(cliutil.Run(app, os.Args))
}

func run(c *cli.Context) error {
	if c.NArg() > 0 {
		cli.ShowAppHelp(c)
		return fmt.Errorf("unexpected argument %q", c.Args().First())
	}
	user := c.Bool("user")
	if os.Geteuid() != 0 && !user {
		return fmt.Errorf("pitraced must run as root (it opens system-wide perf events): run it with sudo or as the pitraced service (or with --user as a user's own agent)")
	}
	logger := log.New(os.Stderr, "pitraced: ", log.LstdFlags)
	s := &server.Server{
		Fac:      facility.New(),
		Path:     c.String("socket"),
		Group:    c.String("group"),
		IdleExit: c.Duration("idle-exit"),
		User:     user,

		RequestTimeout: c.Duration("request-timeout"),
	}
	// Every line is escaped (server.LogSafe): a client's words never make
	// a line, or a token, of their own in the log.
	logf := func(format string, args ...any) { logger.Print(server.LogSafe(fmt.Sprintf(format, args...))) }
	if !c.Bool("quiet") {
		s.Log = logf
	}
	registerExtensions(s, logf)
	if err := s.Listen(); err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		s.Shutdown()
	}()
	if s.Log != nil {
		s.Log("listening on %s (pid %d)", s.Path, os.Getpid())
	}
	return s.Serve()
}
