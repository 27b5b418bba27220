package main

import (
	"bytes"
	"testing"

	"perfinsp/internal/cliutil"
	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }

// A usage error (no command, an unknown one, a wrong option) is one line
// pointing to --help, exit 2, before any socket is looked for; a slip of
// a command's name is named.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "rtdriver: give one command: start, end, flush, reset or shutdown (rtdriver --help for more)\n"},
		{[]string{"strat"}, "rtdriver: unknown command \"strat\": did you mean start? (rtdriver --help for more)\n"},
		{[]string{"bogus"}, "rtdriver: unknown command \"bogus\": use start, end, flush, reset or shutdown (rtdriver --help for more)\n"},
		{[]string{"start", "end"}, "rtdriver: give one command: start, end, flush, reset or shutdown (rtdriver --help for more)\n"},
		{[]string{"--pdi", "1", "start"}, "rtdriver: unknown option --pdi: did you mean --pid? (rtdriver --help for more)\n"},
		{[]string{"-p", "x", "start"}, "rtdriver: -p \"x\": not a whole number (rtdriver --help for more)\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := cliutil.Run(newApp(&stdout, &stderr), append([]string{"rtdriver", "-d", t.TempDir()}, c.args...))
		if code != 2 || stderr.String() != c.want || stdout.Len() != 0 {
			t.Errorf("rtdriver %q: exit %d, stderr %q, stdout %q; want 2 and %q", c.args, code, stderr.String(), stdout.String(), c.want)
		}
	}
	// A command with no program to send it to is no usage error.
	var stdout, stderr bytes.Buffer
	if code := cliutil.Run(newApp(&stdout, &stderr), []string{"rtdriver", "-d", t.TempDir(), "start"}); code != 1 || !bytes.Contains(stderr.Bytes(), []byte("no hookit-PID.sock in")) {
		t.Errorf("rtdriver start with no program: exit %d, stderr %q", code, stderr.String())
	}
}
