package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"perfinsp/internal/daemonproto"
	"perfinsp/libperfutil/daemonclient"
)

// daemonCommand is `swtrace daemon stop`: stop the pitraced that swtrace
// (or ptt) started, rather than kill it or wait for its idle exit.
var daemonCommand = &cli.Command{
	Name:      "daemon",
	Usage:     "the pitraced daemon: stop",
	UsageText: "swtrace daemon stop [--force]",
	Subcommands: []*cli.Command{{
		Name:  "stop",
		Usage: "stop pitraced (root, or the user whose own agent it is)",
		Description: "Stops the daemon at PERFINSP_SOCKET (default the system socket) or, for a user who\n" +
			"cannot reach that, the user's own agent. A daemon that holds a trace (tracing on, or\n" +
			"buffers not yet written or freed) or counts PTT is left running unless --force: it would\n" +
			"lose them.",
		Flags:  []cli.Flag{&cli.BoolFlag{Name: "force", Usage: "stop it even when it holds a trace or PTT counts (they are lost)"}},
		Action: cmdDaemonStop,
	}},
}

func cmdDaemonStop(c *cli.Context) error {
	paths := []string{daemonproto.SocketPath()}
	if os.Geteuid() != 0 {
		if p, err := daemonproto.UserSocketPath(); err == nil {
			paths = append(paths, p)
		}
	}
	var cl *daemonclient.Client
	var path string
	for _, p := range paths {
		if x, err := daemonclient.Connect(p); err == nil {
			cl, path = x, p
			break
		}
	}
	if cl == nil {
		fmt.Fprintf(c.App.ErrWriter, "swtrace: pitraced is not running (no daemon at %s)\n", paths[0])
		return nil
	}
	defer cl.Close()
	ping, err := cl.Ping()
	if err != nil {
		return fmt.Errorf("daemon stop: %w", err)
	}
	if ping.Busy && !c.Bool("force") {
		return cli.Exit(fmt.Sprintf("daemon stop: pitraced (pid %d) holds a trace or PTT counts that stopping it would lose: "+
			"write or drop the trace first (swtrace off; swtrace get, or swtrace free; ptt off), or give --force", ping.PID), 1)
	}
	if err := cl.Shutdown(); err != nil {
		return fmt.Errorf("daemon stop: %w", err)
	}
	// The daemon exits once it has stopped its work: wait for it, a bounded time.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(ping.PID)); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "swtrace: pitraced (pid %d, %s) stopped\n", ping.PID, path)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("daemon stop: pitraced (pid %d) was asked to stop and still runs after 10 s", ping.PID)
}
