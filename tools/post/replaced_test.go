package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"perfinsp/internal/tracetest"
)

// TestReplacedBinaryWarned: post names a program from the file at its
// path; when a new file was renamed over the one traced (as a package
// upgrade does, keeping the package's older modification time), post
// says so. The trace's MTE_FILE records carry the inode mapped; the file
// traced, left in place, gives no such warning.
func TestReplacedBinaryWarned(t *testing.T) {
	e := tracetest.Setup(t)
	prog := filepath.Join(e.Dir, "burn")
	exe, err := os.ReadFile(e.Burn)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	e.Burn = prog
	e.Sw("init", "-t", "8M")
	e.Sw("setrate", "1000")
	e.Sw("enable", "--only", "tprof")
	e.Sw("on")
	pid, _ := e.RunBurn(200)
	e.Sw("off")
	nrm := filepath.Join(e.Dir, "burn.nrm2")
	e.Sw("get", nrm)

	warned := func() bool {
		t.Helper()
		_, errs, code := runPost(t, e.Dir, "-r", nrm, "--pid", strconv.Itoa(pid))
		if code != 0 {
			t.Fatalf("post: exit %d\n%s", code, errs)
		}
		return strings.Contains(errs, prog+" was replaced after the trace mapped it")
	}
	if warned() {
		t.Fatal("the file traced, in place: warned that it was replaced")
	}
	next := prog + ".new"
	if err := os.WriteFile(next, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(next, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, prog); err != nil {
		t.Fatal(err)
	}
	if !warned() {
		t.Fatal("a file of an older mtime renamed over the one traced: no warning")
	}
}
