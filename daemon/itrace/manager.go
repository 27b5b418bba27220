package itrace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	itracectl "perfinsp/libperfutil/itrace"
)

// Caller is the client asking (from SO_PEERCRED).
type Caller struct {
	PID, UID, GID int
}

type session struct {
	id    int
	owner int     // uid
	tr    *remote // the session's tracer: a helper process
	pids  map[int]bool
	tids  map[int]bool
}

func (s *session) running() bool {
	select {
	case <-s.tr.Done():
		return false
	default:
		return true
	}
}

// Limits of what one user can make the daemon hold (root included).
const (
	// MaxSessionsPerUser: sessions running at once (a helper process each).
	MaxSessionsPerUser = 16
	// MaxHeldPerUser: sessions kept, running or ended (an ended one keeps
	// its counts until itrace off).
	MaxHeldPerUser = 256
	// MaxSessions: sessions running at once, all users.
	MaxSessions = 256
	// MaxThreadsPerSession: threads one session traces at once.
	MaxThreadsPerSession = 1024
)

// Manager holds the daemon's ITrace sessions and writes their records to
// the facility's sink while tracing is on. A session stays (with its
// counts) after its threads exited, until itrace off or the facility's off.
//
// Each session's tracer is a helper process running with the caller's uid
// and gid and no capabilities (helper.go): the kernel checks every attach
// as it would for the caller. CanTrace is the first line, with the
// clearer message.
type Manager struct {
	// Log, if set, reports a session's tracer failing.
	Log func(format string, args ...any)
	// Owner, if set, returns the uid that owns the trace being written
	// (-1: none): only that user, or root, may add ITrace sessions to it.
	Owner func() int

	mu       sync.Mutex
	sink     *traceSink // nil: tracing off
	sessions map[int]*session
	starting map[int]int  // uid -> sessions being started
	claimed  map[int]bool // processes of the sessions being started
	next     int
}

// NewManager returns a manager with no sink (tracing off).
func NewManager() *Manager {
	return &Manager{sessions: map[int]*session{}, starting: map[int]int{}, claimed: map[int]bool{}}
}

// Scoper is a Sink that names only the processes it is told ITrace
// traces (the facility's, with ITrace's records alone): told before each
// session starts.
type Scoper interface {
	Scope(pids []int)
}

// traceSink is the sink of one trace, from one SetSink to the next: it
// passes records on until that trace ends and drops them after. The
// facility hands every trace the same sink, and the next trace may be
// another user's: a tracer started for one trace (one still attaching
// when tracing turned off) never writes into the next.
type traceSink struct {
	mu    sync.RWMutex // held for reading by the records passed on
	s     Sink
	ended bool
}

func (t *traceSink) Trace(cpu int, major uint16, minor uint32, ts uint64, fields []uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if !t.ended {
		t.s.Trace(cpu, major, minor, ts, fields)
	}
}

// scope tells the sink the processes a session is about to trace, if it
// names only those (Scoper) and its trace has not ended. (Not under the
// lock: the facility's Scope waits for the facility, which ends a trace
// holding it.)
func (t *traceSink) scope(pids []int) {
	t.mu.RLock()
	ended := t.ended
	t.mu.RUnlock()
	if sc, ok := t.s.(Scoper); ok && !ended {
		sc.Scope(pids)
	}
}

// end drops every record from now on; it returns once no record is being
// passed on.
func (t *traceSink) end() {
	t.mu.Lock()
	t.ended = true
	t.mu.Unlock()
}

// SetSink is called when the facility turns on (the sink of its buffers)
// and off (nil): turning off stops every session, then ends the trace's
// sink (the sessions' last records go in, a session still starting writes
// nothing more).
func (m *Manager) SetSink(s Sink) {
	m.mu.Lock()
	old := m.sink
	m.sink = nil
	if s != nil {
		m.sink = &traceSink{s: s}
	}
	var all []*session
	if s == nil {
		for _, x := range m.sessions {
			all = append(all, x)
		}
		m.sessions = map[int]*session{}
	}
	m.mu.Unlock()
	stopAll(all)
	if old != nil {
		old.end()
	}
}

// stopAll stops the sessions at once (each tracer has its own deadline,
// so tracers stopped by their users cost one deadline, not one each) and
// returns their counts.
func stopAll(ss []*session) []Stats {
	out := make([]Stats, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.tr.Stop()
		}()
	}
	wg.Wait()
	return out
}

// ids reads a "Uid:" or "Gid:" line of /proc/PID/status: real, effective,
// saved, filesystem.
func ids(status, key string) []int {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			var out []int
			for _, f := range strings.Fields(v) {
				n, err := strconv.Atoi(f)
				if err != nil {
					return nil
				}
				out = append(out, n)
			}
			return out
		}
	}
	return nil
}

