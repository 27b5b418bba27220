package perfring

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fake is a ring in ordinary memory that a test writes as the kernel would.
type fake struct {
	mem  []byte
	head uint64
	r    *Ring
}

func newFake(t *testing.T, dataBytes int) *fake {
	t.Helper()
	// The control page holds struct perf_event_mmap_page: a real page.
	ps := os.Getpagesize()
	mem := make([]byte, ps+dataBytes)
	return &fake{mem: mem, r: FromMemory(mem, ps)}
}

// put writes one record (header + body padded to 8 bytes) at the head,
// wrapping around, and publishes it when publish is set.
func (f *fake) put(typ uint32, misc uint16, body []byte, publish bool) {
	n := 8 + (len(body)+7)/8*8
	rec := make([]byte, n)
	binary.LittleEndian.PutUint32(rec, typ)
	binary.LittleEndian.PutUint16(rec[4:], misc)
	binary.LittleEndian.PutUint16(rec[6:], uint16(n))
	copy(rec[8:], body)
	data := f.mem[os.Getpagesize():]
	for i, b := range rec {
		data[(f.head+uint64(i))%uint64(len(data))] = b
	}
	f.head += uint64(n)
	if publish {
		f.publish()
	}
}

func (f *fake) publish() { atomic.StoreUint64(&f.r.meta.Data_head, f.head) }

type rec struct {
	typ  uint32
	misc uint16
	body []byte
}

func (f *fake) drain() []rec {
	var out []rec
	f.r.Drain(func(typ uint32, misc uint16, body []byte) {
		out = append(out, rec{typ, misc, append([]byte(nil), body...)})
	})
	return out
}

