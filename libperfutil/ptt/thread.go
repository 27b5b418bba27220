package ptt

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read kinds: how one counter is read (chosen when the thread opens it).
const (
	kindSwitchTime = iota // time: time_running at dispatch + CLOCK_MONOTONIC since the switch-in record
	kindTSCTime           // time: time_running + rdtsc scaled by the page's time_mult/shift/offset
	kindPMC               // hardware counter: offset + rdpmc(index-1)
	kindDispatch          // count that changes only at dispatch: the page's offset
	kindSyscall           // read() system call (the page is refreshed only at dispatch)
)

var kindPath = map[int]string{
	kindSwitchTime: "mapped: time_running at dispatch + CLOCK_MONOTONIC (vDSO) since the PERF_RECORD_SWITCH in record",
	kindTSCTime:    "mapped: time_running + rdtsc scaled by time_mult/time_shift/time_offset (cap_user_time)",
	kindPMC:        "mapped: offset + rdpmc (cap_user_rdpmc)",
	kindDispatch:   "mapped: the page's count (the kernel changes it only at dispatch)",
	kindSyscall:    "read() system call: the kernel refreshes the mapped page only at dispatch",
}

// counter is one metric of one thread.
type counter struct {
	kind int
	fd   int
	sfd  atomic.Int32   // fd for the read() path; -1 once terminated
	page unsafe.Pointer // perf_event_mmap_page (atomic: Terminate swaps it)
	data unsafe.Pointer // ring buffer (kindSwitchTime; atomic as page)
	mask uint64
	size uintptr // bytes mapped
	read func(c *counter) uint64
}

// Offsets in struct perf_event_mmap_page, from x/sys's mirror of it.
var mmapPage unix.PerfEventMmapPage

const (
	pgLock        = unsafe.Offsetof(mmapPage.Lock)
	pgIndex       = unsafe.Offsetof(mmapPage.Index)
	pgOffset      = unsafe.Offsetof(mmapPage.Offset)
	pgTimeEnabled = unsafe.Offsetof(mmapPage.Time_enabled)
	pgTimeRunning = unsafe.Offsetof(mmapPage.Time_running)
	pgCaps        = unsafe.Offsetof(mmapPage.Capabilities)
	pgPMCWidth    = unsafe.Offsetof(mmapPage.Pmc_width)
	pgTimeShift   = unsafe.Offsetof(mmapPage.Time_shift)
	pgTimeMult    = unsafe.Offsetof(mmapPage.Time_mult)
	pgTimeOffset  = unsafe.Offsetof(mmapPage.Time_offset)
	pgDataHead    = unsafe.Offsetof(mmapPage.Data_head)
	pgDataOffset  = unsafe.Offsetof(mmapPage.Data_offset)
	pgDataSize    = unsafe.Offsetof(mmapPage.Data_size)

	capUserRdpmc = 1 << 2
	capUserTime  = 1 << 3
)

func ld32(p unsafe.Pointer, off uintptr) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Add(p, off)))
}

func ld64(p unsafe.Pointer, off uintptr) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Add(p, off)))
}

func ld16(p unsafe.Pointer, off uintptr) uint16 {
	return *(*uint16)(unsafe.Add(p, off))
}

func readSwitchTime(c *counter) uint64 {
	pg := atomic.LoadPointer(&c.page)
	head := ld64(pg, pgDataHead)
	at := *(*uint64)(unsafe.Add(atomic.LoadPointer(&c.data), uintptr((head-8)&c.mask)))
	run := ld64(pg, pgTimeRunning)
	now := uint64(nanotime())
	if now < at {
		return run
	}
	return run + now - at
}

// tscToNs converts a TSC value with the page's parameters, as the kernel
// documents for cap_user_time.
func tscToNs(cyc uint64, mult uint32, shift uint16) uint64 {
	quot := cyc >> shift
	rem := cyc & (uint64(1)<<shift - 1)
	return quot*uint64(mult) + (rem*uint64(mult))>>shift
}

func readTSCTime(c *counter) uint64 {
	pg := atomic.LoadPointer(&c.page)
	run := ld64(pg, pgTimeRunning)
	off := ld64(pg, pgTimeOffset)
	mult := ld32(pg, pgTimeMult)
	shift := ld16(pg, pgTimeShift)
	cyc := rdtsc()
	return run + off + tscToNs(cyc, mult, shift)
}

// pmcValue combines the page offset with a raw counter value of width bits.
func pmcValue(offset int64, pmc uint64, width uint16) uint64 {
	if width > 0 && width < 64 {
		sh := 64 - width
		pmc = uint64(int64(pmc<<sh) >> sh)
	}
	return uint64(offset + int64(pmc))
}

