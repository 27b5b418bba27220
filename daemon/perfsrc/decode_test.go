package perfsrc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/trace"
)

// recBuf builds a perf record: header, then 8-byte aligned body.
type recBuf struct{ b []byte }

func (r *recBuf) u32(v uint32) *recBuf { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *recBuf) u64(v uint64) *recBuf { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }
func (r *recBuf) bytes(p []byte) *recBuf {
	r.b = append(r.b, p...)
	for len(r.b)%8 != 0 {
		r.b = append(r.b, 0)
	}
	return r
}

// record finishes a record of type typ with misc, and the sample_id trailer when trailer.
func record(typ uint32, misc uint16, body *recBuf, trailer bool, t uint64) []byte {
	out := &recBuf{}
	out.u32(typ).u32(uint32(misc)) // size patched below
	out.b = append(out.b, body.b...)
	if trailer {
		out.u32(1).u32(2).u64(t).u32(0).u32(0).u64(99) // pid/tid, time, cpu/res, id
	}
	binary.LittleEndian.PutUint16(out.b[6:], uint16(len(out.b)))
	return out.b
}

// sched_switch layout of the format file (offsets as on x86-64 6.x)
const switchFormat = `name: sched_switch
ID: 372
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:int prev_prio;	offset:28;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
	field:int next_prio;	offset:60;	size:4;	signed:1;

print fmt: "prev_comm=%s ..."
`

func TestParseFormat(t *testing.T) {
	f := map[string]tpField{}
	if err := parseFormat(bufio.NewScanner(strings.NewReader(switchFormat)), f); err != nil {
		t.Fatal(err)
	}
	want := map[string]tpField{
		"common_type": {0, 2, true}, "common_flags": {2, 1, true}, "common_preempt_count": {3, 1, true}, "common_pid": {4, 4, true},
		"prev_comm": {8, 16, true}, "prev_pid": {24, 4, true}, "prev_prio": {28, 4, true}, "prev_state": {32, 8, true},
		"next_comm": {40, 16, true}, "next_pid": {56, 4, true}, "next_prio": {60, 4, true},
	}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("parsed %v\nwant %v", f, want)
	}
	if err := parseFormat(bufio.NewScanner(strings.NewReader("name: x\nformat:\n")), map[string]tpField{}); err == nil {
		t.Fatal("a format without fields was accepted")
	}
	// the live kernel's format, when there is one, has the fields the decoder uses
	if tp, err := loadTracepoint("sched", "sched_switch"); err == nil {
		for _, n := range []string{"prev_pid", "prev_state", "next_pid"} {
			if _, err := tp.field(n); err != nil {
				t.Error(err)
			}
		}
	} else {
		t.Logf("live sched_switch format not checked: %v", err)
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := parseCPUList("0-3,5,7-8")
	if err != nil || !reflect.DeepEqual(got, []int{0, 1, 2, 3, 5, 7, 8}) {
		t.Fatalf("parseCPUList = %v, %v", got, err)
	}
	for _, bad := range []string{"a", "3-1", "1-", "1,,2"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) accepted", bad)
		}
	}
	if roundPow2(0, 256) != 256 || roundPow2(3, 256) != 4 || roundPow2(64, 1) != 64 {
		t.Fatal("roundPow2")
	}
}

// nopSink counts calls without allocating.
type nopSink struct {
	trace, mte int
	lost       uint64
	last       [8]uint64
	lastStr    string
	lastMinor  uint32
	lastMajor  uint16
	lastT      uint64
}

func (s *nopSink) Trace(cpu int, major uint16, minor uint32, t uint64, f []uint64) {
	s.trace++
	s.lastMajor, s.lastMinor, s.lastT = major, minor, t
	s.last = [8]uint64{}
	copy(s.last[:], f)
}
func (s *nopSink) MTE(cpu int, minor uint32, t uint64, f []uint64, str string) {
	s.mte++
	s.lastMinor, s.lastT, s.lastStr = minor, t, str
	s.last = [8]uint64{}
	copy(s.last[:], f)
}
func (s *nopSink) Lost(cpu int, mte bool, n uint64) { s.lost += n }

