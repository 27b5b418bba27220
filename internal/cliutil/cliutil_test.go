package cliutil

import (
	"bytes"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"perfinsp/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func testApp(stdout, stderr *bytes.Buffer) *cli.App {
	app := &cli.App{
		Name:      "tool",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "tprof"}, &cli.StringFlag{Name: "o"}},
		Commands: []*cli.Command{{Name: "enable", Flags: []cli.Flag{&cli.BoolFlag{Name: "only"}}, Action: func(*cli.Context) error { return nil }},
			{Name: "info", Action: func(*cli.Context) error { return nil }},
			{Name: "itrace", Subcommands: []*cli.Command{
				{Name: "on", Flags: []cli.Flag{&cli.IntFlag{Name: "p"}, &cli.Float64Flag{Name: "s"}, &cli.DurationFlag{Name: "timeout"}},
					Action: func(*cli.Context) error { return nil }},
				{Name: "off", Action: func(*cli.Context) error { return nil }}}},
			{Name: "fail", Action: func(*cli.Context) error { return cli.Exit("name one mode", 2) }},
			{Name: "failhint", Action: func(*cli.Context) error { return cli.Exit("name one mode (see tool --help)", 2) }},
			{Name: "broken", Action: func(*cli.Context) error { return cli.Exit("the facility is busy", 1) }}},
	}
	Apply(app)
	return app
}

// A usage error is one line naming the nearest flag and --help; exit 2.
func TestUsageErrorOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tool", "-tprf"}, "tool: unknown option -tprf: did you mean -tprof? (tool --help for more)\n"},
		{[]string{"tool", "--tprf"}, "tool: unknown option --tprf: did you mean --tprof? (tool --help for more)\n"},
		{[]string{"tool", "enable", "--onyl"}, "tool enable: unknown option --onyl: did you mean --only? (tool enable --help for more)\n"},
		{[]string{"tool", "--zzzzzz"}, "tool: unknown option --zzzzzz (tool --help for more)\n"},
		{[]string{"tool", "enabel"}, "tool: unknown command \"enabel\": did you mean enable? (tool --help for more)\n"},
		// a command of subcommands, none named: not its help
		{[]string{"tool", "itrace"}, "tool itrace: give a command: on or off (tool itrace --help for more)\n"},
		{[]string{"tool", "itrace", "offf"}, "tool itrace: unknown command \"offf\": did you mean off? (tool itrace --help for more)\n"},
		{[]string{"tool", "itrace", "bogus"}, "tool itrace: unknown command \"bogus\": use on or off (tool itrace --help for more)\n"},
		// a value its flag cannot take, or none, in the user's terms
		{[]string{"tool", "itrace", "on", "-p", "abc"}, "tool itrace on: -p \"abc\": not a whole number (tool itrace on --help for more)\n"},
		{[]string{"tool", "itrace", "on", "-s", "x"}, "tool itrace on: -s \"x\": not a number (tool itrace on --help for more)\n"},
		{[]string{"tool", "itrace", "on", "--timeout", "5"}, "tool itrace on: --timeout \"5\": not a duration (such as 500ms, 2s or 1m) (tool itrace on --help for more)\n"},
		{[]string{"tool", "itrace", "on", "-p"}, "tool itrace on: -p needs a value (tool itrace on --help for more)\n"},
		{[]string{"tool", "--o"}, "tool: --o needs a value (tool --help for more)\n"},
		// a one-letter slip has nothing left in common: no guess
		{[]string{"tool", "enable", "--x"}, "tool enable: unknown option --x (tool enable --help for more)\n"},
		// a usage error a command returns (exit 2) points to --help, once
		{[]string{"tool", "fail"}, "tool: name one mode (tool --help for more)\n"},
		{[]string{"tool", "failhint"}, "tool: name one mode (see tool --help)\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(testApp(&stdout, &stderr), c.args)
		if code != 2 || stderr.String() != c.want || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2, %q and nothing", c.args, code, stderr.String(), stdout.String(), c.want)
		}
	}
}

// An error that is no usage error keeps its exit code and gets no hint;
// a command of subcommands still answers --help with its help.
func TestOtherErrorsNoHint(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Run(testApp(&stdout, &stderr), []string{"tool", "broken"}); code != 1 || stderr.String() != "tool: the facility is busy\n" {
		t.Errorf("tool broken: exit %d, stderr %q", code, stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := Run(testApp(&stdout, &stderr), []string{"tool", "itrace", "--help"}); code != 0 || !strings.Contains(stdout.String(), "on") || stderr.Len() != 0 {
		t.Errorf("tool itrace --help: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// --version prints the tool's name and the build's version string.
func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Run(testApp(&stdout, &stderr), []string{"tool", "--version"}); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got := stdout.String(); got != "tool (perfinsp) "+Version()+"\n" || strings.TrimSpace(Version()) == "" {
		t.Errorf("--version: %q", got)
	}
}

// Every command and subcommand answers --version as the tool does, and
// does nothing else (the command's action is not run).
func TestVersionOfCommands(t *testing.T) {
	for _, args := range [][]string{
		{"tool", "enable", "--version"},
		{"tool", "broken", "--version"},
		{"tool", "itrace", "--version"},
		{"tool", "itrace", "on", "--version"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(testApp(&stdout, &stderr), args)
		if code != 0 || stdout.String() != "tool (perfinsp) "+Version()+"\n" || stderr.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and the version", args, code, stdout.String(), stderr.String())
		}
	}
}

func TestNearest(t *testing.T) {
	names := []string{"tprof", "show", "arc", "itrace", "pid", "tid"}
	for in, want := range map[string]string{"tprf": "tprof", "shwo": "show", "itrac": "itrace", "pdi": "pid", "xyz": "", "callgraph": "", "x": "", "ti": "tid"} {
		if got := Nearest(in, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Nearest("x", []string{"h", "help"}); got != "" {
		t.Errorf("Nearest(x, h) = %q: a one-letter option replaced whole is no slip", got)
	}
}

// Closest puts first, at equal distance, the names holding the given
// letters in order.
func TestClosest(t *testing.T) {
	if got := strings.Join(Closest("spn", []string{"cp", "sh", "spin2"}, 3), ","); got != "spin2,cp,sh" {
		t.Errorf("Closest(spn) = %s, want spin2 first", got)
	}
	if got := strings.Join(Closest("jav", []string{"bash", "java", "javac"}, 3), ","); got != "java,javac" {
		t.Errorf("Closest(jav) = %s", got)
	}
}

func TestOptionsFirst(t *testing.T) {
	values := map[string]bool{"-f": true, "-p": true}
	for in, want := range map[string]string{
		"cont -f big.nrm2": "-f big.nrm2 | cont",
		"-p 5 flush":       "-p 5 | flush",
		"0x100 1 -x 2":     "-x | 0x100 1 2",
		"0x100 -- -5 -f x": " | -- 0x100 -5 -f x",
		"-f":               "-f | ",
		"- a":              " | - a",
		"-f -- -- x":       "-f -- | -- x",
	} {
		opts, rest := OptionsFirst(strings.Fields(in), values)
		if got := strings.Join(opts, " ") + " | " + strings.Join(rest, " "); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
