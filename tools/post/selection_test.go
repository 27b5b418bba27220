package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --pid, --tid or --comm that names nothing in the trace fails, saying
// so (with the closest names for --comm), and writes no report of 0 ticks;
// one in the trace is reported.
func TestSelectionNotInTrace(t *testing.T) {
	dir := t.TempDir()
	path, ticks := synthetic(t, dir, 0)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pid", "99999999"}, "post: --pid 99999999: no such process in the trace"},
		{[]string{"--tid", "77777"}, "post: --tid 77777: no such thread in the trace"},
		{[]string{"--comm", "nosuch"}, "post: --comm nosuch: no process of that name in the trace\n"},
		{[]string{"--comm", "jav"}, "post: --comm jav: no process of that name in the trace; the closest: java"},
	} {
		out := filepath.Join(dir, strings.TrimLeft(c.args[0], "-"), c.args[1])
		_, errs, code := runPost(t, dir, append([]string{"-r", path, "-tprof", "-o", out}, c.args...)...)
		if code == 0 || !strings.HasPrefix(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want %q", c.args, code, errs, c.want)
		}
		if _, err := os.Stat(filepath.Join(out, "tprof.out")); err == nil {
			t.Errorf("%v: a report of nothing was written", c.args)
		}
	}
	out := filepath.Join(dir, "java")
	if _, errs, code := runPost(t, dir, "-r", path, "-tprof", "-o", out, "--comm", "java"); code != 0 {
		t.Fatalf("--comm java: exit %d: %s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(out, "tprof.out")); err != nil || !strings.Contains(string(b), "Total Ticks") || ticks == 0 {
		t.Errorf("--comm java: %v\n%s", err, b)
	}
}

// A usage error is one line naming the nearest option and --help.
func TestUsageErrorOneLine(t *testing.T) {
	for args, want := range map[string]string{
		"-tprf":  "post: unknown option -tprf: did you mean -tprof? (post --help for more)\n",
		"--tprf": "post: unknown option --tprf: did you mean --tprof? (post --help for more)\n",
	} {
		out, errs, code := runPost(t, t.TempDir(), args)
		if code != 2 || errs != want || out != "" {
			t.Errorf("post %s: exit %d, stderr %q, stdout %q; want 2 and %q", args, code, errs, out, want)
		}
	}
}