func testReader(sink Sink) *cpuReader {
	f := map[string]tpField{}
	parseFormat(bufio.NewScanner(strings.NewReader(switchFormat)), f)
	c := &cpuReader{cpu: 3, sink: sink, tasks: &taskMap{m: map[uint32]taskInfo{100: {tgid: 90}, 101: {tgid: 91}}}, intern: map[string]string{}}
	c.onMTE, c.onTrace = c.decodeMTE, c.decodeTrace
	c.evs = []evInfo{
		{id: 7, kind: kindTick, minor: trace.TprofTick},
		{id: 8, kind: kindSwitch, minor: trace.DispatchSwitch, f1: f["prev_pid"], f2: f["prev_state"], f3: f["next_pid"]},
		{id: 9, kind: kindIntr, minor: trace.IntrSoft, f1: tpField{8, 4, true}},
		{id: 10, kind: kindEvent, minor: trace.TprofEvent, event: 4},
	}
	return c
}

func tickRecord(misc uint16, id, ip uint64, pid, tid uint32, t uint64) []byte {
	b := &recBuf{}
	b.u64(id).u64(ip).u32(pid).u32(tid).u64(t).u32(3).u32(0)
	return record(recSample, misc, b, false, 0)
}

func switchRecord(prev, next uint32, state uint64, t uint64) []byte {
	raw := make([]byte, 64)
	binary.LittleEndian.PutUint32(raw[24:], prev)
	binary.LittleEndian.PutUint64(raw[32:], state)
	binary.LittleEndian.PutUint32(raw[56:], next)
	b := &recBuf{}
	b.u64(8).u32(prev).u32(prev).u64(t).u32(3).u32(0).u32(uint32(len(raw)))
	b.b = append(b.b, raw...)
	b.bytes(nil)
	return record(recSample, 0, b, false, 0)
}

func TestDecodeTrace(t *testing.T) {
	s := &nopSink{}
	c := testReader(s)
	c.decodeTrace(tickRecord(unix.PERF_RECORD_MISC_KERNEL, 7, 0xffffffff81000000, 90, 100, 555))
	if s.trace != 1 || s.lastMajor != trace.MajorTprof || s.lastMinor != trace.TprofTick || s.lastT != 555 ||
		s.last != [8]uint64{90, 100, 0xffffffff81000000, trace.TprofKernel} {
		t.Fatalf("tick: %+v", s)
	}
	c.decodeTrace(tickRecord(unix.PERF_RECORD_MISC_USER, 10, 0x401000, 90, 100, 556))
	if s.lastMinor != trace.TprofEvent || s.last != [8]uint64{90, 100, 0x401000, 0, 4} {
		t.Fatalf("event sample: %+v", s)
	}
	c.decodeTrace(switchRecord(100, 101, 1, 600))
	if s.lastMajor != trace.MajorDispatch || s.lastT != 600 || s.last != [8]uint64{90, 100, 91, 101, 1} {
		t.Fatalf("switch: %+v", s)
	}
	c.decodeTrace(switchRecord(0, 101, 0, 601))
	if s.last != [8]uint64{0, 0, 91, 101, 0} {
		t.Fatalf("switch from idle: %+v", s)
	}
	lost := &recBuf{}
	lost.u64(7).u64(12)
	c.decodeTrace(record(recLost, 0, lost, true, 1))
	if s.lost != 12 || c.lostTrace.Load() != 12 {
		t.Fatalf("lost: %d", s.lost)
	}
	n := s.trace
	c.decodeTrace(tickRecord(0, 12345, 1, 1, 1, 1)) // unknown id
	if s.trace != n || c.unknown.Load() != 1 {
		t.Fatal("a sample of an unknown event was passed on")
	}
}