func readPMC(c *counter) uint64 {
	pg := atomic.LoadPointer(&c.page)
	idx := ld32(pg, pgIndex)
	off := int64(ld64(pg, pgOffset))
	if idx == 0 {
		return uint64(off)
	}
	return pmcValue(off, rdpmc(idx-1), ld16(pg, pgPMCWidth))
}

func readDispatch(c *counter) uint64 {
	return ld64(atomic.LoadPointer(&c.page), pgOffset)
}

func readSyscall(c *counter) uint64 {
	fd := int(c.sfd.Load())
	if fd < 0 {
		return 0
	}
	v, err := ReadCounter(fd)
	if err != nil {
		return 0
	}
	return v
}

// Thread is one OS thread's PTT handle.
type Thread struct {
	tid     int
	metrics []Metric
	c       []counter
	lock    unsafe.Pointer // *uint32: the first counter's page lock, changes at every dispatch (atomic: Terminate swaps it)
	dead    atomic.Bool
	retries atomic.Uint64
	readN   func(t *Thread, vals []uint64) int
}

// Tid is the thread id the handle belongs to.
func (t *Thread) Tid() int { return t.tid }

// Metrics are the metrics, in the order reads return them.
func (t *Thread) Metrics() []Metric { return append([]Metric(nil), t.metrics...) }

// Retries counts the reads that were repeated because the thread was
// dispatched (the page changed) while reading.
func (t *Thread) Retries() uint64 { return t.retries.Load() }

// Read1 returns the first metric: the fastest read.
func (t *Thread) Read1() (uint64, error) {
	c := &t.c[0]
	for {
		seq := atomic.LoadUint32((*uint32)(atomic.LoadPointer(&t.lock)))
		v := c.read(c)
		if atomic.LoadUint32((*uint32)(atomic.LoadPointer(&t.lock))) == seq {
			if t.dead.Load() {
				return 0, ErrTerminated
			}
			return v, nil
		}
		t.retries.Add(1)
	}
}

// Read2 returns the first two metrics, consistent with each other.
func (t *Thread) Read2() (uint64, uint64, error) {
	if len(t.c) < 2 {
		v, err := t.Read1()
		return v, 0, err
	}
	c0, c1 := &t.c[0], &t.c[1]
	for {
		seq := atomic.LoadUint32((*uint32)(atomic.LoadPointer(&t.lock)))
		a := c0.read(c0)
		b := c1.read(c1)
		if atomic.LoadUint32((*uint32)(atomic.LoadPointer(&t.lock))) == seq {
			if t.dead.Load() {
				return 0, 0, ErrTerminated
			}
			return a, b, nil
		}
		t.retries.Add(1)
	}
}

// Read fills vals (at least one slot per metric) with every metric, all
// read between the same two dispatches. It uses the routine chosen for the
// number of metrics when the thread was opened.
func (t *Thread) Read(vals []uint64) error {
	if len(vals) < len(t.c) {
		return errShortVals(len(vals), len(t.c))
	}
	t.readN(t, vals)
	if t.dead.Load() {
		return ErrTerminated
	}
	return nil
}

func read1(t *Thread, vals []uint64) int {
	vals[0], _ = t.Read1()
	return 1
}

func read2(t *Thread, vals []uint64) int {
	vals[0], vals[1], _ = t.Read2()
	return 2
}

func readAll(t *Thread, vals []uint64) int {
	for {
		seq := atomic.LoadUint32((*uint32)(atomic.LoadPointer(&t.lock)))
		for i := range t.c {
			c := &t.c[i]
			vals[i] = c.read(c)
		}
		if atomic.LoadUint32((*uint32)(atomic.LoadPointer(&t.lock))) == seq {
			return len(t.c)
		}
		t.retries.Add(1)
	}
}

func (t *Thread) pickReader() {
	switch len(t.c) {
	case 1:
		t.readN = read1
	case 2:
		t.readN = read2
	default:
		t.readN = readAll
	}
	for i := range t.c {
		switch t.c[i].kind {
		case kindSwitchTime:
			t.c[i].read = readSwitchTime
		case kindTSCTime:
			t.c[i].read = readTSCTime
		case kindPMC:
			t.c[i].read = readPMC
		case kindDispatch:
			t.c[i].read = readDispatch
		case kindModule:
			t.c[i].read = readModule
		default:
			t.c[i].read = readSyscall
		}
	}
}

// Close releases this thread's counters; later reads return ErrTerminated.
func (t *Thread) Close() error {
	mu.Lock()
	defer mu.Unlock()
	if t.dead.Swap(true) {
		return nil
	}
	if active != nil {
		active.closeThread(t, false)
		delete(threads, t.tid)
	}
	return nil
}

// CounterFD is the perf_event descriptor of metric i, for comparisons with
// the read() system call and for diagnostics; -1 if there is none.
func (t *Thread) CounterFD(i int) int {
	if i < 0 || i >= len(t.c) || t.dead.Load() {
		return -1
	}
	return t.c[i].fd
}
