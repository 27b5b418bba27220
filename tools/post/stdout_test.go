package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// TestReportOnStdout: a report written to post's own stdout (the file
// stdout is redirected to, as --folded /dev/stdout > FILE gives it) holds
// the report alone — post's "wrote" lines go to stderr then — so the
// folded stacks are all folded lines with every tick, and a pprof profile
// parses; written elsewhere, the lines stay on stdout.
func TestReportOnStdout(t *testing.T) {
	dir := t.TempDir()
	nrm, ticks := synthetic(t, dir, 0)
	for _, c := range []struct{ flag, name string }{{"--folded", "out.folded"}, {"--pprof", "out.pb.gz"}} {
		path := filepath.Join(dir, c.name)
		stdout, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		code := run([]string{"-o", dir, "-r", nrm, c.flag, path}, stdout, &stderr)
		stdout.Close()
		if code != 0 {
			t.Fatalf("post %s: exit %d\n%s", c.flag, code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "post: wrote "+path) {
			t.Errorf("post %s: stderr does not say what was written:\n%s", c.flag, stderr.String())
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if c.flag == "--pprof" {
			if _, err := profile.ParseData(data); err != nil {
				t.Errorf("the profile written on stdout: %v", err)
			}
			continue
		}
		line := regexp.MustCompile(`^\S.* (\d+)$`)
		sum := 0
		for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			m := line.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("not a folded line: %q in\n%s", l, data)
			}
			n, _ := strconv.Atoi(m[1])
			sum += n
		}
		if sum != ticks {
			t.Errorf("the folded stacks on stdout hold %d ticks, the trace %d", sum, ticks)
		}
	}
	// elsewhere: the lines on stdout, as before
	stdout, err := os.Create(filepath.Join(dir, "stdout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	var stderr bytes.Buffer
	folded := filepath.Join(dir, "f.folded")
	if code := run([]string{"-o", dir, "-r", nrm, "--folded", folded}, stdout, &stderr); code != 0 {
		t.Fatalf("post --folded: exit %d\n%s", code, stderr.String())
	}
	if out, _ := os.ReadFile(stdout.Name()); !strings.Contains(string(out), "post: wrote "+folded) {
		t.Errorf("post --folded FILE: stdout %q", out)
	}
}