// processErr is the error of reading process pid's /proc files: that it
// does not exist (it never did, or it ended), or what the error was.
func processErr(pid int, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("process %d does not exist", pid)
	}
	return fmt.Errorf("process %d: %w", pid, err)
}

// CanTrace reports whether the caller could ptrace pid itself: root, or
// the same user and group as the target (every id of it) with the target
// holding no capabilities and dumpable (the files in a non-dumpable
// process's /proc directory belong to root). The kernel checks again at
// attach: the tracer runs as the caller.
func CanTrace(c Caller, pid int) error {
	if c.UID == 0 {
		return nil
	}
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return processErr(pid, err)
	}
	deny := fmt.Errorf("process %d: permission denied: you (uid %d) may trace only your own processes (same user and group, not setuid, dumpable); root may trace any", pid, c.UID)
	for _, u := range ids(string(b), "Uid:") {
		if u != c.UID {
			return deny
		}
	}
	for _, g := range ids(string(b), "Gid:") {
		if g != c.GID {
			return deny
		}
	}
	// The kernel refuses a tracer without capabilities a target holding
	// any (its permitted set must be within the tracer's).
	if capPrm(string(b)) != 0 {
		return fmt.Errorf("process %d: permission denied: it holds capabilities (CapPrm), which a process of yours may not trace; root may", pid)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir+"/stat", &st); err != nil {
		return processErr(pid, err)
	}
	if int(st.Uid) != c.UID {
		return deny // not dumpable
	}
	return nil
}

// capPrm returns the "CapPrm:" mask of /proc/PID/status (all ones when
// it cannot be read: refused).
func capPrm(status string) uint64 {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "CapPrm:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return ^uint64(0)
			}
			return n
		}
	}
	return ^uint64(0)
}

func tgidOf(tid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("thread %d: %w", tid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("thread %d: no Tgid in its status", tid)
}

// pidsFrom lists the processes with a pid >= from, except the daemon and
// the caller, that the caller may trace and that are not kernel threads.
func pidsFrom(c Caller, from int) (pids []int, skipped []string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid < from || pid == os.Getpid() || pid == c.PID {
			continue
		}
		if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err != nil || exe == "" {
			continue // kernel thread, or gone
		}
		if err := CanTrace(c, pid); err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids, skipped
}

// On starts a session for the caller.
func (m *Manager) On(c Caller, a itracectl.OnArgs) (itracectl.OnResult, error) {
	var res itracectl.OnResult
	m.mu.Lock()
	sink := m.sink
	m.mu.Unlock()
	if sink == nil {
		return res, errors.New("tracing is not on: run `swtrace on` first (ITrace records go into the trace buffers)")
	}
	if m.Owner != nil && c.UID != 0 {
		if o := m.Owner(); o != c.UID {
			return res, fmt.Errorf("the trace being recorded belongs to uid %d: only its owner (or root) may add ITrace records to it", o)
		}
	}
	opts := Options{Follow: a.Follow, AtExec: a.AtExec, Step: a.Step, Log: m.Log, MaxThreads: MaxThreadsPerSession, MaxInsns: a.MaxInsns}
	for _, pid := range a.PIDs {
		if err := CanTrace(c, pid); err != nil {
			return res, err
		}
		opts.PIDs = append(opts.PIDs, pid)
	}
	for _, tid := range a.TIDs {
		pid, err := tgidOf(tid)
		if err != nil {
			return res, err
		}
		if err := CanTrace(c, pid); err != nil {
			return res, err
		}
		opts.TIDs = append(opts.TIDs, tid)
	}
	if a.PIDsFrom > 0 {
		p, skipped := pidsFrom(c, a.PIDsFrom)
		opts.OptionalPIDs = p
		res.Skipped = skipped
	}
	if len(opts.PIDs) == 0 && len(opts.TIDs) == 0 && len(opts.OptionalPIDs) == 0 {
		return res, errors.New("nothing to trace: give -p PID, a pid list, or --pids-from N")
	}
	pids := append(append([]int(nil), opts.PIDs...), opts.OptionalPIDs...)
	if err := m.reserve(c.UID, pids); err != nil {
		return res, err
	}
	scope := append([]int(nil), pids...)
	for _, tid := range opts.TIDs {
		if pid, err := tgidOf(tid); err == nil {
			scope = append(scope, pid)
		}
	}
	sink.scope(scope)
	tr, am, err := startRemote(c, opts, sink, m.Log)
	if err != nil {
		m.release(c.UID, pids, nil, nil)
		return res, err
	}
	s := &session{owner: c.UID, tr: tr, pids: map[int]bool{}, tids: map[int]bool{}}
	for _, p := range pids {
		s.pids[p] = true
	}
	for _, t := range opts.TIDs {
		s.tids[t] = true
	}
	if !m.release(c.UID, pids, s, sink) {
		tr.Stop()
		return res, errors.New("tracing was turned off while the session started: nothing is traced")
	}
	go func() {
		<-tr.Done()
		if err := tr.Err(); err != nil && m.Log != nil {
			m.Log("itrace session %d (uid %d): %v", s.id, s.owner, err)
		}
	}()
	res.Session, res.Threads = s.id, am.Threads
	res.Skipped = append(res.Skipped, am.Skipped...)
	return res, nil
}

// reserve counts a session being started against the caller's limits,
// or says which limit it reached.
func (m *Manager) reserve(uid int, pids []int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	running, held, all := m.starting[uid], m.starting[uid], 0
	for _, n := range m.starting {
		all += n
	}
	for _, pid := range pids {
		if m.claimed[pid] {
			return fmt.Errorf("process %d is already traced (a session being started): swtrace itrace off -p %d first", pid, pid)
		}
	}
	for _, s := range m.sessions {
		if s.owner == uid {
			held++
		}
		if s.running() {
			all++
			if s.owner == uid {
				running++
			}
			for _, pid := range pids {
				if s.pids[pid] {
					return fmt.Errorf("process %d is already traced (session %d): swtrace itrace off -p %d first", pid, s.id, pid)
				}
			}
		}
	}
	switch {
	case running >= MaxSessionsPerUser:
		return fmt.Errorf("you (uid %d) have %d ITrace sessions running, the limit per user: stop one (swtrace itrace off -p PID) or trace several processes in one session", uid, running)
	case held >= MaxHeldPerUser:
		return fmt.Errorf("you (uid %d) hold %d ITrace sessions (an ended one keeps its counts until itrace off), the limit per user: run swtrace itrace off", uid, held)
	case all >= MaxSessions:
		return fmt.Errorf("the agent runs %d ITrace sessions, its limit for all users: try again when some have ended", all)
	}
	m.starting[uid]++
	for _, pid := range pids {
		m.claimed[pid] = true
	}
	return nil
}

// release ends a reservation; s, if not nil, is the session started
// for sink: it is kept if tracing is still on into that sink (the same
// trace, not a later one).
func (m *Manager) release(uid int, pids []int, s *session, sink *traceSink) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.starting[uid]--; m.starting[uid] <= 0 {
		delete(m.starting, uid)
	}
	for _, pid := range pids {
		delete(m.claimed, pid)
	}
	if s == nil || m.sink != sink {
		return false
	}
	m.next++
	s.id = m.next
	m.sessions[s.id] = s
	return true
}

