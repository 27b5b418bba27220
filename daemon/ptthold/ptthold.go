// Package ptthold is the PTT holder the agent (pitraced) hosts for `ptt on`,
// `ptt dump` and `ptt off`: per user, it counts the metrics of every thread
// of a target process (or of every process the user may observe) until
// `ptt off`, and answers dumps.
//
// Two backends. perf (no module): per-thread perf_event counters the agent
// opens; interrupts are not factored out. kmod (the pitrace module): the
// client passes a /dev/pitrace descriptor it opened itself; the holder
// selects the metrics (PTT_INIT) and has the module keep a work area for
// every thread (PTT_WATCH), read as snapshots (PTT_READ, PTT_STATUS).
//
// New threads are picked up when they are created: the netlink process
// connector reports every fork and clone (root agent), and the holder
// opens counters (or watches) the new thread at once; with the module the
// kernel also gives threads of a watched process their area at creation.
// A /proc rescan every 200 ms stays as the fallback (a user's own agent
// cannot subscribe to the connector).
//
// Every request is checked against the caller: a process is watched only
// for root or for the user it belongs to (real and effective uid), and for a
// non-root caller kernel-mode counting follows perf_event_paranoid as if the
// caller had opened the counters itself.
package ptthold

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"perfinsp/daemon/server"
	"perfinsp/libperfutil/kmodbackend"
	"perfinsp/libperfutil/ptt"
)

// Service holds one holder per user.
type Service struct {
	mu      sync.Mutex
	holders map[int]*holder
	logf    func(string, ...any)
	mon     *procMonitor
}

// Register adds the PTT ops to the agent.
func Register(s *server.Server, logf func(string, ...any)) *Service {
	svc := &Service{holders: map[int]*holder{}, logf: logf}
	s.HandleRequest(ptt.OpOn, svc.on)
	s.Handle(ptt.OpOff, func(p server.Peer, _ json.RawMessage) (any, error) { return nil, svc.off(p.UID) })
	s.Handle(ptt.OpDump, func(p server.Peer, _ json.RawMessage) (any, error) { return svc.dump(p.UID) })
	s.Busy(func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return len(svc.holders) > 0
	})
	s.OnShutdown(svc.stopAll)
	return svc
}

// ErrNotOn is returned by dump and off without a holder.
var ErrNotOn = errors.New("ptt is not on: run ptt on first")

type thread struct {
	pid, tid int
	name     string
	fds      []int // metrics, then context-switches
	exited   bool
}

type holder struct {
	mu      sync.Mutex
	uid     int
	metrics []ptt.Metric
	pid     int
	excl    bool
	threads map[int]*thread
	errs    []string
	started time.Time
	stop    chan struct{}
	// The module backend: the client's /dev/pitrace file whose areas are
	// the watched threads (kfile nil on the perf backend).
	kfile   *os.File
	kfd     int
	hooks   uint32
	watched map[int]bool
	newThr  string
}

const notePerf = "backend perf (no module): asynchronous interrupts are NOT factored out of the thread metrics; " +
	"dispatches come from the perf context-switches counter; per-thread interrupts and interrupt time are not available on this backend (n/a)"

const noteKmod = "backend kmod (pitrace module): asynchronous interrupts are factored out of the thread metrics (INTERRUPTS, INTR-*) into the per-CPU buckets; " +
	"tsc of a thread running at the snapshot includes its time up to the snapshot; perf metrics are current to each thread's last dispatch/interrupt"

func (s *Service) on(r *server.Request) (any, error) {
	var a ptt.OnArgs
	if err := json.Unmarshal(r.Args, &a); err != nil {
		return nil, fmt.Errorf("bad arguments: %w", err)
	}
	dev := r.File(0)
	closeDev := func() {
		if dev != nil {
			dev.Close()
		}
	}
	s.mu.Lock()
	_, busy := s.holders[r.UID]
	s.mu.Unlock()
	if busy {
		closeDev()
		return nil, errors.New("ptt is already on: run ptt off first")
	}
	if a.Pid < 0 {
		closeDev()
		return nil, fmt.Errorf("bad pid %d", a.Pid)
	}
	if a.Pid > 0 {
		if err := mayObserve(r.UID, a.Pid); err != nil {
			closeDev()
			return nil, err
		}
	}
	names := a.Metrics
	if len(names) == 0 {
		names = []string{ptt.DefaultMetric(a.Backend)}
	}
	ms, err := ptt.ParseMetrics(names)
	if err != nil {
		closeDev()
		return nil, err
	}
	h := &holder{uid: r.UID, metrics: ms, pid: a.Pid, threads: map[int]*thread{}, started: time.Now(), kfd: -1, stop: make(chan struct{})}
	switch a.Backend {
	case "kmod":
		if dev == nil {
			return nil, errors.New("the kmod backend needs the caller's /dev/pitrace descriptor")
		}
		if err := h.openModule(dev); err != nil {
			dev.Close()
			return nil, err
		}
	case "perf", "":
		closeDev()
		h.excl = r.UID != 0 && ptt.Paranoid() >= 2
		if err := h.checkOpen(); err != nil {
			return nil, err
		}
	default:
		closeDev()
		return nil, fmt.Errorf("unknown ptt backend %q: use kmod or perf", a.Backend)
	}
	if err := h.scan(true); err != nil {
		h.close()
		return nil, err
	}
	s.mu.Lock()
	if _, busy := s.holders[r.UID]; busy {
		s.mu.Unlock()
		h.close()
		return nil, errors.New("ptt is already on: run ptt off first")
	}
	s.holders[r.UID] = h
	if s.mon == nil {
		s.mon, err = startProcMonitor(s.newThread)
		if err != nil {
			s.logf("ptt: the process connector is not available (%v): new threads are found by a /proc rescan every 200 ms", err)
		}
	}
	h.newThr = "picked up at creation (netlink process connector), and by a /proc rescan every 200 ms"
	if s.mon == nil {
		h.newThr = "picked up by a /proc rescan every 200 ms (the process connector needs root): a thread that lives less than that may be missed"
	}
	s.mu.Unlock()
	go h.rescan()
	s.logf("uid %d pid %d: ptt on: %s for %s (backend %s)", r.UID, r.PID, strings.Join(names, ","), h.target(), h.backend())
	h.mu.Lock()
	n := len(h.threads) + len(h.watched)
	h.mu.Unlock()
	return ptt.OnResult{AgentPid: os.Getpid(), Threads: n}, nil
}

