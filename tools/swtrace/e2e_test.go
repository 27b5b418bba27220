package main

// End-to-end tests: swtrace and pitraced built from this tree, on this
// machine's kernel (daemon backend), tracing the bundled example.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

type summary struct {
	file     *nrm2.File
	tprof    map[uint32]int            // pid -> ticks
	tids     map[uint32]map[uint32]int // pid -> tid -> ticks
	segments map[uint32][]string       // pid -> segment paths
	forks    map[uint32]bool           // pids created
	exits    map[uint32]bool           // pids exited (pid == tid)
	procs    map[uint32]string         // pid -> name
	counts   map[uint16]int            // major -> records
	lastTime uint64
	records  int
}

func load(t *testing.T, path string) *summary {
	t.Helper()
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &summary{file: f, tprof: map[uint32]int{}, tids: map[uint32]map[uint32]int{}, segments: map[uint32][]string{},
		forks: map[uint32]bool{}, exits: map[uint32]bool{}, procs: map[uint32]string{}, counts: map[uint16]int{}}
	var prev uint64
	err = f.Records(func(r *trace.Record) error {
		if r.Time < prev {
			return fmt.Errorf("records out of time order: %d after %d", r.Time, prev)
		}
		prev = r.Time
		s.lastTime = r.Time
		if r.Major == trace.MajorSys && r.Minor == trace.SysTimeHigh {
			return nil
		}
		s.records++
		s.counts[r.Major]++
		switch {
		case r.Major == trace.MajorTprof:
			pid, tid := uint32(r.Field(0)), uint32(r.Field(1))
			s.tprof[pid]++
			if s.tids[pid] == nil {
				s.tids[pid] = map[uint32]int{}
			}
			s.tids[pid][tid]++
		case r.Major == trace.MajorMTE && r.Minor == trace.MTESegment:
			pid := uint32(r.Field(0))
			s.segments[pid] = append(s.segments[pid], r.Str)
		case r.Major == trace.MajorMTE && r.Minor == trace.MTEFork:
			s.forks[uint32(r.Field(2))] = true
		case r.Major == trace.MajorMTE && r.Minor == trace.MTEExit:
			if r.Field(0) == r.Field(1) {
				s.exits[uint32(r.Field(0))] = true
			}
		case r.Major == trace.MajorMTE && r.Minor == trace.MTEProcess:
			s.procs[uint32(r.Field(0))] = r.Str
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hasSuffix(list []string, suffix string) bool {
	for _, p := range list {
		if strings.HasSuffix(p, suffix) || strings.Contains(filepath.Base(p), suffix) {
			return true
		}
	}
	return false
}

func TestTraceExample(t *testing.T) {
	e := tracetest.Setup(t)
	// buffers the whole run fits in on a busy machine (dispatch records
	// of every process: 4M filled beside two make test runs)
	e.Sw("init", "-t", "64M", "-m", "4M")
	e.Sw("enable", "tprof", "dispatch")
	e.Sw("setrate", "1000")
	e.Sw("on")
	pid, child := e.RunBurn(100)
	e.Sw("off")
	out := e.Sw("get", "ex.nrm2")
	if !strings.Contains(out, "wrote ex.nrm2") {
		t.Fatalf("get said %q", out)
	}
	info := e.Sw("info")
	if !strings.Contains(info, "state: off") || !strings.Contains(info, "dispatch") {
		t.Fatalf("info:\n%s", info)
	}
	s := load(t, filepath.Join(e.Dir, "ex.nrm2"))
	h := s.file.Header
	if h.Backend != nrm2.BackendDaemon || h.RateHz != 1000 || h.Mode != nrm2.ModeNormal || h.Flags&nrm2.FlagComplete == 0 || len(s.file.Kallsyms) == 0 {
		t.Fatalf("header %+v, kallsyms %d bytes", h, len(s.file.Kallsyms))
	}
	// The example burns about 1.2 s of CPU in two threads: expect ~1200 ticks.
	if n := s.tprof[uint32(pid)]; n < 400 {
		t.Fatalf("only %d tprof ticks for the example (pid %d); ticks by pid: %v", n, pid, s.tprof)
	}
	if n := len(s.tids[uint32(pid)]); n < 2 {
		t.Fatalf("ticks in %d threads of the example, want 2 (main and worker): %v", n, s.tids[uint32(pid)])
	}
	if !hasSuffix(s.segments[uint32(pid)], "cpuburn") || !hasSuffix(s.segments[uint32(pid)], "libc") {
		t.Fatalf("MTE segments of the example lack its executable or libc: %v", s.segments[uint32(pid)])
	}
	// The child ran and exited during tracing: it must be fully described.
	if !s.forks[uint32(child)] || !s.exits[uint32(child)] {
		t.Fatalf("child %d: fork %v exit %v", child, s.forks[uint32(child)], s.exits[uint32(child)])
	}
	if s.tprof[uint32(child)] == 0 {
		t.Fatalf("child %d has no ticks", child)
	}
	if s.counts[trace.MajorDispatch] == 0 {
		t.Fatal("dispatch enabled but no DISPATCH records")
	}
	// Statistics agree with the records in the file.
	var stat uint64
	for _, c := range s.file.Stats {
		stat += c.Records + c.MTERecords
	}
	if stat != uint64(s.records) {
		t.Fatalf("statistics count %d records, the file holds %d", stat, s.records)
	}
}

func TestModes(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("enable", "tprof")
	e.Sw("setrate", "2000")

	t.Run("normal stops when full", func(t *testing.T) {
		e.Sw("mode", "normal")
		e.Sw("init", "-t", "16K", "-m", "1M")
		e.Sw("on")
		e.RunBurn(60)
		info := e.Sw("info")
		if !strings.Contains(info, "state: off") || !strings.Contains(info, "filled") {
			t.Fatalf("after filling a 16K buffer the facility should have stopped:\n%s", info)
		}
		// off after the automatic stop succeeds and says what happened
		if out, code := e.SwCode("off"); code != 0 || !strings.Contains(out, "a buffer filled") || !strings.Contains(out, "lost") {
			t.Fatalf("off after an automatic stop: exit %d, want 0 and the buffer named as full with the lost records:\n%s", code, out)
		}
		e.Sw("get", "normal.nrm2")
		s := load(t, filepath.Join(e.Dir, "normal.nrm2"))
		if s.file.Header.Flags&nrm2.FlagBufferFull == 0 {
			t.Fatal("file does not say a buffer filled")
		}
		full := false
		for _, c := range s.file.Stats {
			full = full || c.Full&1 != 0
		}
		if !full {
			t.Fatalf("no CPU marked full: %+v", s.file.Stats)
		}
	})

	t.Run("wrap keeps the newest", func(t *testing.T) {
		e.Sw("mode", "wrap", "-f", "wrap.nrm2")
		e.Sw("init", "-t", "16K", "-m", "1M")
		e.Sw("on")
		e.RunBurn(60)
		mark := nowNs()
		e.RunBurn(5) // records after the mark: the newest the buffer must keep
		e.Sw("off")
		e.Sw("get", "wrap.nrm2")
		s := load(t, filepath.Join(e.Dir, "wrap.nrm2"))
		var lost uint64
		for _, c := range s.file.Stats {
			lost += c.Lost
		}
		if lost == 0 {
			t.Fatal("a 16K wrap buffer lost nothing over a 0.6 s run at 2000 Hz: did it wrap?")
		}
		if s.lastTime < mark {
			t.Fatalf("newest record at %d is older than the last workload (started after %d)", s.lastTime, mark)
		}
		if len(s.segments) == 0 {
			t.Fatal("wrap mode lost the MTE records")
		}
	})

	t.Run("cont loses nothing", func(t *testing.T) {
		e.Sw("mode", "cont", "-f", "cont.nrm2")
		e.Sw("init", "-t", "64K", "-m", "64K")
		e.Sw("on")
		e.RunBurn(100)
		out := e.Sw("off")
		if !strings.Contains(out, "cont.nrm2") {
			t.Fatalf("off in cont mode should name the file: %q", out)
		}
		s := load(t, filepath.Join(e.Dir, "cont.nrm2"))
		var lost, recs uint64
		for _, c := range s.file.Stats {
			lost += c.Lost + c.MTELost
			recs += c.Records + c.MTERecords
		}
		if lost != 0 {
			t.Fatalf("cont mode lost %d records", lost)
		}
		if recs != uint64(s.records) || s.counts[trace.MajorTprof] < 300 {
			t.Fatalf("cont file holds %d records (%d tprof), statistics say %d", s.records, s.counts[trace.MajorTprof], recs)
		}
		// The trace is far larger than the 64K buffer.
		if st, _ := os.Stat(filepath.Join(e.Dir, "cont.nrm2")); st.Size() < 2*64<<10 {
			t.Fatalf("cont file only %d bytes", st.Size())
		}
		e.Sw("mode", "normal")
	})
}

func nowNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

func TestBadInput(t *testing.T) {
	e := tracetest.Setup(t)
	out, code := e.SwCode("frobnicate")
	if code == 0 || !strings.Contains(out, "unknown command") || !strings.Contains(out, "swtrace --help for more") || strings.Count(out, "\n") != 1 {
		t.Fatalf("unknown command: exit %d\n%s", code, out)
	}
	out, code = e.SwCode("init", "-t", "lots")
	if code == 0 || !strings.Contains(out, "bad size") {
		t.Fatalf("bad size: exit %d\n%s", code, out)
	}
	out, code = e.SwCode("mode", "sideways")
	if code == 0 || !strings.Contains(out, "unknown mode") {
		t.Fatalf("bad mode: exit %d\n%s", code, out)
	}
	out, code = e.SwCode("enable", "nonsense")
	if code == 0 || !strings.Contains(out, "unknown record type") {
		t.Fatalf("bad type: exit %d\n%s", code, out)
	}
	e.Sw("free")
	out, code = e.SwCode("get", "nothing.nrm2")
	if code == 0 || !strings.Contains(out, "no trace") {
		t.Fatalf("get with nothing traced: exit %d\n%s", code, out)
	}
	// on before init: documented defaults.
	out = e.Sw("on")
	if !strings.Contains(out, "using the defaults") {
		t.Fatalf("on before init: %q", out)
	}
	e.RunBurn(10)
	// get while on refuses and loses nothing.
	out, code = e.SwCode("get", "early.nrm2")
	if code == 0 || !strings.Contains(out, "swtrace off") {
		t.Fatalf("get while on: exit %d\n%s", code, out)
	}
	_, code = e.SwCode("init", "-t", "1M")
	if code == 0 {
		t.Fatal("init while on was accepted")
	}
	e.Sw("off")
	// A second on must not silently drop the unsaved trace.
	out, code = e.SwCode("on")
	if code == 0 || !strings.Contains(out, "not written") {
		t.Fatalf("on over an unsaved trace: exit %d\n%s", code, out)
	}
	e.Sw("get", "kept.nrm2")
	s := load(t, filepath.Join(e.Dir, "kept.nrm2"))
	if s.counts[trace.MajorTprof] == 0 {
		t.Fatal("the trace was lost by the bad commands")
	}
	out = e.Sw("enable")
	if !strings.Contains(out, "tprof") || !strings.Contains(out, "always") {
		t.Fatalf("enable alone should list the types:\n%s", out)
	}
}

func TestDeadDaemonIsReported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "swtrace")
	build := exec.Command("go", "build", "-o", bin, "./tools/swtrace")
	build.Dir = tracetest.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// A socket nobody listens on, and no daemon binary to start.
	cmd := exec.Command(bin, "info")
	cmd.Env = append(os.Environ(), "PERFINSP_SOCKET="+filepath.Join(dir, "dead.sock"), "PERFINSP_PITRACED="+filepath.Join(dir, "no-such-pitraced"), "PERFINSP_BACKEND=daemon")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("info with no daemon succeeded: %s", out)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("reporting a dead daemon took more than 10 s")
	}
	if !strings.Contains(string(out), "pitraced") {
		t.Fatalf("message does not name the daemon: %s", out)
	}
}

func TestNonRootIsToldWhatToDo(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("info") // starts the daemon as root
	// The test\'s temp dir must be reachable by nobody to run the binary.
	testenv.OpenPathTo(t, e.Dir)
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", e.Swtrace, "info")
	cmd.Env = e.Environ
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("a non-root user used the root-only socket: %s", out)
	}
	if !strings.Contains(string(out), "sudo") || !strings.Contains(string(out), "--group") {
		t.Fatalf("the message does not say what to do: %s", out)
	}
}

