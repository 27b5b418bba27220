package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/analysis/callflow"
)

func TestFoldedNote(t *testing.T) {
	fc := callflow.FoldedCut{Paths: 98765, Kept: 98765 - 1234, Cut: 12, Total: 1000000, Exact: 3 << 30, Size: 60 << 20}
	want := "callflow.folded: 1,234 of 98,765 call paths (each at most 0.0012 % of the total BASE) are counted in their callers" +
		" to keep the file under 64M (every path: 3G); --folded-max 0 writes every path"
	if got := foldedNote("callflow.folded", fc, 64<<20); got != want {
		t.Errorf("note\n%s\nwant\n%s", got, want)
	}
	fc.Kept = fc.Paths
	if got := foldedNote("callflow.folded", fc, 64<<20); got != "" {
		t.Errorf("a note with nothing cut: %s", got)
	}
}

// foldedSum is the sum of a folded file's weights and its lines.
func foldedSum(t *testing.T, path string) (sum uint64, lines int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		v, err := strconv.ParseUint(l[strings.LastIndexByte(l, ' ')+1:], 10, 64)
		if err != nil {
			t.Fatalf("%s: line %q: %v", path, l, err)
		}
		sum += v
		lines++
	}
	return sum, lines
}

// TestReportFoldedMax: hookit report --folded-max keeps callflow.folded
// within the bound with the same total and says on stderr, in one line,
// how many call paths it counted in their callers; with no bound, or the
// default one the example fits, the file is every path and nothing is
// said. Stdout is the same whatever the bound.
func TestReportFoldedMax(t *testing.T) {
	r := setup(t)
	in := runHookit(t, "--", filepath.Join(r, "bin/callflow"), "1000")
	out := t.TempDir()
	folded := filepath.Join(out, "callflow.folded")
	report := func(args ...string) (stdout, stderr string, err error) {
		var o, e bytes.Buffer
		cmd := exec.Command(filepath.Join(r, "bin/hookit"), append([]string{"report", "-i", in, "-o", out}, args...)...)
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}
	stdout0, stderr, err := report("--folded-max", "0")
	if err != nil || stderr != "" {
		t.Fatalf("--folded-max 0: %v\n%s", err, stderr)
	}
	exact, err := os.ReadFile(folded)
	if err != nil {
		t.Fatal(err)
	}
	total, lines := foldedSum(t, folded)
	if lines < 10 {
		t.Fatalf("the exact form has %d lines:\n%s", lines, exact)
	}
	if stdout, stderr, err := report(); err != nil || stderr != "" || stdout != stdout0 {
		t.Fatalf("the default bound: %v\nstdout %q (with no bound %q)\nstderr %q", err, stdout, stdout0, stderr)
	}
	if b, err := os.ReadFile(folded); err != nil || !bytes.Equal(b, exact) {
		t.Fatalf("the default bound: %d bytes, not the exact form's %d (%v)", len(b), len(exact), err)
	}

	limit := len(exact) / 3
	stdout, stderr, err := report("--folded-max", strconv.Itoa(limit))
	if err != nil || stdout != stdout0 {
		t.Fatalf("--folded-max %d: %v\nstdout %q (with no bound %q)", limit, err, stdout, stdout0)
	}
	if !strings.HasPrefix(stderr, "hookit: callflow.folded: ") || strings.Count(stderr, "\n") != 1 ||
		!strings.Contains(stderr, " call paths (each at most ") || !strings.Contains(stderr, "--folded-max 0 writes every path") {
		t.Errorf("--folded-max %d: stderr %q, want the one line of the note", limit, stderr)
	}
	fi, err := os.Stat(folded)
	if err != nil {
		t.Fatal(err)
	}
	sum, cutLines := foldedSum(t, folded)
	t.Logf("exact: %d bytes, %d lines; --folded-max %d: %d bytes, %d lines; %s", len(exact), lines, limit, fi.Size(), cutLines, stderr)
	if fi.Size() > int64(limit) || sum != total || cutLines >= lines {
		t.Errorf("--folded-max %d: %d bytes, %d lines adding up to %d (exact: %d lines, %d)", limit, fi.Size(), cutLines, sum, lines, total)
	}

	if _, stderr, err := report("--folded-max", "12X"); err == nil || !strings.Contains(stderr, "--folded-max") {
		t.Errorf("--folded-max 12X: %v %q, want a usage error", err, stderr)
	}
}
