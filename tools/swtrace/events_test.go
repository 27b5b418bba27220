package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/format/trace"
	"perfinsp/internal/tracetest"
	"perfinsp/libperfutil/events"
)

// Event-based tprof on the daemon: any event of the one event table
// (a software one here), TPROF_EVENT records, and tprof.out names the
// event; event errors come at setrate, naming the bad token.
func TestEventBasedTprof(t *testing.T) {
	e := tracetest.Setup(t, "./tools/post")
	if out, code := e.SwCode("setrate", "-e", "bogus-event", "-c", "1000"); code == 0 || !strings.Contains(out, `"bogus-event"`) {
		t.Fatalf("unknown event at setrate: exit %d\n%s", code, out)
	}
	if !events.HasPMU() {
		if out, code := e.SwCode("setrate", "-e", "cycles", "-c", "100000"); code == 0 || !strings.Contains(out, "no hardware PMU on this machine") {
			t.Fatalf("cycles without a PMU: exit %d\n%s", code, out)
		}
	}
	e.Sw("init", "-t", "8M")
	e.Sw("enable", "--only", "tprof")
	e.Sw("setrate", "-e", "task-clock", "-c", "1000000") // a sample every ms of CPU time
	e.Sw("on")
	pid, _ := e.RunBurn(60)
	e.Sw("off")
	e.Sw("get", "ev.nrm2")
	s := load(t, filepath.Join(e.Dir, "ev.nrm2"))
	evTicks := 0
	if err := s.file.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorTprof && r.Minor == trace.TprofEvent && uint32(r.Field(0)) == uint32(pid) {
			evTicks++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if evTicks < 100 {
		t.Fatalf("%d TPROF_EVENT samples of the example", evTicks)
	}
	post := exec.Command(filepath.Join(e.Bin, "post"), "-r", filepath.Join(e.Dir, "ev.nrm2"), "-tprof", "-o", e.Dir)
	if out, err := post.CombinedOutput(); err != nil {
		t.Fatalf("post: %v %s", err, out)
	}
	rep := readFile(t, filepath.Join(e.Dir, "tprof.out"))
	if !strings.Contains(rep, "a sample every 1000000 task-clock events (event-based)") {
		t.Fatalf("tprof.out does not name the event:\n%.600s", rep)
	}
	e.Sw("setrate", "1000")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