func TestStaleDaemonHandsOver(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("info")
	if n := len(e.DaemonPIDs()); n != 1 {
		t.Fatalf("%d daemons started, want 1", n)
	}
	// Replace the daemon's binary on disk, as a rebuild or an upgrade does.
	bin := filepath.Join(e.Bin, "pitraced")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin+".new", data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	e.Sw("info")
	p := e.DaemonPIDs()
	if len(p) != 2 || p[0] == p[1] {
		t.Fatalf("an idle daemon whose binary was replaced did not hand over: daemons %v", p)
	}
	// A stale daemon that holds a trace is kept: nothing is lost.
	e.Sw("on")
	data, _ = os.ReadFile(bin)
	os.WriteFile(bin+".new", data, 0o755)
	os.Rename(bin+".new", bin)
	e.Sw("off")
	if n := len(e.DaemonPIDs()); n != 2 {
		t.Fatalf("a daemon holding a trace was replaced (%d daemons)", n)
	}
	e.Sw("get", "kept.nrm2")
}

// TestGetKeepsThePrevious: get over an earlier trace keeps it as .old and
// says so; get completing a cont-mode stream file in place (by its name,
// its absolute path, or through a symbolic link) leaves it where it is,
// whole; in a directory others may write nothing is renamed.
func TestGetKeepsThePrevious(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("on", "--discard")
	e.Sw("off")
	e.Sw("get", "a.nrm2")
	first, err := os.ReadFile(filepath.Join(e.Dir, "a.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	e.Sw("on", "--discard")
	e.Sw("off")
	if out := e.Sw("get", "a.nrm2"); !strings.Contains(out, "kept the previous a.nrm2 as a.nrm2.old") {
		t.Errorf("get over an earlier trace said nothing of it:\n%s", out)
	}
	if old, err := os.ReadFile(filepath.Join(e.Dir, "a.nrm2.old")); err != nil || !bytes.Equal(old, first) {
		t.Errorf("the previous trace is not a.nrm2.old: %v", err)
	}
	if _, err := nrm2.Open(filepath.Join(e.Dir, "a.nrm2")); err != nil {
		t.Errorf("the new trace: %v", err)
	}
	// In a directory others may write, nothing is renamed: another
	// user's .old there stays as it is.
	pub := filepath.Join(e.Dir, "pub")
	if err := os.Mkdir(pub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pub, 0o1777); err != nil { // the test's own directory
		t.Fatal(err)
	}
	victim := filepath.Join(pub, "p.nrm2.old")
	if err := os.WriteFile(victim, []byte("another user's file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(victim, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	e.Sw("get", filepath.Join(pub, "p.nrm2"))
	e.Sw("on", "--discard")
	e.Sw("off")
	if out := e.Sw("get", filepath.Join(pub, "p.nrm2")); strings.Contains(out, "kept the previous") {
		t.Errorf("get in a directory others may write renamed there:\n%s", out)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "another user's file" {
		t.Errorf("another user's .old was replaced: %v %q", err, b)
	}
	if err := os.Symlink(".", filepath.Join(e.Dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"c.nrm2", filepath.Join(e.Dir, "c.nrm2"), "link/c.nrm2"} {
		e.Sw("mode", "cont", "-f", "c.nrm2")
		e.Sw("on", "--discard")
		e.Sw("off")
		if out := e.Sw("get", name); strings.Contains(out, "kept the previous") {
			t.Errorf("get %s of the cont-mode stream file moved it:\n%s", name, out)
		}
		if _, err := nrm2.Open(filepath.Join(e.Dir, "c.nrm2")); err != nil {
			t.Errorf("get %s: the stream file: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(e.Dir, "c.nrm2.old")); err == nil {
			t.Errorf("get %s: the stream file was kept as .old", name)
		}
	}
}
