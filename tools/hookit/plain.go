package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/urfave/cli/v2"
)

// plainCommand runs the uninstrumented build of a program and prints its
// CPU time, for hookit report --plain-cpu (scripts/run.hookit -o plain=PROG).
var plainCommand = &cli.Command{
	Name:      "plain",
	Usage:     "run a program (its uninstrumented build) and print its CPU time, user + system, in ns (for hookit report --plain-cpu)",
	ArgsUsage: "-- PROG [ARGS...]",
	Description: "The program's input is /dev/null and its output is discarded; the figure (from the kernel's\n" +
		"accounting of the child, microseconds) is printed on stdout even when the program fails (then\n" +
		"with a warning on stderr), and includes the program's start-up and exit.",
	Action: plain,
}

func plain(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) == 0 {
		return fmt.Errorf("no program given: hookit plain -- ./prog.plain args")
	}
	cmd := exec.Command(args[0], args[1:]...)
	err := cmd.Run()
	ps := cmd.ProcessState
	if ps == nil {
		return fmt.Errorf("running %s: %w", args[0], err)
	}
	fmt.Println((ps.UserTime() + ps.SystemTime()).Nanoseconds())
	var ee *exec.ExitError
	if err != nil && errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "hookit plain: %s: %v (its CPU time is given all the same)\n", args[0], err)
	}
	return nil
}
