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
// for root or for the user it belongs to (real and effective uid), and a
// non-root caller's counters are opened on a thread holding that caller's
// credentials (asCaller), so the kernel applies its own rules as if the
// caller had opened them: perf_event_paranoid, and the ptrace-access check
// (a non-dumpable process, or one holding capabilities, is refused).
//
// Resources are bounded per user: perf descriptors (fdBudget; a reserve is
// kept for the control socket), released as soon as a thread exits (its
// last values are kept; past MaxExitedRows exited threads are folded into
// one row). A target process (ptt on -p) is held by a pidfd: once it exits
// nothing more is counted, so a later process given the same pid is never
// followed.
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

	"golang.org/x/sys/unix"

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
	budget  fdBudget
}

// MaxExitedRows is how many exited threads a dump lists one by one; the
// values of older ones are summed into one row.
const MaxExitedRows = 4096

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
	fds      []int    // metrics, then context-switches (nil once exited)
	final    []uint64 // the values read when the thread exited
	exited   bool
	// uncounted: CPU ns the thread ran before its counters were opened
	// (found after ptt on); nil for threads counted from ptt on.
	uncounted *uint64
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
	// the watched threads (kfile nil on the daemon backend).
	kfile   *os.File
	kfd     int
	hooks   uint32
	watched map[int]bool
	newThr  string

	budget  *fdBudget
	as      *asCaller    // opens counters with the caller's credentials
	pidfd   int          // the target process (ptt on -p), -1 for all
	gone    bool         // the target process exited: nothing more is counted
	limited map[int]bool // live threads not counted: a descriptor limit was reached
	exited  []int        // exited threads' tids, oldest first
	folded  *ptt.ThreadDump
}

const notePerf = "backend daemon (no module: perf events): asynchronous interrupts are NOT factored out of the thread metrics; " +
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
	pidfd := -1
	if a.Pid > 0 {
		// The pidfd first: the process checked below is the one counted,
		// and its pid is never followed into another process.
		fd, err := unix.PidfdOpen(a.Pid, 0)
		if err != nil {
			closeDev()
			return nil, fmt.Errorf("process %d does not exist", a.Pid)
		}
		pidfd = fd
		if err := mayObserve(r.UID, a.Pid); err != nil || !pidAlive(pidfd) {
			unix.Close(pidfd)
			closeDev()
			if err == nil {
				err = fmt.Errorf("process %d does not exist", a.Pid)
			}
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
	as, err := newAsCaller(r.UID, r.GID)
	if err != nil {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		closeDev()
		return nil, err
	}
	h := &holder{uid: r.UID, metrics: ms, pid: a.Pid, threads: map[int]*thread{}, started: time.Now(), kfd: -1, stop: make(chan struct{}),
		budget: &s.budget, as: as, pidfd: pidfd}
	switch a.Backend {
	case "kmod":
		if dev == nil {
			h.close()
			return nil, errors.New("the kmod backend needs the caller's /dev/pitrace descriptor")
		}
		if err := h.openModule(dev); err != nil {
			dev.Close()
			h.close()
			return nil, err
		}
	case "daemon", "perf", "": // "perf": the former name
		closeDev()
		h.excl = r.UID != 0 && ptt.Paranoid() >= 2
		if err := h.checkOpen(r.PID); err != nil {
			h.close()
			return nil, err
		}
	default:
		closeDev()
		h.close()
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
		s.mon, err = startProcMonitor(s.newThread, s.threadExited)
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
	canon := make([]string, len(ms))
	for i, m := range ms {
		canon[i] = m.Name // the table's names, never the client's spelling
	}
	s.logf("uid %d pid %d: ptt on: %s for %s (backend %s)", r.UID, r.PID, strings.Join(canon, ","), h.target(), h.backend())
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
			if h.closed() || h.targetGone() {
				// the target exited (a reused pid is not it), or ptt off
			} else if h.kfile != nil {
				h.watchModule(pid, tid, false)
			} else if t, seen := h.threads[tid]; !seen || t.exited {
				_ = h.watchPerf(pid, tid, false)
			}
			h.mu.Unlock()
		}
	}
}

