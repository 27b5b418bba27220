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
			{Name: "info", Action: func(*cli.Context) error { return nil }}},
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
	} {
		var stdout, stderr bytes.Buffer
		code := Run(testApp(&stdout, &stderr), c.args)
		if code != 2 || stderr.String() != c.want || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2, %q and nothing", c.args, code, stderr.String(), stdout.String(), c.want)
		}
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

func TestNearest(t *testing.T) {
	names := []string{"tprof", "show", "arc", "itrace", "pid", "tid"}
	for in, want := range map[string]string{"tprf": "tprof", "shwo": "show", "itrac": "itrace", "pdi": "pid", "xyz": "", "callgraph": ""} {
		if got := Nearest(in, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
