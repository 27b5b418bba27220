package itrace

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	pitrace "perfinsp/libperfutil/itrace"
)

// Caller is the client asking (from SO_PEERCRED).
type Caller struct {
	PID, UID, GID int
}

type session struct {
	id    int
	owner int // uid
	tr    *Tracer
	pids  map[int]bool
	tids  map[int]bool
}

// Manager holds the daemon's ITrace sessions and writes their records to
// the facility's sink while tracing is on. A session stays (with its
// counts) after its threads exited, until itrace off or the facility's off.
type Manager struct {
	// Log, if set, reports a session's tracer failing.
	Log func(format string, args ...any)

	mu       sync.Mutex
	sink     Sink
	sessions map[int]*session
	next     int
}

// NewManager returns a manager with no sink (tracing off).
func NewManager() *Manager { return &Manager{sessions: map[int]*session{}} }

// SetSink is called when the facility turns on (the sink of its buffers)
// and off (nil): turning off stops every session.
func (m *Manager) SetSink(s Sink) {
	m.mu.Lock()
	m.sink = s
	var all []*session
	if s == nil {
		for _, x := range m.sessions {
			all = append(all, x)
		}
		m.sessions = map[int]*session{}
	}
	m.mu.Unlock()
	for _, x := range all {
		x.tr.Stop()
	}
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

// CanTrace reports whether the caller could ptrace pid itself: root, or
// the same user and group as the target (every id of it) with the target
// dumpable (the files in a non-dumpable process's /proc directory belong
// to root).
func CanTrace(c Caller, pid int) error {
	if c.UID == 0 {
		return nil
	}
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
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
	var st syscall.Stat_t
	if err := syscall.Stat(dir+"/stat", &st); err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
	}
	if int(st.Uid) != c.UID {
		return deny // not dumpable
	}
	return nil
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
func (m *Manager) On(c Caller, a pitrace.OnArgs) (pitrace.OnResult, error) {
	var res pitrace.OnResult
	m.mu.Lock()
	sink := m.sink
	m.mu.Unlock()
	if sink == nil {
		return res, errors.New("tracing is not on: run `swtrace on` first (ITrace records go into the trace buffers)")
	}
	opts := Options{Follow: a.Follow, AtExec: a.AtExec, Step: a.Step, Log: m.Log}
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
		opts.PIDs = append(opts.PIDs, p...)
		res.Skipped = skipped
	}
	if len(opts.PIDs) == 0 && len(opts.TIDs) == 0 {
		return res, errors.New("nothing to trace: give -p PID, a pid list, or --pids-from N")
	}
	m.mu.Lock()
	for _, s := range m.sessions {
		for _, pid := range opts.PIDs {
			if s.pids[pid] {
				m.mu.Unlock()
				return res, fmt.Errorf("process %d is already traced (session %d): swtrace itrace off -p %d first", pid, s.id, pid)
			}
		}
	}
	m.mu.Unlock()
	tr, err := Start(opts, sink)
	if err != nil {
		return res, err
	}
	s := &session{owner: c.UID, tr: tr, pids: map[int]bool{}, tids: map[int]bool{}}
	for _, p := range opts.PIDs {
		s.pids[p] = true
	}
	for _, t := range opts.TIDs {
		s.tids[t] = true
	}
	m.mu.Lock()
	m.next++
	s.id = m.next
	m.sessions[s.id] = s
	m.mu.Unlock()
	go func() {
		<-tr.Done()
		if err := tr.Err(); err != nil && m.Log != nil {
			m.Log("itrace session %d: %v", s.id, err)
		}
	}()
	res.Session, res.Threads = s.id, tr.Stats().Threads
	return res, nil
}

// Off stops the caller's sessions that match.
func (m *Manager) Off(c Caller, a pitrace.OffArgs) (pitrace.OffResult, error) {
	var res pitrace.OffResult
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
	for _, s := range stop {
		st := s.tr.Stop()
		if err := s.tr.Err(); err != nil {
			errs = append(errs, fmt.Sprintf("session %d: %v", s.id, err))
		}
		res.Sessions++
		res.Threads += st.Traced
		res.Instructions += st.Instructions
		res.Records += st.Records
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