func (s *Service) off(uid int) error {
	s.mu.Lock()
	h := s.holders[uid]
	delete(s.holders, uid)
	if len(s.holders) == 0 && s.mon != nil {
		s.mon.stop()
		s.mon = nil
	}
	s.mu.Unlock()
	if h == nil {
		return ErrNotOn
	}
	h.close()
	return nil
}

func (s *Service) dump(uid int) (*ptt.Dump, error) {
	s.mu.Lock()
	h := s.holders[uid]
	s.mu.Unlock()
	if h == nil {
		return nil, ErrNotOn
	}
	return h.dump(), nil
}

func (s *Service) stopAll() {
	s.mu.Lock()
	hs := s.holders
	s.holders = map[int]*holder{}
	if s.mon != nil {
		s.mon.stop()
		s.mon = nil
	}
	s.mu.Unlock()
	for _, h := range hs {
		h.close()
	}
}

// newThread is called by the process connector for every new task.
func (s *Service) newThread(pid, tid int) {
	s.mu.Lock()
	hs := make([]*holder, 0, len(s.holders))
	for _, h := range s.holders {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	for _, h := range hs {
		if h.pid == pid || (h.pid == 0 && (h.uid == 0 || uidOf(pid) == h.uid)) {
			h.mu.Lock()
			if h.kfile != nil {
				h.watchModule(pid, tid, false)
			} else if _, seen := h.threads[tid]; !seen {
				_ = h.watchPerf(pid, tid, false)
			}
			h.mu.Unlock()
		}
	}
}

func (h *holder) target() string {
	if h.pid > 0 {
		return fmt.Sprintf("pid %d", h.pid)
	}
	return "all"
}

func (h *holder) backend() string {
	if h.kfile != nil {
		return "kmod"
	}
	return "perf"
}

func (h *holder) rescan() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			_ = h.scan(false)
		}
	}
}

func (h *holder) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	if h.kfile != nil {
		_ = kmodbackend.PttTerm(h.kfd)
		h.kfile.Close()
		h.kfile, h.kfd = nil, -1
	}
	for _, t := range h.threads {
		for _, fd := range t.fds {
			syscall.Close(fd)
		}
	}
	h.threads = map[int]*thread{}
}

// mayObserve: root may watch any process; another user only their own
// (real and effective uid both the caller's, as ptrace's basic rule).
func mayObserve(uid, pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fmt.Errorf("process %d does not exist", pid)
	}
	if uid == 0 {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "Uid:" {
			if f[1] == strconv.Itoa(uid) && f[2] == strconv.Itoa(uid) {
				return nil
			}
			return fmt.Errorf("permission denied: process %d belongs to uid %s; only root or its own user may watch it", pid, f[1])
		}
	}
	return fmt.Errorf("permission denied: cannot tell who owns process %d", pid)
}

func uidOf(pid int) int {
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d", pid), &st); err != nil {
		return -1
	}
	return int(st.Uid)
}

