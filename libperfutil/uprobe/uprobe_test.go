package uprobe

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
	"perfinsp/internal/perfring"
	"perfinsp/internal/procscan"
	"perfinsp/libperfutil/events"
)

func fakeSysfs(t *testing.T, retprobe string) events.Sysfs {
	t.Helper()
	dir := t.TempDir()
	pmu := filepath.Join(dir, "uprobe")
	if err := os.MkdirAll(filepath.Join(pmu, "format"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pmu, "type"), []byte("9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if retprobe != "" {
		if err := os.WriteFile(filepath.Join(pmu, "format", "retprobe"), []byte(retprobe+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return events.Sysfs{Devices: dir}
}

// The PMU's type and the retprobe bit come from sysfs, not from constants.
func TestPMUFromSysfs(t *testing.T) {
	p, err := FromSysfs(fakeSysfs(t, "config:5"))
	if err != nil {
		t.Fatal(err)
	}
	path := []byte("/bin/x\x00")
	a := p.attr(&path[0], 0x1234, true)
	if a.Type != 9 || a.Config != 1<<5 || a.Ext2 != 0x1234 || a.Ext1 == 0 {
		t.Fatalf("retprobe attr type %d config %#x config2 %#x: want type 9, bit 5, offset 0x1234", a.Type, a.Config, a.Ext2)
	}
	if a := p.attr(&path[0], 0x10, false); a.Config != 0 {
		t.Fatalf("entry probe config %#x, want 0", a.Config)
	}
	p, err = FromSysfs(fakeSysfs(t, "config1:3"))
	if err != nil {
		t.Fatal(err)
	}
	if a := p.attr(&path[0], 0, true); a.Ext1&(1<<3) == 0 {
		t.Fatalf("retprobe bit in config1 not set: %#x", a.Ext1)
	}
	if _, err := FromSysfs(fakeSysfs(t, "")); err == nil {
		t.Fatal("a PMU without format/retprobe accepted")
	}
	if _, err := FromSysfs(events.Sysfs{Devices: t.TempDir()}); err == nil {
		t.Fatal("a missing uprobe PMU accepted")
	}
}

// Malformed sample bodies are refused, not read past their end.
func TestDecodeSampleBounds(t *testing.T) {
	for n := 0; n < 48; n++ {
		b := make([]byte, n)
		if n >= 32 {
			b[24] = 0xff // a stack size larger than the record
		}
		if s, ok := DecodeSample(b, true); ok && s.HasTop {
			t.Fatalf("%d bytes: stack word read from a short record", n)
		}
	}
	b := make([]byte, 24+8+8+8)
	b[0] = 7
	b[24] = 8
	b[32] = 0x42
	b[40] = 8
	s, ok := DecodeSample(b, true)
	if !ok || !s.HasTop || s.TopWord != 0x42 || s.ID != 7 {
		t.Fatalf("sample %+v ok %v: want id 7 and top word 0x42", s, ok)
	}
}

//go:noinline
func probed(x int) int { return x*3 + 1 }

//go:noinline
func callProbed(n int) (sum int) {
	for i := 0; i < n; i++ {
		sum += probed(i)
	}
	return sum
}

// fileOffset converts an address of this process to file and offset.
func fileOffset(t *testing.T, addr uint64) (string, uint64) {
	t.Helper()
	var path string
	var off uint64
	err := procscan.Describe(os.Getpid(), 0, func(minor uint32, f []uint64, str string) {
		if minor == trace.MTESegment && addr >= f[1] && addr < f[1]+f[2] {
			path, off = str, addr-f[1]+f[3]
		}
	})
	if err != nil || path == "" {
		t.Fatalf("no mapping holds %#x: %v", addr, err)
	}
	return path, off
}

// A real uprobe on a function of this test binary, on this thread: one
// sample per call, each with the return address into the caller.
func TestProbeCountsCallsAndReturnAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("uprobe perf events need root or CAP_PERFMON; run the test as root")
	}
	p, err := System()
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	entry := uint64(reflect.ValueOf(probed).Pointer())
	path, off := fileOffset(t, entry)
	pr, err := p.Open(path, off, false, unix.Gettid(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ring, err := perfring.Map(pr.FD, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	if err := Enable(pr.FD); err != nil {
		t.Fatal(err)
	}
	const calls = 100
	_ = callProbed(calls)
	var tops []uint64
	ring.Drain(func(typ uint32, _ uint16, b []byte) {
		if typ != unix.PERF_RECORD_SAMPLE {
			return
		}
		s, ok := DecodeSample(b, true)
		if !ok || s.ID != pr.ID || s.TID != uint32(unix.Gettid()) || !s.HasTop {
			t.Fatalf("bad sample %+v (probe id %d)", s, pr.ID)
		}
		tops = append(tops, s.TopWord)
	})
	if len(tops) != calls {
		t.Fatalf("%d samples for %d calls", len(tops), calls)
	}
	caller := runtime.FuncForPC(uintptr(tops[0]))
	if caller == nil || caller.Name() != "perfinsp/libperfutil/uprobe.callProbed" {
		t.Fatalf("return address %#x is in %v, want callProbed", tops[0], caller)
	}
	sort.Slice(tops, func(i, j int) bool { return tops[i] < tops[j] })
	if tops[0] != tops[len(tops)-1] {
		t.Fatalf("return addresses differ: %#x .. %#x (one call site)", tops[0], tops[len(tops)-1])
	}
	// The event lives while its ring is mapped: unmap, then close.
	if err := ring.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pr.Close(); err != nil {
		t.Fatal(err)
	}
}

// Group layouts: the leader's count is read, then the stack word; a
// group count larger than the record is refused.
func TestDecodeGroupRead(t *testing.T) {
	b := make([]byte, 24+8+2*8+8+8+8)
	b[0] = 7
	b[24] = 2    // nr
	b[32] = 0x99 // leader
	b[40] = 0x11 // the probe itself
	b[48] = 8    // stack size
	b[56] = 0x42 // top word
	b[64] = 8    // dyn size
	s, ok := Decode(b, Layout{Stack: true, Read: true})
	if !ok || s.Read != 0x99 || !s.HasTop || s.TopWord != 0x42 {
		t.Fatalf("sample %+v ok %v: want read 0x99 and top word 0x42", s, ok)
	}
	if s, ok := Decode(b[:48], Layout{Read: true}); !ok || s.Read != 0x99 {
		t.Fatalf("return layout %+v ok %v: want read 0x99", s, ok)
	}
	b[24] = 200
	if _, ok := Decode(b, Layout{Stack: true, Read: true}); ok {
		t.Fatal("a group count past the record's end accepted")
	}
}

//go:noinline
func spin(d time.Duration) {
	for t0 := threadNs(); threadNs()-t0 < int64(d); {
	}
}

func threadNs() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// A probe grouped with a task-clock counter: each sample carries the
// thread's CPU time at the hit, so consecutive hits 2 ms of CPU apart
// differ by about 2 ms (1..20 ms).
func TestGroupedProbeReadsCounter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("uprobe perf events need root or CAP_PERFMON; run the test as root")
	}
	p, err := System()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.Parse("task-clock")
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	leader, err := OpenCounter(ev, tid)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(leader)
	path, off := fileOffset(t, uint64(reflect.ValueOf(probed).Pointer()))
	pr, err := p.OpenWith(path, off, false, tid, OpenOpts{Disabled: true, Group: leader})
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	ring, err := perfring.Map(pr.FD, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	for _, fd := range []int{pr.FD, leader} {
		if err := Enable(fd); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		_ = probed(i)
		spin(2 * time.Millisecond)
	}
	var reads []uint64
	ring.Drain(func(typ uint32, _ uint16, b []byte) {
		if typ != unix.PERF_RECORD_SAMPLE {
			return
		}
		s, ok := Decode(b, Layout{Stack: true, Read: true})
		if !ok || s.ID != pr.ID || !s.HasTop {
			t.Fatalf("bad sample %+v", s)
		}
		reads = append(reads, s.Read)
	})
	if len(reads) != 5 {
		t.Fatalf("%d samples for 5 calls", len(reads))
	}
	for i := 1; i < len(reads); i++ {
		// task-clock and the thread CPU clock spin() watches are kept
		// apart by the scheduler (on a loaded machine by a quarter).
		if d := time.Duration(reads[i] - reads[i-1]); d < time.Millisecond || d > 20*time.Millisecond {
			t.Errorf("task-clock between hits %d and %d: %v, want about the 2ms of spinning (+ the trap)", i-1, i, d)
		}
	}
	ring.Close()
}
