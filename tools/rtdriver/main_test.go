package main

import (
	"bytes"
	"path/filepath"
	"strings"
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

// Options may follow the command, as users write them: rtdriver flush -p
// PID, rtdriver start --help.
func TestOptionsAfterCommand(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cliutil.Run(newApp(&stdout, &stderr), reorder(append([]string{"rtdriver"}, args...)))
		return code, stdout.String(), stderr.String()
	}
	if code, out, errs := run("start", "--help"); code != 0 || !strings.Contains(out, "rtdriver - control the call-flow runtime") || errs != "" {
		t.Errorf("rtdriver start --help: exit %d, stdout %q, stderr %q; want 0 and the help", code, out, errs)
	}
	if code, out, errs := run("flush", "-d", dir); code != 1 || out != "" || !strings.Contains(errs, "no hookit-PID.sock in "+dir+":") {
		t.Errorf("rtdriver flush -d DIR: exit %d, stdout %q, stderr %q; want 1 and no socket in DIR", code, out, errs)
	}
	if code, _, errs := run("end", "-d", dir, "-p", "x"); code != 2 || errs != "rtdriver: -p \"x\": not a whole number (rtdriver --help for more)\n" {
		t.Errorf("rtdriver end -p x: exit %d, stderr %q; want the usage error about -p", code, errs)
	}
	if code, _, errs := run("-d", dir, "reset", "--timeout=1s", "-p", "1"); code != 1 || !strings.Contains(errs, filepath.Join(dir, "hookit-1.sock")) {
		t.Errorf("rtdriver reset --timeout=1s -p 1: exit %d, stderr %q; want the socket of pid 1 in DIR", code, errs)
	}
}