func body(v ...uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

func TestDrainInOrderAndWrapped(t *testing.T) {
	f := newFake(t, 128)
	// 3 records of 32 bytes, drained; then 2 more: the second of them
	// straddles the end of the 128-byte ring (offsets 112..128 and 0..32).
	for i := uint64(1); i <= 3; i++ {
		f.put(unix.PERF_RECORD_SAMPLE, uint16(i), body(i, i*10, i*100), true)
	}
	got := f.drain()
	if len(got) != 3 {
		t.Fatalf("%d records, want 3", len(got))
	}
	for i, r := range got {
		want := body(uint64(i+1), uint64(i+1)*10, uint64(i+1)*100)
		if r.typ != unix.PERF_RECORD_SAMPLE || r.misc != uint16(i+1) || !bytes.Equal(r.body, want) {
			t.Errorf("record %d: %+v, want misc %d body %v", i, r, i+1, want)
		}
	}
	if tail := f.r.meta.Data_tail; tail != 96 {
		t.Errorf("Data_tail %d after 3 records of 32 bytes, want 96", tail)
	}
	f.put(unix.PERF_RECORD_SAMPLE, 4, body(4), true)                       // 96..112
	f.put(unix.PERF_RECORD_SAMPLE, 5, body(5, 50, 500, 5000, 50000), true) // 112..160: wraps
	got = f.drain()
	if len(got) != 2 || !bytes.Equal(got[0].body, body(4)) || !bytes.Equal(got[1].body, body(5, 50, 500, 5000, 50000)) {
		t.Fatalf("after the wrap: %+v", got)
	}
	if f.r.Records != 5 || f.r.Lost != 0 || f.r.Corrupt != 0 {
		t.Errorf("counts records %d lost %d corrupt %d, want 5 0 0", f.r.Records, f.r.Lost, f.r.Corrupt)
	}
}

func TestDrainCountsLost(t *testing.T) {
	f := newFake(t, 256)
	f.put(unix.PERF_RECORD_LOST, 0, body(7, 42), true) // id, lost
	f.put(unix.PERF_RECORD_SAMPLE, 0, body(1), true)
	f.put(unix.PERF_RECORD_LOST, 0, body(7, 8), true)
	got := f.drain()
	if len(got) != 3 || got[0].typ != unix.PERF_RECORD_LOST || got[1].typ != unix.PERF_RECORD_SAMPLE {
		t.Fatalf("records %+v: want LOST, SAMPLE, LOST handed over in order", got)
	}
	if f.r.Lost != 50 || f.r.Records != 3 {
		t.Errorf("lost %d records %d, want 50 and 3", f.r.Lost, f.r.Records)
	}
}

// A record the head does not cover yet (torn: its header is there, its
// end is not published) is left in place and read whole by the next call.
func TestDrainLeavesTornRecord(t *testing.T) {
	f := newFake(t, 256)
	f.put(unix.PERF_RECORD_SAMPLE, 1, body(1), true)
	f.put(unix.PERF_RECORD_SAMPLE, 2, body(2, 2, 2), false)
	f.r.meta.Data_head = f.head - 8 // the header and part of the body only
	if got := f.drain(); len(got) != 1 || got[0].misc != 1 {
		t.Fatalf("first drain %+v, want the complete record only", got)
	}
	if tail := f.r.meta.Data_tail; tail != 16 {
		t.Fatalf("tail %d, want 16 (before the torn record)", tail)
	}
	f.publish()
	if got := f.drain(); len(got) != 1 || got[0].misc != 2 || !bytes.Equal(got[0].body, body(2, 2, 2)) {
		t.Fatalf("second drain %+v, want the record once complete", got)
	}
	if f.r.Corrupt != 0 {
		t.Errorf("corrupt %d, want 0", f.r.Corrupt)
	}
}

// A header with an impossible size is skipped to the head, counted, and
// the records written after it are read.
func TestDrainSkipsCorruptHeader(t *testing.T) {
	for _, size := range []uint16{0, 4, 1024} {
		f := newFake(t, 256)
		f.put(unix.PERF_RECORD_SAMPLE, 1, body(1), true)
		f.put(unix.PERF_RECORD_SAMPLE, 2, body(2), true)
		binary.LittleEndian.PutUint16(f.mem[os.Getpagesize()+16+6:], size)
		if got := f.drain(); len(got) != 1 || f.r.Corrupt != 1 {
			t.Fatalf("size %d: %d records, corrupt %d; want 1 and 1", size, len(got), f.r.Corrupt)
		}
		if tail := f.r.meta.Data_tail; tail != f.head {
			t.Fatalf("size %d: tail %d, want the head %d", size, tail, f.head)
		}
		f.put(unix.PERF_RECORD_SAMPLE, 3, body(3), true)
		if got := f.drain(); len(got) != 1 || got[0].misc != 3 {
			t.Fatalf("size %d: after the skip %+v, want record 3", size, got)
		}
	}
}

func TestMapRefusesBadSize(t *testing.T) {
	for _, p := range []int{0, 3, -1} {
		if _, err := Map(-1, p); err == nil {
			t.Errorf("Map(%d pages) accepted", p)
		}
	}
}

// A real ring: a software event on this thread writes a context switch
// record at each switch; Drain reads them.
func TestRealRing(t *testing.T) {
	runtime.LockOSThread() // the event is on this thread
	defer runtime.UnlockOSThread()
	a := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_DUMMY, Sample_type: unix.PERF_SAMPLE_TID,
		Bits: unix.PerfBitContextSwitch | unix.PerfBitExcludeKernel | unix.PerfBitSampleIDAll}
	a.Size = uint32(unsafe.Sizeof(a))
	fd, err := unix.PerfEventOpen(&a, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Skipf("no perf event on this thread (perf_event_paranoid %s): %v", paranoid(), err)
	}
	defer unix.Close(fd)
	r, err := Map(fd, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 20; i++ {
		unix.Nanosleep(&unix.Timespec{Nsec: 100000}, nil) // each sleep switches out and in
	}
	switches := 0
	r.Drain(func(typ uint32, _ uint16, b []byte) {
		if typ == unix.PERF_RECORD_SWITCH && len(b) >= 8 {
			switches++
		}
	})
	if switches < 20 {
		t.Fatalf("%d switch records for 20 sleeps, want >= 20 (records %d lost %d)", switches, r.Records, r.Lost)
	}
}

func paranoid() string {
	b, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	return string(bytes.TrimSpace(b))
}

// Take copies whole records, the wrapped one too, as many as fit; the
// copy is what Drain would have handed over; when not all fits, a torn
// record and a corrupt header are treated as Drain treats them.
func TestTake(t *testing.T) {
	f := newFake(t, 128)
	for i := uint64(1); i <= 3; i++ {
		f.put(unix.PERF_RECORD_SAMPLE, uint16(i), body(i, i*10, i*100), true) // 32 bytes each
	}
	f.r.Drain(func(uint32, uint16, []byte) {})                             // the tail at 96
	f.put(unix.PERF_RECORD_SAMPLE, 4, body(4), true)                       // 96..112
	f.put(unix.PERF_RECORD_SAMPLE, 5, body(5, 50, 500, 5000, 50000), true) // 112..160: wraps
	f.put(unix.PERF_RECORD_SAMPLE, 6, body(6), false)
	f.r.meta.Data_head = f.head - 8 // record 6 torn
	dst := make([]byte, 40)
	n, more := f.r.Take(dst)
	if n != 16 || !more {
		t.Fatalf("a 40-byte copy: %d bytes, more %v; want the first record (16) and more", n, more)
	}
	dst = make([]byte, 50) // less than what was written: the headers are read
	n, more = f.r.Take(dst)
	if n != 48 || more {
		t.Fatalf("the wrapped record: %d bytes, more %v; want 48 and no more (the torn one waits)", n, more)
	}
	g := newFake(t, 128)
	g.put(unix.PERF_RECORD_SAMPLE, 5, body(5, 50, 500, 5000, 50000), true)
	copy(g.mem[os.Getpagesize():], dst[:48])
	if got := g.drain(); len(got) != 1 || got[0].misc != 5 || !bytes.Equal(got[0].body, body(5, 50, 500, 5000, 50000)) {
		t.Fatalf("the copy reads back as %+v", got)
	}
	if f.r.Records != 3 {
		t.Errorf("Take counted records: %d, want the 3 Drain read", f.r.Records)
	}
	f.publish()
	if n, _ := f.r.Take(dst); n != 16 || f.r.meta.Data_tail != f.head {
		t.Fatalf("the torn record once complete: %d bytes, tail %d (head %d); want 16, all taken", n, f.r.meta.Data_tail, f.head)
	}
	// All that was written fits: one copy, to the head.
	a := newFake(t, 128)
	for i := uint64(1); i <= 3; i++ {
		a.put(unix.PERF_RECORD_SAMPLE, uint16(i), body(i), true)
	}
	if n, more := a.r.Take(dst); n != 48 || more || a.r.meta.Data_tail != 48 {
		t.Fatalf("all of it: %d bytes, more %v, tail %d; want 48, none, 48", n, more, a.r.meta.Data_tail)
	}
	// A corrupt header: the records before it are taken, the rest skipped.
	c := newFake(t, 256)
	c.put(unix.PERF_RECORD_SAMPLE, 1, body(1), true)
	c.put(unix.PERF_RECORD_SAMPLE, 2, body(2), true)
	binary.LittleEndian.PutUint16(c.mem[os.Getpagesize()+16+6:], 0)
	if n, more := c.r.Take(dst[:24]); n != 16 || more || c.r.Corrupt != 1 || c.r.meta.Data_tail != c.head {
		t.Fatalf("corrupt: %d bytes, more %v, corrupt %d, tail %d (head %d)", n, more, c.r.Corrupt, c.r.meta.Data_tail, c.head)
	}
}