func comm(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func dispatchMetric() ptt.Metric {
	m, _ := ptt.LookupMetric("context-switches")
	return m
}

// checkOpen opens (and closes) every metric on the target's main thread,
// so that `ptt on` reports a metric or permission problem itself.
func (h *holder) checkOpen() error {
	tid := h.pid
	if tid == 0 {
		tid = os.Getpid()
	}
	for _, m := range append(append([]ptt.Metric(nil), h.metrics...), dispatchMetric()) {
		fd, err := ptt.OpenCounter(m, tid, ptt.OpenOpts{ExcludeKernel: h.excl})
		if err != nil {
			return err
		}
		syscall.Close(fd)
	}
	return nil
}

// scan watches threads not seen yet and marks gone ones. With strict, a
// failure on the target process is returned.
func (h *holder) scan(strict bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.stop:
		return nil
	default:
	}
	alive := map[int]bool{}
	err := walkThreads(h.pid, h.uid, strict, alive, func(pid, tid int) error {
		if h.kfile != nil {
			if h.watched[tid] {
				return nil
			}
			return h.watchModule(pid, tid, strict)
		}
		if t, ok := h.threads[tid]; ok {
			if n := comm(pid, tid); n != "" {
				t.name = n
			}
			return nil
		}
		return h.watchPerf(pid, tid, strict)
	})
	if err != nil {
		return err
	}
	if h.kfile != nil {
		// A tid seen again after it vanished is a new thread: watch it anew.
		for tid := range h.watched {
			if !alive[tid] {
				delete(h.watched, tid)
			}
		}
		return nil
	}
	for tid, t := range h.threads {
		if !alive[tid] {
			t.exited = true
		}
	}
	return nil
}

func (h *holder) note(tid int, err error) {
	if len(h.errs) < 20 {
		h.errs = append(h.errs, fmt.Sprintf("tid %d: %v", tid, err))
	}
}

// watchPerf opens a thread's counters. Called with h.mu held.
func (h *holder) watchPerf(pid, tid int, strict bool) error {
	t := &thread{pid: pid, tid: tid, name: comm(pid, tid)}
	all := append(append([]ptt.Metric(nil), h.metrics...), dispatchMetric())
	var oerr error
	for _, m := range all {
		fd, err := ptt.OpenCounter(m, tid, ptt.OpenOpts{ExcludeKernel: h.excl})
		if err != nil {
			oerr = err
			break
		}
		t.fds = append(t.fds, fd)
	}
	if oerr != nil {
		for _, fd := range t.fds {
			syscall.Close(fd)
		}
		if errors.Is(oerr, syscall.ESRCH) {
			return nil // the thread exited meanwhile
		}
		if strict && h.pid > 0 {
			return oerr
		}
		h.note(tid, oerr)
		return nil
	}
	h.threads[tid] = t
	return nil
}

// walkThreads calls fn for every thread of the target (one process, or
// every process uid may observe for 0) and marks each in alive. With
// strict, a target process that does not exist is an error.
func walkThreads(target, uid int, strict bool, alive map[int]bool, fn func(pid, tid int) error) error {
	self := os.Getpid()
	for _, pid := range pids(target) {
		if pid == self || (target == 0 && uid != 0 && uidOf(pid) != uid) {
			continue
		}
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			if strict && target > 0 {
				return fmt.Errorf("process %d does not exist", pid)
			}
			continue
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			alive[tid] = true
			if err := fn(pid, tid); err != nil {
				return err
			}
		}
	}
	return nil
}

func pids(target int) []int {
	if target > 0 {
		return []int{target}
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (h *holder) dump() *ptt.Dump {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kfile != nil {
		return h.dumpModule()
	}
	d := &ptt.Dump{Backend: "perf", Started: h.started, Note: notePerf, NewThreads: h.newThr,
		CPUNote: "not available on the perf backend (needs the pitrace module)", Errors: append([]string(nil), h.errs...)}
	for _, m := range h.metrics {
		d.Metrics = append(d.Metrics, m.Name)
	}
	d.Target = h.target()
	d.Guarantees = ptt.Guarantees{Backend: "perf", InterruptsFactoredOut: false, DispatchCounts: true, InterruptCounts: false,
		RetryDetects: "n/a: the holder reads each counter with read()",
		Notes:        []string{"interrupt time is NOT factored out", "dispatches: the perf context-switches counter of each thread"}}
	if h.excl {
		d.Guarantees.Notes = append(d.Guarantees.Notes, "kernel-mode counts excluded (perf_event_paranoid, not root): no dispatch counts")
		d.Guarantees.DispatchCounts = false
	}
	for _, t := range h.threads {
		td := ptt.ThreadDump{Pid: t.pid, Tid: t.tid, Name: t.name, Values: map[string]uint64{}, Exited: t.exited}
		for i, m := range h.metrics {
			v, _ := ptt.ReadCounter(t.fds[i])
			td.Values[m.Name] = v
		}
		if !h.excl { // context-switches count only with kernel-mode counting
			v, _ := ptt.ReadCounter(t.fds[len(h.metrics)])
			td.Dispatches = &v
		}
		d.Threads = append(d.Threads, td)
	}
	SortThreads(d.Threads)
	return d
}

// SortThreads orders a dump's rows by pid, then tid.
func SortThreads(ts []ptt.ThreadDump) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].Pid != ts[j].Pid {
			return ts[i].Pid < ts[j].Pid
		}
		return ts[i].Tid < ts[j].Tid
	})
}
