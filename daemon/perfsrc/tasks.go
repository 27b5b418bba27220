package perfsrc

import (
	"sync"

	"perfinsp/daemon/procscan"
)

// taskMap maps thread ids to process ids (tgid), and processes to their
// parents. sched_switch gives thread ids only; the map is filled
//   - at Start from the names under /proc/PID/task (nothing is read),
//   - from side-band FORK records (and from tprof samples, which carry both),
//   - on a miss, from /proc/TID/status, or, for a thread already gone, from
//     a FORK record still waiting in another CPU's side-band ring (the
//     thread was created on one CPU and ran on another, whose trace ring
//     was decoded first); then cached. A thread found nowhere is taken to
//     be a process's main thread (pid = tid).
//
// Entries of exited threads are dropped a grace period after their EXIT
// record, so the last dispatch records of a thread (decoded from another
// ring, possibly later) still find it.
type taskMap struct {
	mu     sync.RWMutex
	m      map[uint32]taskInfo
	exited []exitedTask
}

type taskInfo struct {
	tgid uint32
	ppid uint32 // for a process (tgid == tid) when known, else 0
	dead bool
}

type exitedTask struct {
	tid uint32
	t   uint64
}

// exitGrace is how long (ns) an exited thread stays in the map.
const exitGrace = 2_000_000_000

func newTaskMap() *taskMap {
	tm := &taskMap{m: make(map[uint32]taskInfo, 1024)}
	_ = procscan.Tasks(func(pid, tid int) {
		tm.m[uint32(tid)] = taskInfo{tgid: uint32(pid)}
	})
	return tm
}

// tgid returns the process id of a thread; peer (may be nil) looks for its
// FORK record in the side-band rings not decoded yet.
func (tm *taskMap) tgid(tid uint32, peer *cpuReader) uint32 {
	if tid == 0 {
		return 0 // the idle task
	}
	tm.mu.RLock()
	ti, ok := tm.m[tid]
	tm.mu.RUnlock()
	if ok {
		return ti.tgid
	}
	g := tid
	if v, err := procscan.Tgid(int(tid)); err == nil && v > 0 {
		g = uint32(v)
	} else if peer != nil {
		if v, ok := peer.peekFork(tid); ok {
			g = v
		}
	}
	tm.mu.Lock()
	if cur, ok := tm.m[tid]; ok {
		g = cur.tgid // filled by a FORK record meanwhile
	} else {
		tm.m[tid] = taskInfo{tgid: g}
	}
	tm.mu.Unlock()
	return g
}

// seen records a pid/tid pair from a sample (which carries both): a new
// thread, or a reused thread id whose entry is stale.
func (tm *taskMap) seen(pid, tid uint32) {
	if tid == 0 {
		return
	}
	tm.mu.RLock()
	ti, ok := tm.m[tid]
	tm.mu.RUnlock()
	if ok && ti.tgid == pid {
		return
	}
	tm.mu.Lock()
	if ti, ok := tm.m[tid]; !ok || ti.tgid != pid {
		tm.m[tid] = taskInfo{tgid: pid}
	}
	tm.mu.Unlock()
}

// fork records a new task.
func (tm *taskMap) fork(pid, ppid, tid uint32) {
	ti := taskInfo{tgid: pid}
	if pid == tid && pid != ppid {
		ti.ppid = ppid
	}
	tm.mu.Lock()
	tm.m[tid] = ti
	tm.mu.Unlock()
}

// ppid returns the parent of a process, from a FORK record seen during the
// session or else from /proc/PID/status; 0 when unknown.
func (tm *taskMap) ppid(pid uint32) uint32 {
	tm.mu.RLock()
	ti, ok := tm.m[pid]
	tm.mu.RUnlock()
	if ok && ti.ppid != 0 {
		return ti.ppid
	}
	v, err := procscan.Ppid(int(pid))
	if err != nil || v < 0 {
		return 0
	}
	tm.mu.Lock()
	if ti, ok := tm.m[pid]; ok {
		ti.ppid = uint32(v)
		tm.m[pid] = ti
	} else {
		tm.m[pid] = taskInfo{tgid: pid, ppid: uint32(v)}
	}
	tm.mu.Unlock()
	return uint32(v)
}

// exit marks a thread exited at time t; prune drops it later.
func (tm *taskMap) exit(tid uint32, t uint64) {
	tm.mu.Lock()
	if ti, ok := tm.m[tid]; ok {
		ti.dead = true
		tm.m[tid] = ti
		tm.exited = append(tm.exited, exitedTask{tid, t})
	}
	tm.mu.Unlock()
}

// prune drops threads that exited more than exitGrace before now (unless
// their id was reused by a newer FORK).
func (tm *taskMap) prune(now uint64) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	n := 0
	for _, e := range tm.exited {
		if e.t+exitGrace > now {
			tm.exited[n] = e
			n++
			continue
		}
		if ti, ok := tm.m[e.tid]; ok && ti.dead {
			delete(tm.m, e.tid)
		}
	}
	tm.exited = tm.exited[:n]
}

// size returns the number of threads in the map.
func (tm *taskMap) size() int {
	tm.mu.RLock()
	defer tm.mu.RUnlock()
	return len(tm.m)
}
