package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"perfinsp/libperfutil/kmodbackend"
	"perfinsp/libperfutil/ptt"
)

// Dump is what `ptt dump` shows.
type Dump struct {
	Backend    string         `json:"backend"`
	Metrics    []string       `json:"metrics"`
	Target     string         `json:"target"`
	Started    time.Time      `json:"started"`
	Guarantees ptt.Guarantees `json:"guarantees"`
	Note       string         `json:"note"`
	Threads    []ThreadDump   `json:"threads"`
	// CPUs holds the per-CPU interrupt buckets; nil on the daemon backend.
	CPUs    []CPUBucket `json:"cpus"`
	CPUNote string      `json:"cpus_note,omitempty"`
	Errors  []string    `json:"errors,omitempty"`
}

// ThreadDump is one thread's row. Interrupts and InterruptTime are null
// where the backend cannot provide them (daemon).
type ThreadDump struct {
	Pid           int               `json:"pid"`
	Tid           int               `json:"tid"`
	Name          string            `json:"name"`
	Values        map[string]uint64 `json:"values"`
	Dispatches    *uint64           `json:"dispatches"`
	Interrupts    *uint64           `json:"interrupts"`
	InterruptTime *uint64           `json:"interrupt_time"`
	// InterruptValues is each metric spent in interrupts taken while the
	// thread ran, left out of Values (module backend only).
	InterruptValues map[string]uint64 `json:"interrupt_values,omitempty"`
	// Running: on a CPU at the snapshot (module backend).
	Running bool `json:"running,omitempty"`
	Exited  bool `json:"exited"`
}

// CPUBucket is one CPU's interrupt bucket (module backend): outermost
// interrupts PTT saw, TSC cycles spent in them, and each metric spent in
// them.
type CPUBucket struct {
	CPU        int               `json:"cpu"`
	Interrupts uint64            `json:"interrupts"`
	TSC        uint64            `json:"tsc"`
	Values     map[string]uint64 `json:"values"`
}

const noteDaemon = "backend daemon (no module): asynchronous interrupts are NOT factored out of the thread metrics; " +
	"dispatches come from the perf context-switches counter; per-thread interrupts and interrupt time are not available on this backend (n/a)"

type thread struct {
	pid, tid int
	name     string
	fds      []int // metrics, then context-switches
	exited   bool
}

type holder struct {
	mu      sync.Mutex
	metrics []ptt.Metric
	pid     int
	excl    bool
	threads map[int]*thread
	errs    []string
	started time.Time
	// The module backend: the /dev/pitrace file whose areas are the
	// watched threads (kfd < 0 on the daemon backend).
	kfd     int
	hooks   uint32
	watched map[int]bool
}

func serve(names []string, pid int, backend string) error {
	ms, err := ptt.ParseMetrics(names)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	raiseNoFile()
	h := &holder{metrics: ms, pid: pid, threads: map[int]*thread{}, started: time.Now(), kfd: -1}
	switch backend {
	case "daemon":
	case "kmod":
		if err := h.openModule(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown backend %q\n", backend)
		os.Exit(2)
	}
	if err := h.scan(true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sock := SocketPath()
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		fmt.Fprintf(os.Stderr, "create the socket directory %s: %v (set $PTT_SOCKET or $XDG_RUNTIME_DIR to a directory you can write)\n", filepath.Dir(sock), err)
		os.Exit(1)
	}
	_ = os.Chmod(filepath.Dir(sock), 0o700)
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		fmt.Fprintln(os.Stderr, "ptt is already on: run ptt off first")
		os.Exit(1)
	}
	_ = os.Remove(sock)
	old := syscall.Umask(0o077)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		fmt.Fprintf(os.Stderr, "listen on %s: %v\n", sock, err)
		os.Exit(1)
	}
	defer os.Remove(sock)
	// Tell `ptt on` we are up, then detach from its pipes.
	fmt.Fprintln(os.Stdout, "ready")
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		_ = syscall.Dup3(int(null.Fd()), 0, 0)
		_ = syscall.Dup3(int(null.Fd()), 1, 0)
		_ = syscall.Dup3(int(null.Fd()), 2, 0)
	}
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			_ = h.scan(false)
		}
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return err
		}
		if h.handle(conn) {
			ln.Close()
			return nil
		}
	}
}