func TestDecodeMTE(t *testing.T) {
	s := &nopSink{}
	c := testReader(s)
	fork := &recBuf{}
	fork.u32(500).u32(400).u32(501).u32(400).u64(77)
	c.decodeMTE(record(recFork, 0, fork, true, 1000))
	if s.lastMinor != trace.MTEFork || s.lastT != 1000 || s.last != [8]uint64{400, 400, 500, 501, 0} {
		t.Fatalf("fork: %+v", s)
	}
	if c.tasks.tgid(501, nil) != 500 {
		t.Fatal("fork did not reach the tid map")
	}
	thr := &recBuf{}
	thr.u32(500).u32(500).u32(502).u32(501).u64(77)
	c.decodeMTE(record(recFork, 0, thr, true, 1001))
	if s.last != [8]uint64{500, 501, 500, 502, trace.ForkThread} || c.tasks.tgid(502, nil) != 500 {
		t.Fatalf("thread fork: %+v", s)
	}

	// exec of our own pid: the path comes from /proc/PID/exe
	me := uint32(os.Getpid())
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	comm := &recBuf{}
	comm.u32(me).u32(me).bytes([]byte("prog\x00"))
	var got []string
	rs := &recSink{f: func(minor uint32, f []uint64, str string) {
		got = append(got, fmtRec(minor, f, str))
	}}
	c.sink = rs
	c.decodeMTE(record(recComm, unix.PERF_RECORD_MISC_COMM_EXEC, comm, true, 2000))
	want := []string{
		fmtRec(trace.MTEExec, []uint64{uint64(me), uint64(me)}, exe),
		fmtRec(trace.MTEProcess, []uint64{uint64(me), uint64(os.Getppid())}, "prog"),
		fmtRec(trace.MTEThreadName, []uint64{uint64(me), uint64(me)}, "prog"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("exec comm:\n got %q\nwant %q", got, want)
	}
	got = nil
	c.decodeMTE(record(recComm, 0, comm, true, 2001)) // a rename: thread name only
	if len(got) != 1 || got[0] != want[2] {
		t.Fatalf("rename: %q", got)
	}

	mm := func(pid uint32, prot uint32, name string) []byte {
		b := &recBuf{}
		b.u32(pid).u32(pid).u64(0x400000).u64(0x2000).u64(0x1000).u32(8).u32(1).u64(1234).u64(0).u32(prot).u32(2).bytes([]byte(name + "\x00"))
		return record(recMmap2, 0, b, true, 3000)
	}
	got = nil
	c.decodeMTE(mm(500, unix.PROT_READ|unix.PROT_EXEC, "/usr/lib/libc.so.6"))
	c.decodeMTE(mm(500, unix.PROT_READ, "/data"))                    // not executable
	c.decodeMTE(mm(^uint32(0), unix.PROT_EXEC, "[kernel.kallsyms]")) // kernel
	if len(got) != 1 || got[0] != fmtRec(trace.MTESegment, []uint64{500, 0x400000, 0x2000, 0x1000, 5}, "/usr/lib/libc.so.6") {
		t.Fatalf("mmap2: %q", got)
	}
	got = nil
	exit := &recBuf{}
	exit.u32(500).u32(400).u32(501).u32(400).u64(77)
	c.decodeMTE(record(recExit, 0, exit, true, 4000))
	if len(got) != 1 || got[0] != fmtRec(trace.MTEExit, []uint64{500, 501}, "") {
		t.Fatalf("exit: %q", got)
	}
	// the exited thread stays mapped during the grace period, then goes
	c.tasks.prune(4000 + exitGrace/2)
	if c.tasks.tgid(501, nil) != 500 {
		t.Fatal("exited thread dropped before the grace period")
	}
	c.tasks.prune(4000 + exitGrace + 1)
	if _, ok := c.tasks.m[501]; ok {
		t.Fatal("exited thread kept after the grace period")
	}
}

type recSink struct {
	f func(minor uint32, f []uint64, str string)
}

func (r *recSink) Trace(int, uint16, uint32, uint64, []uint64)                 {}
func (r *recSink) MTE(cpu int, minor uint32, t uint64, f []uint64, str string) { r.f(minor, f, str) }
func (r *recSink) Lost(int, bool, uint64)                                      {}

func fmtRec(minor uint32, f []uint64, s string) string {
	return fmt.Sprintf("%s %v %q", trace.Lookup(trace.MajorMTE, minor).Name, f, s)
}

// fakeRing is a ring in ordinary memory: a metadata page and size data bytes.
func fakeRing(size int) *ring {
	mem := make([]byte, 4096+size)
	return &ring{
		mem: mem, data: mem[4096:], mask: uint64(size - 1),
		head:    (*uint64)(unsafe.Pointer(&mem[offDataHead])),
		tail:    (*uint64)(unsafe.Pointer(&mem[offDataTail])),
		scratch: make([]byte, 1<<16),
	}
}

// put writes records into the ring at its head, wrapping at the end.
func (r *ring) put(recs ...[]byte) {
	h := *r.head
	for _, rec := range recs {
		for _, b := range rec {
			r.data[h&r.mask] = b
			h++
		}
	}
	*r.head = h
}

func TestRingWrap(t *testing.T) {
	r := fakeRing(128)
	// start near the end so the second record wraps
	*r.head, *r.tail = 96, 96
	a := tickRecord(0, 7, 1, 2, 3, 4) // 48 bytes: 96..144 wraps at 128
	b := switchRecord(5, 6, 1, 7)     // 8+48+64=... spans the start
	r.put(a)
	var got [][]byte
	n := r.drain(func(rec []byte) { got = append(got, append([]byte(nil), rec...)) })
	if n != 1 || !reflect.DeepEqual(got[0], a) || *r.tail != 144 {
		t.Fatalf("wrapped record: n=%d tail=%d\n got %x\nwant %x", n, *r.tail, got, a)
	}
	r.put(b) // 112 bytes at offset 16: ends exactly at the end of the area
	got = nil
	n = r.drain(func(rec []byte) { got = append(got, append([]byte(nil), rec...)) })
	if n != 1 || !reflect.DeepEqual(got[0], b) || *r.tail != *r.head {
		t.Fatalf("record ending at the area's end: n=%d tail=%d head=%d", n, *r.tail, *r.head)
	}
	// the header in the last 8 bytes, the body at the start
	*r.head, *r.tail = 120+128, 120+128
	r.put(a, a)
	got = nil
	n = r.drain(func(rec []byte) { got = append(got, append([]byte(nil), rec...)) })
	if n != 2 || !reflect.DeepEqual(got[0], a) || !reflect.DeepEqual(got[1], a) || *r.tail != *r.head {
		t.Fatalf("header at the end: n=%d tail=%d head=%d", n, *r.tail, *r.head)
	}
	// a torn record (size beyond head) is skipped, not read past head
	bad := tickRecord(0, 7, 1, 2, 3, 4)
	binary.LittleEndian.PutUint16(bad[6:], 200)
	r.put(bad[:48])
	if n := r.drain(func([]byte) { t.Fatal("torn record decoded") }); n != 0 || *r.tail != *r.head {
		t.Fatalf("torn: n=%d", n)
	}
}

// Decoding trace records and draining the ring allocate nothing.
func TestDecodeNoAlloc(t *testing.T) {
	s := &nopSink{}
	c := testReader(s)
	r := fakeRing(4096)
	c.tr = r
	tick := tickRecord(unix.PERF_RECORD_MISC_USER, 7, 0x401000, 90, 100, 5)
	sw := switchRecord(100, 101, 1, 6)
	soft := &recBuf{}
	raw := make([]byte, 12)
	binary.LittleEndian.PutUint32(raw[8:], 3)
	soft.u64(9).u32(1).u32(1).u64(7).u32(3).u32(0).u32(12)
	soft.b = append(soft.b, raw...)
	soft.bytes(nil)
	softRec := record(recSample, 0, soft, false, 0)
	allocs := testing.AllocsPerRun(200, func() {
		r.put(tick, sw, softRec, tick)
		c.drain()
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per drain of 4 trace records", allocs)
	}
	if s.trace != 4*201 {
		t.Fatalf("%d trace records decoded, want %d", s.trace, 4*201)
	}
	if s.lastMinor != trace.TprofTick {
		t.Fatalf("last minor %d", s.lastMinor)
	}
}

// Garbage records must not panic the decoders.
func TestDecodeGarbage(t *testing.T) {
	s := &nopSink{}
	c := testReader(s)
	rnd := rand.New(rand.NewSource(1))
	for i := 0; i < 200000; i++ {
		n := 8 + 8*rnd.Intn(16)
		b := make([]byte, n)
		rnd.Read(b)
		binary.LittleEndian.PutUint32(b, uint32(rnd.Intn(16)))
		binary.LittleEndian.PutUint16(b[6:], uint16(n))
		if n >= 16 && rnd.Intn(2) == 0 {
			binary.LittleEndian.PutUint64(b[8:], uint64(7+rnd.Intn(4))) // a known id
		}
		c.decodeTrace(b)
		c.decodeMTE(b)
	}
	t.Logf("%d trace and %d MTE calls, %d bad", s.trace, s.mte, c.bad.Load())
	if c.bad.Load() == 0 {
		t.Fatal("no garbage record was counted as malformed")
	}
}

func BenchmarkDecodeTick(b *testing.B) {
	s := &nopSink{}
	c := testReader(s)
	r := fakeRing(1 << 16)
	c.tr = r
	tick := tickRecord(unix.PERF_RECORD_MISC_USER, 7, 0x401000, 90, 100, 5)
	b.ReportAllocs()
	for i := 0; i < b.N; i += 64 {
		for j := 0; j < 64; j++ {
			r.put(tick)
		}
		c.drain()
	}
}

// A thread created on one CPU (FORK in that CPU's side-band ring, not
// decoded yet) that ran and exited on another is still mapped to its process.
func TestPeekFork(t *testing.T) {
	s := &nopSink{}
	a, b := testReader(s), testReader(s)
	a.tasks = &taskMap{m: map[uint32]taskInfo{}}
	b.tasks = a.tasks
	a.mte, b.mte = fakeRing(256), fakeRing(256)
	a.peers = []*cpuReader{a, b}
	b.peers = a.peers
	const gone = 0x7ffffff0 // no such thread in /proc
	fork := &recBuf{}
	fork.u32(4242).u32(4242).u32(gone).u32(4242).u64(1)
	other := &recBuf{}
	other.u32(7).u32(7).u32(8).u32(7).u64(1)
	*b.mte.head, *b.mte.tail = 200, 200 // the FORK wraps the ring's end
	b.mte.put(record(recFork, 0, other, true, 5), record(recFork, 0, fork, true, 6))
	if g := a.tasks.tgid(gone, a); g != 4242 {
		t.Fatalf("tgid of a thread known only from an undecoded FORK = %d, want 4242", g)
	}
	if *b.mte.tail != 200 {
		t.Fatal("peekFork consumed records")
	}
	// decoded by its owner meanwhile: the map answers
	a.tasks = &taskMap{m: map[uint32]taskInfo{}}
	b.tasks = a.tasks
	b.drain()
	if g := a.tasks.tgid(gone, a); g != 4242 {
		t.Fatalf("after the owner decoded the FORK: tgid %d", g)
	}
	// nowhere: the thread is taken to be a main thread
	if g := a.tasks.tgid(gone+1, a); g != gone+1 {
		t.Fatalf("unknown thread: tgid %d", g)
	}
}
