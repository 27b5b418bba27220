package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"perfinsp/internal/cliutil"
	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }

// A wrong value of report's options is a usage error (one line, exit 2)
// found before anything is read or written: not after the files are
// loaded, nor after --train wrote its file.
func TestReportOptionsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	train := filepath.Join(dir, "train.minima")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cal", "bogus"}, "hookit report: --cal \"bogus\": use minima, startup or none (hookit report --help for more)\n"},
		{[]string{"--seq-key", "9x9"}, "hookit report: --seq-key: sequence key \"9x9\": use TYPESxTRANSITIONS with 8, 6 or 1 types and 3 or 2 transitions (8x3 is PI's, 6x2 the 6 Java types x entry/exit) (hookit report --help for more)\n"},
		{[]string{"--plain-cpu", "55"}, "hookit report: --plain-cpu \"55\": give a duration such as 55.2ms (hookit report --help for more)\n"},
	} {
		var stdout, stderr bytes.Buffer
		app := newApp()
		app.Writer, app.ErrWriter = &stdout, &stderr
		args := append([]string{"hookit", "report", "-i", filepath.Join(dir, "none"), "--train", train}, c.args...)
		if code := cliutil.Run(app, args); code != 2 || stderr.String() != c.want || stdout.Len() != 0 {
			t.Errorf("hookit report %q: exit %d, stderr %q, stdout %q; want 2 and %q", c.args, code, stderr.String(), stdout.String(), c.want)
		}
		if _, err := os.Stat(train); err == nil {
			t.Fatalf("hookit report %q wrote the --train file", c.args)
		}
	}
}