// handle answers one request; true means off.
func (h *holder) handle(conn net.Conn) bool {
	defer conn.Close()
	// Only the holder's user (or root) may talk to it; the socket directory
	// is 0700 too.
	if uc, ok := conn.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			var cred *syscall.Ucred
			_ = raw.Control(func(fd uintptr) {
				cred, _ = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
			})
			if cred == nil || (cred.Uid != 0 && int(cred.Uid) != os.Geteuid()) {
				_ = json.NewEncoder(conn).Encode(reply{Error: "permission denied: the ptt holder belongs to another user"})
				return false
			}
		}
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var req request
	if err := json.NewDecoder(conn).Decode(&req); err != nil {
		return false
	}
	switch req.Cmd {
	case "ping":
		_ = json.NewEncoder(conn).Encode(reply{})
	case "dump":
		_ = json.NewEncoder(conn).Encode(reply{Dump: h.dump()})
	case "off":
		h.closeAll()
		_ = json.NewEncoder(conn).Encode(reply{})
		return true
	default:
		_ = json.NewEncoder(conn).Encode(reply{Error: fmt.Sprintf("unknown request %q", req.Cmd)})
	}
	return false
}

func pids(target int) []int {
	if target > 0 {
		return []int{target}
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	self := os.Getpid()
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil && p != self {
			out = append(out, p)
		}
	}
	return out
}

func comm(pid, tid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// scan opens counters for threads not seen yet and marks gone ones. With
// strict, a failure on the target process is returned.
func (h *holder) scan(strict bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kfd >= 0 {
		return h.scanModule(strict)
	}
	alive := map[int]bool{}
	all := append(append([]ptt.Metric(nil), h.metrics...), dispatchMetric())
	err := walkThreads(h.pid, strict, alive, func(pid, tid int) error {
		if t, ok := h.threads[tid]; ok {
			if n := comm(pid, tid); n != "" {
				t.name = n
			}
			return nil
		}
		t := &thread{pid: pid, tid: tid, name: comm(pid, tid)}
		var oerr error
		for _, m := range all {
			fd, err := ptt.OpenCounter(m, tid, ptt.OpenOpts{ExcludeKernel: h.excl})
			if err != nil && !h.excl && !m.Hardware {
				if fd2, err2 := ptt.OpenCounter(m, tid, ptt.OpenOpts{ExcludeKernel: true}); err2 == nil {
					h.excl = true
					fd, err = fd2, nil
				}
			}
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
			if len(h.errs) < 20 {
				h.errs = append(h.errs, fmt.Sprintf("tid %d: %v", tid, oerr))
			}
			return nil
		}
		h.threads[tid] = t
		return nil
	})
	if err != nil {
		return err
	}
	for tid, t := range h.threads {
		if !alive[tid] {
			t.exited = true
		}
	}
	return nil
}

// walkThreads calls fn for every thread of the target (one process, or
// every process for 0) and marks each in alive. With strict, a target
// process that does not exist is an error; an error from fn ends the walk.
func walkThreads(target int, strict bool, alive map[int]bool, fn func(pid, tid int) error) error {
	for _, pid := range pids(target) {
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

func (h *holder) dump() *Dump {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kfd >= 0 {
		return h.dumpModule()
	}
	d := &Dump{Backend: "daemon", Started: h.started, Note: noteDaemon,
		CPUNote: "not available on the daemon backend (needs the pitrace module)", Errors: h.errs}
	for _, m := range h.metrics {
		d.Metrics = append(d.Metrics, m.Name)
	}
	d.Target = "all"
	if h.pid > 0 {
		d.Target = fmt.Sprintf("pid %d", h.pid)
	}
	d.Guarantees = ptt.Guarantees{Backend: "daemon", InterruptsFactoredOut: false, DispatchCounts: true, InterruptCounts: false,
		RetryDetects: "n/a: the holder reads each counter with read()",
		Notes:        []string{"interrupt time is NOT factored out", "dispatches: the perf context-switches counter of each thread"}}
	if h.excl {
		d.Guarantees.Notes = append(d.Guarantees.Notes, "kernel-mode counts excluded (perf_event_paranoid, not root): no dispatch counts")
		d.Guarantees.DispatchCounts = false
	}
	for _, t := range h.threads {
		td := ThreadDump{Pid: t.pid, Tid: t.tid, Name: t.name, Values: map[string]uint64{}, Exited: t.exited}
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
	sortThreads(d.Threads)
	return d
}

func (h *holder) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kfd >= 0 {
		_ = kmodbackend.PttTerm(h.kfd)
		syscall.Close(h.kfd)
		h.kfd = -1
	}
	for _, t := range h.threads {
		for _, fd := range t.fds {
			syscall.Close(fd)
		}
	}
	h.threads = map[int]*thread{}
}

func raiseNoFile() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}
