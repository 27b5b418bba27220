package uprobe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/events"
)

// spinEnv makes the test binary a target calling probed for ever (TestMain).
const spinEnv = "PERFINSP_UPROBE_TEST_SPIN"

// spinTarget starts a copy of the test binary (a file this process does
// not map) calling probed for ever; the copy's path.
func spinTarget(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "spin")
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), spinEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, path
}

// codeByte is the byte at addr in process pid (0xcc while a uprobe's
// breakpoint is there).
func codeByte(t *testing.T, pid int, addr uint64) byte {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], int64(addr)); err != nil {
		t.Fatal(err)
	}
	return b[0]
}

// probeCount reads a probe's hit count.
func probeCount(t *testing.T, p *Probe) uint64 {
	t.Helper()
	var b [8]byte
	if n, err := unix.Read(p.FD, b[:]); err != nil || n != 8 {
		t.Fatalf("read probe count: %d bytes, %v", n, err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// Probes held by a dynamic event close at once, their breakpoint out of
// the target as soon as the last of them is closed (while the anchor is
// still open), where each close of a probe of the uprobe PMU waits for the
// kernel's grace periods with the probes not yet closed still trapping:
// six such probes on a target calling the function millions of times a
// second close in less time than one probe of the PMU. The dynamic event
// leaves nothing in tracefs once closed.
func TestDynamicProbesCloseAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("uprobe perf events and tracefs need root; run the test as root")
	}
	pmu, err := System()
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := events.OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	target, path := spinTarget(t)
	entry := uint64(reflect.ValueOf(probed).Pointer()) // the copy is the same executable
	_, off := fileOffset(t, entry)
	orig := codeByte(t, target.Process.Pid, entry)

	// open puts n probes per CPU on probed; it returns once they trap.
	open := func(d *Dynamic, n int) []*Probe {
		var ps []*Probe
		for i := 0; i < n; i++ {
			for _, c := range cpus {
				p, err := pmu.OpenWith(path, off, false, -1, OpenOpts{Group: -1, CPU: c, Dynamic: d})
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
		}
		for deadline := time.Now().Add(time.Minute); ; {
			var sum uint64
			for _, p := range ps {
				sum += probeCount(t, p)
			}
			if sum > 0 && codeByte(t, target.Process.Pid, entry) == 0xcc {
				return ps
			}
			if time.Now().After(deadline) {
				t.Fatalf("the probes on probed never trapped (%d hits) in the target", sum)
			}
			runtime.Gosched()
		}
	}
	closeAll := func(ps []*Probe) time.Duration {
		t0 := time.Now()
		for _, p := range ps {
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(t0)
	}

	// One probe of the PMU per CPU: the time of one close, the best of
	// them (a grace period at least).
	var gp time.Duration
	for _, p := range open(nil, 1) {
		if d := closeAll([]*Probe{p}); gp == 0 || d < gp {
			gp = d
		}
	}
	if b := codeByte(t, target.Process.Pid, entry); b != orig {
		t.Fatalf("byte %#x at probed after the PMU probes closed, want %#x", b, orig)
	}

	d, err := OpenDynamic(events.System)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ps := open(d, 3)
	took := closeAll(ps)
	t.Logf("one uprobe PMU probe closed in %v; %d probes held by a dynamic event in %v", gp, len(ps), took)
	if b := codeByte(t, target.Process.Pid, entry); b != orig || d.Events() != 1 {
		t.Errorf("byte %#x at probed with the probes closed and %d dynamic events held, want %#x and 1", b, d.Events(), orig)
	}
	if took >= gp {
		t.Errorf("%d probes held by a dynamic event took %v to close, one probe of the PMU %v: want less", len(ps), took, gp)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	ev, err := os.ReadFile(filepath.Join(d.dir, "uprobe_events"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ev, []byte(d.group+"/")) {
		t.Errorf("uprobe_events after Close still holds %s:\n%s", d.group, ev)
	}
}

// A group of a process that is gone is removed by the next OpenDynamic;
// the group of a live process stays.
func TestDynamicRemovesStaleGroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("tracefs uprobe_events needs root; run the test as root")
	}
	target, path := spinTarget(t)
	_, off := fileOffset(t, uint64(reflect.ValueOf(probed).Pointer()))
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	var dir string
	for _, tr := range events.System.Tracefs {
		if _, err := os.Stat(filepath.Join(tr, "uprobe_events")); err == nil {
			dir = tr
			break
		}
	}
	if dir == "" {
		t.Fatal("no tracefs with uprobe_events")
	}
	groups := map[int]string{dead.Process.Pid: "", target.Process.Pid: ""}
	f, err := os.OpenFile(filepath.Join(dir, "uprobe_events"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for pid := range groups {
		groups[pid] = fmt.Sprintf("%s%d/stale", dynGroupPrefix, pid)
		if _, err := fmt.Fprintf(f, "p:%s %s:%#x\n", groups[pid], path, off); err != nil {
			t.Fatal(err)
		}
	}
	defer fmt.Fprintf(f, "-:%s\n", groups[target.Process.Pid])
	d, err := OpenDynamic(events.System)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b, err := os.ReadFile(filepath.Join(dir, "uprobe_events"))
	if err != nil {
		t.Fatal(err)
	}
	ev := string(b)
	if strings.Contains(ev, groups[dead.Process.Pid]+" ") || !strings.Contains(ev, groups[target.Process.Pid]+" ") {
		t.Errorf("uprobe_events after OpenDynamic:\n%s\nwant %s (a gone process) removed, %s (a live one) kept", ev, groups[dead.Process.Pid], groups[target.Process.Pid])
	}
}

// A path uprobe_events could misread (a blank, a newline that would add
// a line of its own, a reference counter's parenthesis, a byte beyond
// ASCII, a relative path) is not named in it: such a probe uses the PMU.
func TestDynamicUsablePaths(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/lib/x86_64-linux-gnu/liblzma.so.5.4.1": true,
		"/opt/a:b/prog":                true,
		"/tmp/x (deleted)":             false,
		"/tmp/x\np:evil/e /bin/sh:0x0": false,
		"/tmp/x\tb":                    false,
		"/tmp/prog(0x10)":              false,
		"/tmp/\u00e9t\u00e9":           false,
		"lib/prog":                     false,
		"/tmp/a\\b":                    false,
	} {
		if got := usable(path); got != want {
			t.Errorf("usable(%q) = %v, want %v", path, got, want)
		}
	}
}
