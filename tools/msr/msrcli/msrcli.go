// Package msrcli is the msr command (tools/msr), kept importable so that
// the VM test (scripts/vmtest/pitest) runs exactly the tool's code.
package msrcli

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"perfinsp/internal/cliutil"

	"perfinsp/libperfutil/events"
	"perfinsp/libperfutil/msr"
)

// Run runs msr with args (args[0] is the program name) and returns the
// exit status.
func Run(args []string, stdout, stderr io.Writer) int {
	app := App(stdout, stderr)
	cliutil.Apply(app)
	return cliutil.Run(app, args)
}

// App is the msr command.
func App(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:  "msr",
		Usage: "read or write a model-specific register (x86 MSR) on one or every CPU",
		UsageText: "msr -r REG [-c CPU | -a]        read REG (a name of msr -l, or a number: 0x10)\n" +
			"msr -w REG VALUE [-c CPU | -a]  write VALUE (0x.. or decimal) to REG\n" +
			"msr -l                          list the register names\n\n" +
			"Access: the pitrace module (/dev/pitrace; writes only to its allowlist unless it was\n" +
			"loaded with allow_writes=1), else /dev/cpu/N/msr (modprobe msr). Root only.",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// Run returns exit errors instead of exiting (the VM test runs the
		// tool in-process).
		ExitErrHandler: func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "read", Aliases: []string{"r"}, Usage: "read register `REG`"},
			&cli.StringFlag{Name: "write", Aliases: []string{"w"}, Usage: "write register `REG` (the value follows: msr -w REG VALUE)"},
			&cli.IntFlag{Name: "cpu", Aliases: []string{"c"}, Value: 0, Usage: "on CPU `N`"},
			&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "on every online CPU"},
			&cli.BoolFlag{Name: "list", Aliases: []string{"l"}, Usage: "list the register names"},
			&cli.BoolFlag{Name: "decimal", Aliases: []string{"d"}, Usage: "print values in decimal too"},
			&cli.StringFlag{Name: "backend", Value: "auto", Usage: "`kmod` (/dev/pitrace), devmsr (/dev/cpu/N/msr) or auto"},
		},
		Action: func(c *cli.Context) error { return action(c, stdout) },
	}
}

func action(c *cli.Context, stdout io.Writer) error {
	if c.Bool("list") {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tADDRESS\tDESCRIPTION")
		for _, r := range msr.Regs() {
			fmt.Fprintf(tw, "%s\t%#x\t%s\n", r.Name, r.Addr, r.Help)
		}
		return tw.Flush()
	}
	rd, wr := c.String("read"), c.String("write")
	args := c.Args().Slice()
	if (rd == "") == (wr == "") {
		return cli.Exit("give one of -r REG or -w REG VALUE", 2)
	}
	var value uint64
	if wr != "" {
		if len(args) == 0 {
			return cli.Exit("msr -w REG VALUE: the value is missing", 2)
		}
		v, err := msr.ParseValue(args[0])
		if err != nil {
			return cli.Exit(err.Error(), 2)
		}
		value = v
		args = args[1:]
	}
	// Flags after the value (msr -w REG VALUE -c 1): urfave/cli stops at
	// the first argument, so read them here.
	cpu, all, cpuGiven := c.Int("cpu"), c.Bool("all"), c.IsSet("cpu")
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-a", "--all", "-all":
			all = true
		case "-c", "--cpu", "-cpu":
			if i+1 >= len(args) {
				return cli.Exit("-c needs a CPU number", 2)
			}
			n, err := strconv.Atoi(args[i+1])
			if err != nil {
				return cli.Exit(fmt.Sprintf("-c %q: not a CPU number", args[i+1]), 2)
			}
			cpu, cpuGiven = n, true
			i++
		default:
			return cli.Exit(fmt.Sprintf("unexpected argument %q", args[i]), 2)
		}
	}
	if all && cpuGiven {
		return cli.Exit("give -c CPU or -a (every CPU), not both", 2)
	}
	if cpu < 0 {
		return cli.Exit(fmt.Sprintf("-c %d: not a CPU number", cpu), 2)
	}
	regName := rd
	if wr != "" {
		regName = wr
	}
	reg, err := msr.ParseReg(regName)
	if err != nil {
		return cli.Exit(err.Error(), 2)
	}
	cpus := []int{cpu}
	if all {
		if cpus, err = events.OnlineCPUs(); err != nil {
			return err
		}
	}
	a, err := msr.Open(c.String("backend"))
	if err != nil {
		return err
	}
	defer a.Close()
	label := fmt.Sprintf("%#x", reg)
	if n := msr.NameOf(reg); n != "" {
		label = n + " (" + label + ")"
	}
	for _, cp := range cpus {
		if wr != "" {
			if err := a.Write(cp, reg, value); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "cpu %d: %s <- 0x%016x\n", cp, label, value)
			continue
		}
		v, err := a.Read(cp, reg)
		if err != nil {
			return err
		}
		if c.Bool("decimal") {
			fmt.Fprintf(stdout, "cpu %d: %s = 0x%016x (%d)\n", cp, label, v, v)
		} else {
			fmt.Fprintf(stdout, "cpu %d: %s = 0x%016x\n", cp, label, v)
		}
	}
	return nil
}