// Status is what the caller's sessions (root: every session) have traced
// so far: the progress of a long trace, read without stopping anything.
func (m *Manager) Status(c Caller) itracectl.StatusResult {
	var r itracectl.StatusResult
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions {
		if c.UID != 0 && s.owner != c.UID {
			continue
		}
		if !s.running() {
			r.Ended++
		} else {
			r.Sessions++
			r.Threads += len(s.tids)
		}
		r.Instructions += s.tr.insnsSoFar.Load()
		r.Records += s.tr.recordsSoFar.Load()
	}
	return r
}

// Off stops the caller's sessions that match.
func (m *Manager) Off(c Caller, a itracectl.OffArgs) (itracectl.OffResult, error) {
	var res itracectl.OffResult
	var stop []*session
	m.mu.Lock()
	for id, s := range m.sessions {
		match := len(a.PIDs) == 0 && len(a.TIDs) == 0
		for _, p := range a.PIDs {
			match = match || s.pids[p]
		}
		for _, t := range a.TIDs {
			match = match || s.tids[t]
		}
		if !match {
			continue
		}
		if c.UID != 0 && s.owner != c.UID {
			if len(a.PIDs) > 0 || len(a.TIDs) > 0 {
				m.mu.Unlock()
				return res, fmt.Errorf("session %d belongs to another user", id)
			}
			continue
		}
		stop = append(stop, s)
		delete(m.sessions, id)
	}
	m.mu.Unlock()
	var errs []string
	for i, st := range stopAll(stop) {
		s := stop[i]
		if err := s.tr.Err(); err != nil {
			errs = append(errs, fmt.Sprintf("session %d: %v", s.id, err))
		}
		res.Sessions++
		res.Threads += st.Traced
		res.Instructions += st.Instructions
		res.Records += st.Records
		res.ThreadsLeftOut += st.ThreadsLeftOut
		res.LimitReached = res.LimitReached || st.LimitReached
		res.StepCounts.Add(st.StepCounts)
	}
	if res.Sessions == 0 && (len(a.PIDs) > 0 || len(a.TIDs) > 0) {
		return res, errors.New("no ITrace session traces that")
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("the tracer failed: %s", strings.Join(errs, "; "))
	}
	return res, nil
}