// threadExited is called by the process connector when a task exits: its
// counters are read one last time and closed.
func (s *Service) threadExited(pid, tid int) {
	s.mu.Lock()
	hs := make([]*holder, 0, len(s.holders))
	for _, h := range s.holders {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	for _, h := range hs {
		h.mu.Lock()
		if t, ok := h.threads[tid]; ok && t.pid == pid && !t.exited {
			h.finish(t)
		}
		h.mu.Unlock()
	}
}

// closed reports whether ptt off closed the holder. Called with h.mu held.
func (h *holder) closed() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

// pidAlive reports whether the process behind pidfd still runs (a pidfd
// becomes readable when its process exits).
func pidAlive(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// targetGone reports (and remembers) that the target process exited.
// Called with h.mu held.
func (h *holder) targetGone() bool {
	if h.pidfd >= 0 && !h.gone && !pidAlive(h.pidfd) {
		h.gone = true
		for _, t := range h.threads {
			if !t.exited {
				h.finish(t)
			}
		}
	}
	return h.gone
}

// finish reads an exited thread's counters one last time, closes them and
// gives the descriptors back. Called with h.mu held.
func (h *holder) finish(t *thread) {
	t.exited = true
	if t.fds == nil {
		return
	}
	t.final = make([]uint64, len(t.fds))
	for i, fd := range t.fds {
		t.final[i], _ = ptt.ReadCounter(fd)
		unix.Close(fd)
	}
	h.budget.give(h.uid, len(t.fds))
	t.fds = nil
	h.exited = append(h.exited, t.tid)
	for len(h.exited) > MaxExitedRows {
		tid := h.exited[0]
		h.exited = h.exited[1:]
		if old := h.threads[tid]; old != nil && old.exited { // not a new thread given the tid since
			h.fold(old)
			delete(h.threads, tid)
		}
	}
}

// fold adds an exited thread's values to the summed row.
func (h *holder) fold(t *thread) {
	if t == nil || len(t.final) <= len(h.metrics) {
		return
	}
	if h.folded == nil {
		var zero uint64
		h.folded = &ptt.ThreadDump{Values: map[string]uint64{}, Exited: true}
		if !h.excl {
			h.folded.Dispatches = &zero
		}
	}
	h.folded.Tid++ // the count of folded threads, named in the row
	for i, m := range h.metrics {
		h.folded.Values[m.Name] += t.final[i]
	}
	if h.folded.Dispatches != nil {
		*h.folded.Dispatches += t.final[len(h.metrics)]
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
	return "daemon"
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
		if t.fds != nil {
			h.budget.give(h.uid, len(t.fds))
		}
	}
	h.threads = map[int]*thread{}
	h.as.stop()
	if h.pidfd >= 0 {
		unix.Close(h.pidfd)
		h.pidfd = -1
	}
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

// checkOpen opens (and closes) every metric on the target's main thread
// (for all processes: on the caller's own, caller), so that `ptt on`
// reports a metric or permission problem itself.
func (h *holder) checkOpen(caller int) error {
	tid := h.pid
	if tid == 0 {
		tid = os.Getpid()
		if h.uid != 0 && caller > 0 {
			tid = caller
		}
	}
	var err error
	if derr := h.as.do(func() {
		for _, m := range append(append([]ptt.Metric(nil), h.metrics...), dispatchMetric()) {
			var fd int
			if fd, err = ptt.OpenCounter(m, tid, ptt.OpenOpts{ExcludeKernel: h.excl}); err != nil {
				return
			}
			syscall.Close(fd)
		}
	}); derr != nil {
		return derr
	}
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("permission denied: the kernel refuses you the counters of process %d (not dumpable, holding capabilities you lack, or kernel.perf_event_paranoid): %w", tid, err)
	}
	return err
}

// scan watches threads not seen yet and marks gone ones. With strict, a
// failure on the target process is returned.
func (h *holder) scan(strict bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed() || h.targetGone() {
		return nil
	}
	alive := map[int]bool{}
	err := walkThreads(h.pid, h.uid, strict, alive, func(pid, tid int) error {
		if h.kfile != nil {
			if h.watched[tid] {
				return nil
			}
			return h.watchModule(pid, tid, strict)
		}
		if t, ok := h.threads[tid]; ok && !t.exited {
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
		if !alive[tid] && !t.exited {
			h.finish(t)
		}
	}
	for tid := range h.limited {
		if !alive[tid] {
			delete(h.limited, tid)
		}
	}
	h.noteLimit()
	return nil
}

func (h *holder) note(tid int, err error) {
	if len(h.errs) < 20 {
		h.errs = append(h.errs, fmt.Sprintf("tid %d: %v", tid, err))
	}
}

// watchPerf opens a thread's counters, with the caller's credentials and
// within the caller's descriptor budget. Called with h.mu held.
func (h *holder) watchPerf(pid, tid int, strict bool) error {
	t := &thread{pid: pid, tid: tid, name: comm(pid, tid)}
	all := append(append([]ptt.Metric(nil), h.metrics...), dispatchMetric())
	if err := h.budget.take(h.uid, len(all)); err != nil {
		if strict && h.pid > 0 {
			return err
		}
		if len(h.limited) == 0 {
			h.note(tid, err)
		}
		if h.limited == nil {
			h.limited = map[int]bool{}
		}
		h.limited[tid] = true
		return nil
	}
	var oerr error
	if derr := h.as.do(func() {
		for _, m := range all {
			fd, err := ptt.OpenCounter(m, tid, ptt.OpenOpts{ExcludeKernel: h.excl})
			if err != nil {
				oerr = err
				return
			}
			t.fds = append(t.fds, fd)
		}
	}); derr != nil {
		h.budget.give(h.uid, len(all))
		return nil
	}
	// A target that exited meanwhile may have left its pid to another
	// process: what was just opened is not the target's.
	if oerr == nil && h.pidfd >= 0 && !pidAlive(h.pidfd) {
		oerr = syscall.ESRCH
		h.targetGone()
	}
	if oerr != nil {
		for _, fd := range t.fds {
			syscall.Close(fd)
		}
		h.budget.give(h.uid, len(all))
		if errors.Is(oerr, syscall.ESRCH) {
			return nil // the thread exited meanwhile
		}
		if errors.Is(oerr, syscall.EACCES) || errors.Is(oerr, syscall.EPERM) {
			oerr = fmt.Errorf("permission denied by the kernel (not dumpable, or holding capabilities you lack): %w", oerr)
		}
		if strict && h.pid > 0 {
			return oerr
		}
		h.note(tid, oerr)
		return nil
	}
	delete(h.limited, tid)
	if !strict {
		// Found after ptt on: what it ran before now is not in its counts.
		if ns, err := threadCPU(pid, tid); err == nil {
			t.uncounted = &ns
		}
	}
	if old, ok := h.threads[tid]; ok && old.exited {
		h.fold(old) // a tid reused by a new thread: the old one's values stay counted
	}
	h.threads[tid] = t
	return nil
}

// noteLimit keeps the count of threads not counted for a descriptor limit
// in the errors of the dump. Called with h.mu held.
func (h *holder) noteLimit() {
	msg := fmt.Sprintf("%d live threads not counted now: a perf descriptor limit was reached (see the first error)", len(h.limited))
	for i, e := range h.errs {
		if strings.HasSuffix(e, "(see the first error)") {
			h.errs[i] = msg
			return
		}
	}
	if len(h.limited) > 0 {
		h.errs = append(h.errs, msg)
	}
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
	d := &ptt.Dump{Backend: "daemon", Started: h.started, Note: notePerf, NewThreads: h.newThr,
		CPUNote: "not available on the daemon backend (needs the pitrace module)", Errors: append([]string(nil), h.errs...)}
	for _, m := range h.metrics {
		d.Metrics = append(d.Metrics, m.Name)
	}
	d.Target = h.target()
	d.Guarantees = ptt.Guarantees{Backend: "daemon", InterruptsFactoredOut: false, DispatchCounts: true, InterruptCounts: false,
		RetryDetects: "n/a: the holder reads each counter with read()",
		Notes:        []string{"interrupt time is NOT factored out", "dispatches: the perf context-switches counter of each thread"}}
	if h.excl {
		d.Guarantees.Notes = append(d.Guarantees.Notes, "kernel-mode counts excluded (perf_event_paranoid, not root): no dispatch counts")
		d.Guarantees.DispatchCounts = false
	}
	if h.gone {
		d.Errors = append(d.Errors, fmt.Sprintf("process %d exited: nothing more is counted (a later process given its pid is not it)", h.pid))
	}
	for _, t := range h.threads {
		td := ptt.ThreadDump{Pid: t.pid, Tid: t.tid, Name: t.name, Values: map[string]uint64{}, Exited: t.exited, UncountedStartNs: t.uncounted}
		val := func(i int) uint64 {
			if t.fds == nil {
				if i < len(t.final) {
					return t.final[i]
				}
				return 0
			}
			v, _ := ptt.ReadCounter(t.fds[i])
			return v
		}
		for i, m := range h.metrics {
			td.Values[m.Name] = val(i)
		}
		if !h.excl { // context-switches count only with kernel-mode counting
			v := val(len(h.metrics))
			td.Dispatches = &v
		}
		d.Threads = append(d.Threads, td)
	}
	if h.folded != nil {
		f := *h.folded
		f.Name = fmt.Sprintf("(%d older exited threads, summed)", f.Tid)
		f.Tid = 0
		d.Threads = append(d.Threads, f)
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

// threadCPU is the CPU time a thread has run so far, in ns (the first
// field of /proc/PID/task/TID/schedstat).
func threadCPU(pid, tid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("schedstat of thread %d: empty", tid)
	}
	return strconv.ParseUint(f[0], 10, 64)
}
