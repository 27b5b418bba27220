package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/internal/perfring"
	"perfinsp/libperfutil/events"
)

// Death is how the target died during the walk (JSON "death").
type Death struct {
	Signal int    `json:"signal"`
	Name   string `json:"signal_name"`
	Thread int    `json:"thread,omitempty"` // the thread the signal was delivered to (-p)
	// Core: "dumped", "not dumped", or what decides it when hotspot
	// cannot see the exit status (-p).
	Core string `json:"core"`
	// During is what was instrumented at the time.
	During string `json:"during"`
}

func (d *Death) String() string {
	return fmt.Sprintf("the target died of %s (signal %d, core %s) %s", d.Name, d.Signal, d.Core, d.During)
}

// coreSignals are the signals whose default action dumps core.
var coreSignals = map[unix.Signal]bool{unix.SIGQUIT: true, unix.SIGILL: true, unix.SIGTRAP: true, unix.SIGABRT: true,
	unix.SIGBUS: true, unix.SIGFPE: true, unix.SIGSEGV: true, unix.SIGXCPU: true, unix.SIGXFSZ: true, unix.SIGSYS: true}

// notFatal are the signals whose default action is to ignore them or to
// stop the process (not a death).
var notFatal = map[unix.Signal]bool{unix.SIGCHLD: true, unix.SIGCONT: true, unix.SIGURG: true, unix.SIGWINCH: true,
	unix.SIGSTOP: true, unix.SIGTSTP: true, unix.SIGTTIN: true, unix.SIGTTOU: true}

// deathWatch sees the fatal signals delivered to the target's threads:
// the signal:signal_deliver tracepoint on each of them (found as they
// appear, every 50 ms), filtered in the kernel to default actions, so a
// target that is not hotspot's child is still reported with the signal
// that killed it. The tracepoint fires in the dying thread before it
// exits.
type deathWatch struct {
	ev       events.Event
	tree     *procTree
	mu       sync.Mutex
	watched  map[int]*perfring.Ring
	fds      []int
	sig, tid int
	stop     chan struct{}
	done     chan struct{}
}

// startDeathWatch starts watching the threads of tree; nil if the
// tracepoint cannot be opened (the death is then reported without its
// signal, or from the exit status of a child).
func startDeathWatch(tree *procTree) *deathWatch {
	ev, err := events.Parse("signal:signal_deliver")
	if err != nil {
		return nil
	}
	d := &deathWatch{ev: ev, tree: tree, watched: map[int]*perfring.Ring{}, stop: make(chan struct{}), done: make(chan struct{})}
	if !d.scan() {
		d.close()
		return nil
	}
	go d.loop()
	return d
}

func (d *deathWatch) loop() {
	defer close(d.done)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.scan()
		}
	}
}

// scan attaches to new threads and reads the records; false if no thread
// could be watched.
func (d *deathWatch) scan() bool {
	tids, _ := d.tree.threads()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, tid := range tids {
		if d.watched[tid] != nil {
			continue
		}
		fd, err := d.open(tid)
		if err != nil {
			continue
		}
		r, err := perfring.Map(fd, 1)
		if err != nil {
			unix.Close(fd)
			continue
		}
		d.fds = append(d.fds, fd)
		d.watched[tid] = r
	}
	d.drainLocked()
	return len(d.watched) > 0
}

func (d *deathWatch) open(tid int) (int, error) {
	a := d.ev.Attr()
	a.Size = uint32(unsafe.Sizeof(a))
	a.Sample = 1
	a.Wakeup = 1
	a.Sample_type = unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_RAW
	fd, err := unix.PerfEventOpen(&a, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	// Only the default actions (SIG_DFL): not the handled signals a
	// runtime sends itself all the time (Go's preemption SIGURG).
	// A kernel refusing the filter: the records are checked below.
	filter, _ := unix.BytePtrFromString("sa_handler == 0")
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.PERF_EVENT_IOC_SET_FILTER, uintptr(unsafe.Pointer(filter)))
	return fd, nil
}

// drainLocked reads the delivered signals: the last fatal one is kept.
func (d *deathWatch) drainLocked() {
	for _, r := range d.watched {
		r.Drain(func(typ uint32, _ uint16, b []byte) {
			// pid, tid, raw size, raw: common header (8), sig, errno,
			// code, pad, sa_handler.
			if typ != unix.PERF_RECORD_SAMPLE || len(b) < 12+32 {
				return
			}
			raw := b[12:]
			sig := int32(binary.LittleEndian.Uint32(raw[8:]))
			handler := binary.LittleEndian.Uint64(raw[24:])
			if handler != 0 || sig <= 0 || notFatal[unix.Signal(sig)] {
				return
			}
			d.sig, d.tid = int(sig), int(binary.LittleEndian.Uint32(b[4:]))
		})
	}
}

// fatal returns the last fatal signal delivered (0: none) and its thread.
func (d *deathWatch) fatal() (int, int) {
	if d == nil {
		return 0, 0
	}
	d.scan()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sig, d.tid
}

// count is the number of perf fds the watch holds.
func (d *deathWatch) count() int {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.fds)
}

func (d *deathWatch) close() {
	if d == nil {
		return
	}
	select {
	case <-d.stop:
	default:
		close(d.stop)
		select {
		case <-d.done:
		case <-time.After(time.Second):
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.watched {
		r.Close()
	}
	// Each close of a tracepoint event waits little (no breakpoint).
	for _, fd := range d.fds {
		unix.Close(fd)
	}
	d.watched, d.fds = map[int]*perfring.Ring{}, nil
}

// deathOf says how the target died: from the exit status of a child
// (ps, exact), else from the watched signal; nil if it was not killed by
// a signal (or no signal was seen).
func deathOf(ps *os.ProcessState, d *deathWatch, coreLimit string) *Death {
	if ps != nil {
		ws, ok := ps.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() {
			return nil
		}
		core := "not dumped"
		if ws.CoreDump() {
			core = "dumped"
		}
		return &Death{Signal: int(ws.Signal()), Name: unix.SignalName(ws.Signal()), Core: core}
	}
	sig, tid := d.fatal()
	if sig == 0 {
		return nil
	}
	s := unix.Signal(sig)
	core := "not dumped (not the signal's default action)"
	if coreSignals[s] {
		core = "dumped if the limits allow: " + coreLimit
		if strings.HasPrefix(coreLimit, "RLIMIT_CORE 0,") && !strings.Contains(coreLimit, `core_pattern "|`) {
			core = "not dumped: " + coreLimit
		}
	}
	return &Death{Signal: sig, Name: unix.SignalName(s), Thread: tid, Core: core}
}

// coreLimit describes what decides a core dump of pid: its RLIMIT_CORE
// soft limit and the kernel's core_pattern (read at the start).
func coreLimit(pid int) string {
	limit := "?"
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Max core file size") {
				if f := strings.Fields(strings.TrimPrefix(l, "Max core file size")); len(f) > 0 {
					limit = f[0]
				}
			}
		}
	}
	pattern := "?"
	if b, err := os.ReadFile("/proc/sys/kernel/core_pattern"); err == nil {
		pattern = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("RLIMIT_CORE %s, core_pattern %q", limit, pattern)
}
