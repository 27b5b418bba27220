package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"perfinsp/internal/tracetest"
)

// A real trace with call stacks, dispatches, interrupts and a fork: the
// time line written beside the reading (its records copied, a resolver
// of its own) is the one the reader writes, byte for byte, in both
// formats.
func TestTimelineBesideTheReader(t *testing.T) {
	e := tracetest.Setup(t, "./tools/post")
	dir, sw := e.Dir, e.Sw
	sw("init", "-t", "8M")
	sw("setrate", "1000")
	sw("enable", "--only", "dispatch", "interrupt", "tprof", "callstack")
	sw("on")
	e.RunBurn(100)
	sw("off")
	nrm := filepath.Join(dir, "swtrace.nrm2")
	sw("get", nrm)
	for _, name := range []string{"t.pftrace", "t.json"} {
		write := func(beside bool) []byte {
			t.Helper()
			timelineBeside = beside
			defer func() { timelineBeside = true }()
			path := filepath.Join(dir, name)
			if out, errs, code := runPost(t, dir, "-r", nrm, "--timeline", path); code != 0 {
				t.Fatalf("post --timeline %s: %d %s %s", name, code, out, errs)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		reader, beside := write(false), write(true)
		if len(reader) < 1000 || !bytes.Equal(reader, beside) {
			t.Fatalf("%s: %d bytes written by the reader, %d beside it, not the same", name, len(reader), len(beside))
		}
		t.Logf("%s: %d bytes, the same", name, len(reader))
	}
}
