package ptt

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// perfBackend is the no-module backend: one perf_event counter per metric
// and thread, each with its mmap page (and, for time metrics without
// cap_user_time, a small ring buffer of context-switch records).
type perfBackend struct {
	metrics       []Metric
	kinds         []int
	excludeKernel bool
	capTime       bool
	capRdpmc      bool
	notes         []string
}

// graveyard keeps the anonymous mappings and /dev/null descriptors that
// replace a terminated thread's counters, so that a read racing Terminate
// never faults or reads a recycled descriptor. They are released by the
// next Init.
var graveyard struct {
	maps []unsafe.Pointer
	lens []uintptr
	fds  []int
}

var (
	zeroOnce sync.Once
	zeroArea []byte
)

// zeroPages is two pages of zeros that terminated handles read from.
func zeroPages() unsafe.Pointer {
	zeroOnce.Do(func() { zeroArea = make([]byte, 2*os.Getpagesize()) })
	return unsafe.Pointer(&zeroArea[0])
}

func buryAll() {
	for i, p := range graveyard.maps {
		_ = unix.MunmapPtr(p, graveyard.lens[i])
	}
	for _, fd := range graveyard.fds {
		unix.Close(fd)
	}
	graveyard.maps, graveyard.lens, graveyard.fds = nil, nil, nil
}

func isTime(m Metric) bool {
	return m.perfType == unix.PERF_TYPE_SOFTWARE && (m.config == unix.PERF_COUNT_SW_TASK_CLOCK || m.config == unix.PERF_COUNT_SW_CPU_CLOCK)
}

func isDispatchCount(m Metric) bool {
	return m.perfType == unix.PERF_TYPE_SOFTWARE && (m.config == unix.PERF_COUNT_SW_CONTEXT_SWITCHES || m.config == unix.PERF_COUNT_SW_CPU_MIGRATIONS)
}

func newPerfBackend(ms []Metric) (*perfBackend, error) {
	buryAll()
	b := &perfBackend{metrics: ms}
	for _, m := range ms {
		if m.perfType == perfTypeModule {
			return nil, fmt.Errorf("metric %s needs the pitrace kernel module (kmod backend): %s", m.Name, KmodStatus().Why)
		}
	}
	// Check every metric on the calling thread; learn the page capabilities.
	for _, m := range ms {
		fd, err := OpenCounter(m, 0, OpenOpts{ExcludeKernel: b.excludeKernel})
		if err != nil && !b.excludeKernel && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) {
			fd, err = OpenCounter(m, 0, OpenOpts{ExcludeKernel: true})
			if err == nil {
				b.excludeKernel = true
				b.notes = append(b.notes, fmt.Sprintf("kernel-mode counts are excluded: perf_event_paranoid=%d and not root", Paranoid()))
			}
		}
		if err != nil {
			return nil, err
		}
		pg, err := unix.MmapPtr(fd, 0, nil, uintptr(os.Getpagesize()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("mmap the perf page of %s: %w", m.Name, err)
		}
		caps := ld64(pg, pgCaps)
		if isTime(m) {
			b.capTime = caps&capUserTime != 0
		}
		if m.Hardware {
			b.capRdpmc = caps&capUserRdpmc != 0
		}
		_ = unix.MunmapPtr(pg, uintptr(os.Getpagesize()))
		unix.Close(fd)
	}
	if b.excludeKernel {
		for _, m := range ms {
			if m.perfType == unix.PERF_TYPE_SOFTWARE && m.config == unix.PERF_COUNT_SW_CONTEXT_SWITCHES {
				return nil, fmt.Errorf("metric %s counts in kernel mode, which perf_event_paranoid=%d forbids for a non-root user", m.Name, Paranoid())
			}
		}
	}
	for _, m := range ms {
		k := kindSyscall
		switch {
		case isTime(m) && b.capTime && haveTSC:
			k = kindTSCTime
		case isTime(m):
			k = kindSwitchTime
		case m.Hardware && b.capRdpmc && haveTSC:
			k = kindPMC
		case isDispatchCount(m):
			k = kindDispatch
		}
		b.kinds = append(b.kinds, k)
	}
	return b, nil
}

func (b *perfBackend) name() string { return "daemon" }

