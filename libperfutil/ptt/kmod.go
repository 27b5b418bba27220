package ptt

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/kmodbackend"
)

// kmodBackend is PTT on the pitrace module: each thread maps its own work
// area, which the module keeps up to date at every dispatch and interrupt
// (PI's Figure 5), with asynchronous interrupts factored out. A read is
// accum + ((rdtsc − last) & live), repeated while the area's sequence
// changed: live is all ones for the TSC (current to the instant of the
// read) and 0 for a perf counter (current to the thread's last dispatch or
// interrupt, when the module read the per-CPU counter), so the read has no
// branch on the metric kind.
type kmodBackend struct {
	fd      int
	metrics []Metric
	hooks   uint32
}

const devPitrace = kmodbackend.Device

// kindModule reads a metric from the module's work area.
const kindModule = kindSyscall + 1

func newKmodBackend(ms []Metric) (*kmodBackend, error) {
	fd, err := unix.Open(devPitrace, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, errors.New("ptt backend kmod is not available: module not loaded")
		}
		return nil, fmt.Errorf("open %s: %w", devPitrace, err)
	}
	if !haveTSC {
		unix.Close(fd)
		return nil, errors.New("the pitrace module's PTT needs rdtsc (x86-64)")
	}
	if err := kmodbackend.CheckABI(uintptr(fd)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ptt backend kmod: %w", err)
	}
	hooks, err := kmodbackend.PttHooks(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ptt backend kmod: the loaded pitrace module has no PTT support: %w", err)
	}
	if err := ModuleInit(fd, ms); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ptt backend kmod: %w", err)
	}
	return &kmodBackend{fd: fd, metrics: ms, hooks: hooks}, nil
}

func (b *kmodBackend) name() string { return "kmod" }

func (b *kmodBackend) openThread(t *Thread) error {
	p, err := unix.MmapPtr(b.fd, kmodbackend.PttMmapOffset, nil, uintptr(os.Getpagesize()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the work area: %w", err)
	}
	area := (*kmodbackend.PttArea)(p)
	t.c = make([]counter, len(t.metrics))
	for i := range t.c {
		t.c[i] = counter{kind: kindModule, fd: -1, page: p, size: uintptr(os.Getpagesize()), mask: uint64(i)}
		t.c[i].sfd.Store(-1)
	}
	t.lock = unsafe.Pointer(&area.Seq)
	return nil
}

func (b *kmodBackend) closeThread(t *Thread, terminating bool) {
	for i := range t.c {
		c := &t.c[i]
		if i == 0 {
			if terminating {
				// A reader may race: the same address turns into zeros
				// that are never freed.
				if _, err := unix.MmapPtr(-1, 0, c.page, c.size, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED); err == nil {
					graveyard.maps = append(graveyard.maps, c.page)
					graveyard.lens = append(graveyard.lens, c.size)
				}
			} else {
				_ = unix.MunmapPtr(c.page, c.size)
			}
		}
		atomic.StorePointer(&c.page, zeroPages())
	}
	atomic.StorePointer(&t.lock, zeroPages())
}

func (b *kmodBackend) terminate() {
	_ = kmodbackend.PttTerm(b.fd)
	unix.Close(b.fd)
}

func (b *kmodBackend) guarantees() Guarantees {
	return ModuleGuarantees(b.metrics, b.hooks)
}

// Read paths of the module backend, by metric kind.
const (
	pathModuleTSC  = "mapped: module work area accum + ((rdtsc - last) & live), live = ~0: current to the instant of the read"
	pathModulePerf = "mapped: module work area accum (live = 0): a per-CPU perf counter the module reads at every dispatch and interrupt, " +
		"so the value is current to the thread's last dispatch/interrupt, not to the instant of the read"
)

// ModuleGuarantees is what the module backend promises for metrics ms
// (hooks: the interrupt hooks PTT_STATUS reports).
func ModuleGuarantees(ms []Metric, hooks uint32) Guarantees {
	g := Guarantees{
		Backend:               "kmod",
		NoSyscallRead:         true,
		InterruptsFactoredOut: true,
		DispatchCounts:        true,
		InterruptCounts:       true,
		RetryDetects:          "the work area's sequence: every dispatch and interrupt of the thread changes it",
	}
	perf := false
	for _, m := range ms {
		p := pathModuleTSC
		if m.perfType != perfTypeModule {
			p, perf = pathModulePerf, true
		}
		g.Metrics = append(g.Metrics, MetricGuarantee{Metric: m.Name, Mapped: true, Path: p, KernelCounted: true})
	}
	if perf {
		g.Notes = append(g.Notes, "perf metrics are current to the thread's last dispatch/interrupt: work since then shows at the next state change (a sleep, a preemption or an interrupt)")
	} else {
		g.Notes = append(g.Notes, "perf metrics (cpu-clock, page-faults, context-switches, hardware counters, ...) are per-CPU counters the module reads at every dispatch and interrupt: "+
			"a read is current to the thread's last dispatch/interrupt; task-clock is not available on the module (use tsc or cpu-clock)")
	}
	g.Notes = append(g.Notes, fmt.Sprintf("interrupt hooks attached: %#x (kmod/uapi/pitrace.h PITRACE_PTT_HOOK_*)", hooks))
	return g
}

// readModule: metric i (kept in mask) of the thread with interrupts
// factored out, without a branch on the metric kind.
func readModule(c *counter) uint64 {
	a := (*kmodbackend.PttArea)(atomic.LoadPointer(&c.page))
	i := c.mask
	return a.Accum[i] + ((rdtsc() - a.Last[i]) & a.Live[i])
}

// AreaCounts returns the dispatch and interrupt counts of a thread on the
// kmod backend (ok is false on other backends).
func (t *Thread) AreaCounts() (dispatches, interrupts uint32, ok bool) {
	if len(t.c) == 0 || t.c[0].kind != kindModule || t.dead.Load() {
		return 0, 0, false
	}
	a := (*kmodbackend.PttArea)(atomic.LoadPointer(&t.c[0].page))
	return atomic.LoadUint32(&a.Dispatches), atomic.LoadUint32(&a.Interrupts), true
}
