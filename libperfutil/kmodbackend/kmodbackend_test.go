package kmodbackend

import (
	"errors"
	"os"
	"strings"
	"testing"
	"unsafe"

	"perfinsp/libperfutil/control"
)

func TestAvailableNamesTheModule(t *testing.T) {
	ok, why := Available()
	if _, err := os.Stat(Device); err == nil {
		if !ok {
			t.Fatalf("%s exists but Available says no: %s", Device, why)
		}
		return
	}
	if ok {
		t.Fatalf("Available is true without %s", Device)
	}
	// How to build and load it; modprobe only with the module installed.
	for _, want := range []string{"pitrace", Device, "make kmod && sudo insmod kmod/pitrace.ko", "modprobe pitrace` only once it is installed"} {
		if !strings.Contains(why, want) {
			t.Errorf("reason %q does not mention %q", why, want)
		}
	}
}

func TestForcedKmodBackendExplainsWhenMissing(t *testing.T) {
	if _, err := os.Stat(Device); err == nil {
		t.Skip(Device + " exists here: the missing-module message cannot be seen")
	}
	_, err := control.Open("kmod")
	if err == nil {
		t.Fatal("control.Open(\"kmod\") succeeded without the module")
	}
	if !strings.Contains(err.Error(), "backend kmod is not available") || !strings.Contains(err.Error(), "not loaded") {
		t.Fatalf("unclear error: %v", err)
	}
}

func TestPriorityAboveDaemon(t *testing.T) {
	// The daemon registers with priority 10 (libperfutil/daemonclient).
	if Priority <= 10 {
		t.Fatalf("kmod priority %d does not beat the daemon's 10", Priority)
	}
}

func TestParseEvent(t *testing.T) {
	cases := []struct {
		in     string
		typ    uint32
		config uint64
	}{
		{"cycles", 0, 0}, {"instructions", 0, 1}, {"cache-misses", 0, 3}, {"branch-misses", 0, 5}, {"r1c4", 4, 0x1c4},
	}
	for _, c := range cases {
		typ, cfg, err := ParseEvent(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if typ != c.typ || cfg != c.config {
			t.Errorf("%s: type %d config %#x, want %d %#x", c.in, typ, cfg, c.typ, c.config)
		}
	}
	if _, _, err := ParseEvent("bogus"); err == nil || !strings.Contains(err.Error(), `"bogus"`) || !strings.Contains(err.Error(), "mpevt -l") {
		t.Errorf("unknown event: want an error naming the token and where the names are, got %v", err)
	}
}

// fakeBuffer builds a mapped buffer image: header page then segments.
func fakeBuffer(t *testing.T, segSize uint32, states []uint32, seqs []uint64, used []uint32) *mapping {
	t.Helper()
	const dataOff = 4096
	mem := make([]byte, dataOff+int(segSize)*len(states))
	h := (*bufHdr)(unsafe.Pointer(&mem[0]))
	h.Magic = bufMagic
	h.SegSize = segSize
	h.NSeg = uint32(len(states))
	h.DataOffset = dataOff
	for i := range states {
		h.Seg[i] = seg{State: states[i], Seq: seqs[i], Used: used[i]}
		for j := uint32(0); j < used[i] && j < segSize; j++ {
			mem[dataOff+i*int(segSize)+int(j)] = byte(i + 1)
		}
	}
	return &mapping{mem: mem, hdr: h}
}

func TestSegmentsInCompletionOrder(t *testing.T) {
	m := fakeBuffer(t, 1024,
		[]uint32{segDone, segFree, segDone, segFilling, segDone},
		[]uint64{7, 0, 3, 0, 5},
		[]uint32{100, 0, 200, 50, 5000})
	got := m.segments(false)
	if len(got) != 3 {
		t.Fatalf("%d DONE segments, want 3: %+v", len(got), got)
	}
	wantIdx := []int{2, 4, 0} // seq 3, 5, 7
	for i, s := range got {
		if s.idx != wantIdx[i] {
			t.Errorf("segment %d: index %d, want %d", i, s.idx, wantIdx[i])
		}
	}
	if got[1].used != 1024 {
		t.Errorf("used %d beyond the segment size was not clamped to 1024", got[1].used)
	}
	d := m.data(got[0])
	if len(d) != 200 || d[0] != 3 || d[199] != 3 {
		t.Errorf("data of segment 2: %d bytes starting %d", len(d), d[0])
	}
	if n := len(m.segments(true)); n != 4 {
		t.Errorf("with the partial segment: %d, want 4", n)
	}
}

func TestStateNames(t *testing.T) {
	cases := []struct {
		st   statusArg
		want string
	}{
		{statusArg{State: stateFree}, control.StateFree},
		{statusArg{State: stateInit}, control.StateInitialized},
		{statusArg{State: stateOn}, control.StateOn},
		{statusArg{State: stateOn, Flags: stStoppedFull}, control.StateOff},
		{statusArg{State: stateOff}, control.StateOff},
	}
	for _, c := range cases {
		if got := stateName(&c.st); got != c.want {
			t.Errorf("state %d flags %d: %q, want %q", c.st.State, c.st.Flags, got, c.want)
		}
	}
}

func TestCopyStreamMissingFileSaysWhere(t *testing.T) {
	err := copyStream("/nonexistent/stream.nrm2", t.TempDir()+"/out.nrm2", false)
	if err == nil || !strings.Contains(err.Error(), "stream file") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("want a missing-stream-file error, got %v", err)
	}
}

func TestCopyStreamMoves(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/s.nrm2", []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copyStream(dir+"/s.nrm2", dir+"/o.nrm2", true); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dir + "/o.nrm2")
	if err != nil || string(b) != "data" {
		t.Fatalf("moved file: %q %v", b, err)
	}
	if _, err := os.Stat(dir + "/s.nrm2"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stream file is still there after a move: %v", err)
	}
}

// A depth limit out of 1..127 is refused with the range before any ioctl
// (the backend here has no device: an ioctl would fail with EBADF).
func TestStackDepthOutOfRange(t *testing.T) {
	b := &Backend{fd: ^uintptr(0)}
	for _, d := range []int{0, -1, 128, 1 << 20} {
		err := b.SetStackDepth(d)
		if err == nil || !strings.Contains(err.Error(), "out of range: use 1..127") {
			t.Errorf("depth %d: %v", d, err)
		}
	}
	if err := b.SetStackDepth(5); err == nil || strings.Contains(err.Error(), "out of range") {
		t.Errorf("depth 5 must pass the range check and fail at the device: %v", err)
	}
}

// TestStepFlags: each ITrace step mode maps to its ITRACE_ON flag (auto to
// none), and an unknown one is refused with the modes that exist.
func TestStepFlags(t *testing.T) {
	for s, want := range map[string]uint32{"": 0, "single": itraceStepSingle, "verify": itraceStepVerify} {
		if got, err := stepFlags(s); err != nil || got != want {
			t.Errorf("stepFlags(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	if _, err := stepFlags("block"); err == nil || !strings.Contains(err.Error(), `"verify"`) {
		t.Errorf("stepFlags(\"block\") = %v, want an error naming the modes", err)
	}
}