func (b *perfBackend) openThread(t *Thread) error {
	ps := uintptr(os.Getpagesize())
	t.c = make([]counter, len(b.metrics))
	for i, m := range b.metrics {
		c := &t.c[i]
		c.kind = b.kinds[i]
		fd, err := OpenCounter(m, 0, OpenOpts{ExcludeKernel: b.excludeKernel, SwitchRecords: c.kind == kindSwitchTime})
		if err != nil {
			b.release(t, i)
			return err
		}
		c.fd = fd
		c.sfd.Store(int32(fd))
		c.size = ps
		if c.kind == kindSwitchTime {
			c.size = 2 * ps // control page + one data page (256 switch records)
		}
		// PROT_READ only: the ring buffer is in overwrite mode, so the last
		// record is always the newest switch.
		pg, err := unix.MmapPtr(fd, 0, nil, c.size, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			unix.Close(fd)
			b.release(t, i)
			return fmt.Errorf("mmap the perf page of %s: %w", m.Name, err)
		}
		c.page = pg
		if c.kind == kindSwitchTime {
			c.data = unsafe.Add(pg, uintptr(ld64(pg, pgDataOffset)))
			c.mask = ld64(pg, pgDataSize) - 1
		}
	}
	t.lock = unsafe.Add(t.c[0].page, pgLock)
	// A time counter needs one switch-in record before its first read: sleep
	// briefly until the thread has been dispatched once since the open.
	for i := range t.c {
		c := &t.c[i]
		if c.kind != kindSwitchTime {
			continue
		}
		for try := 0; ld64(c.page, pgDataHead) == 0; try++ {
			if try == 1000 {
				b.release(t, len(t.c))
				return errors.New("no context-switch record arrived for the new counter")
			}
			time.Sleep(time.Microsecond)
		}
	}
	return nil
}

// release unmaps and closes the first n counters (open failed half way).
func (b *perfBackend) release(t *Thread, n int) {
	for i := 0; i < n; i++ {
		c := &t.c[i]
		if c.page != nil {
			_ = unix.MunmapPtr(c.page, c.size)
		}
		if c.fd > 0 {
			unix.Close(c.fd)
		}
	}
	t.c = nil
}

func (b *perfBackend) closeThread(t *Thread, terminating bool) {
	if !terminating {
		// The owner closes its own thread: nothing can be reading.
		b.release(t, len(t.c))
		return
	}
	// Another goroutine may be reading: swap in zero pages at the same
	// addresses (never unmapped) and /dev/null for the descriptors.
	null, _ := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for i := range t.c {
		c := &t.c[i]
		if _, err := unix.MmapPtr(-1, 0, c.page, c.size, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED); err == nil {
			graveyard.maps = append(graveyard.maps, c.page)
			graveyard.lens = append(graveyard.lens, c.size)
		}
		if c.kind == kindSyscall && null >= 0 {
			_ = unix.Dup3(null, c.fd, unix.O_CLOEXEC)
			graveyard.fds = append(graveyard.fds, c.fd)
		} else {
			unix.Close(c.fd)
		}
		// From now on the handle reads zeros that are never freed: the
		// zero pages above go at the next Init, and a stale handle may
		// still be read after that.
		c.sfd.Store(-1)
		z := zeroPages()
		atomic.StorePointer(&c.data, unsafe.Add(z, uintptr(os.Getpagesize())))
		atomic.StorePointer(&c.page, z)
	}
	atomic.StorePointer(&t.lock, unsafe.Add(zeroPages(), pgLock))
	if null >= 0 {
		unix.Close(null)
	}
}

func (b *perfBackend) terminate() {}

func (b *perfBackend) guarantees() Guarantees {
	g := Guarantees{
		Backend:               "daemon",
		NoSyscallRead:         true,
		InterruptsFactoredOut: false,
		DispatchCounts:        false,
		InterruptCounts:       false,
		RetryDetects:          "a dispatch of the thread during the read (the kernel rewrites the perf mmap page, and its lock, at every switch-in); interrupts are not detected",
		Notes: []string{
			"interrupt time is NOT factored out: asynchronous interrupts taken while the thread runs are counted to the thread (only the pitrace module keeps per-CPU interrupt buckets)",
			"no per-thread dispatch or interrupt counts in the work area: ask for the context-switches metric to count dispatches",
		},
	}
	g.Notes = append(g.Notes, b.notes...)
	for i, m := range b.metrics {
		k := b.kinds[i]
		if k == kindSyscall {
			g.NoSyscallRead = false
		}
		g.Metrics = append(g.Metrics, MetricGuarantee{Metric: m.Name, Mapped: k != kindSyscall, Path: kindPath[k], KernelCounted: !b.excludeKernel || isTime(m)})
	}
	return g
}
