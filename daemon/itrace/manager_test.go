package itrace

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"perfinsp/internal/testenv"
	itracectl "perfinsp/libperfutil/itrace"
)

const nobody = 65534

func startAs(t *testing.T, uid int, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitState(t, cmd.Process.Pid, 'S')
	return cmd
}

// TestCallerMayTraceOnlyWhatItCouldPtrace: the daemon is root; a client
// may trace a process only if it could ptrace it itself.
func TestCallerMayTraceOnlyWhatItCouldPtrace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (processes of another user)")
	}
	user := Caller{PID: 1, UID: nobody, GID: nobody}
	other := Caller{PID: 1, UID: 1000, GID: 1000}
	root := Caller{PID: 1}

	// A root process: nobody may not trace it, root may.
	if err := CanTrace(user, os.Getpid()); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("nobody may trace a root process: %v", err)
	}
	if err := CanTrace(root, os.Getpid()); err != nil {
		t.Errorf("root may not trace: %v", err)
	}
	// nobody's process: nobody may, another user may not.
	own := startAs(t, nobody, "sleep", "60")
	if err := CanTrace(user, own.Process.Pid); err != nil {
		t.Errorf("nobody may not trace its own process: %v", err)
	}
	if err := CanTrace(other, own.Process.Pid); err == nil {
		t.Error("uid 1000 may trace nobody's process")
	}
	// nobody's process that made itself not dumpable.
	dir, err := os.MkdirTemp("", "itrace-dumpable")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	exe := filepath.Join(dir, "nodump")
	os.WriteFile(exe+".c", []byte("#include <sys/prctl.h>\n#include <unistd.h>\nint main(void) { prctl(PR_SET_DUMPABLE, 0); write(1, \"ready\\n\", 6); sleep(60); return 0; }\n"), 0o644)
	needTool(t, "gcc")
	if b, err := exec.Command("gcc", "-o", exe, exe+".c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	nd := exec.Command(exe)
	nd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	pipe, _ := nd.StdoutPipe()
	if err := nd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { nd.Process.Kill(); nd.Wait() }()
	if _, err := bufio.NewReader(pipe).ReadString('\n'); err != nil { // it is not dumpable from here on
		t.Fatal(err)
	}
	if err := CanTrace(user, nd.Process.Pid); err == nil {
		t.Error("nobody may trace its non-dumpable process")
	}

	// Through the manager: the request is refused and nothing is attached.
	m := NewManager()
	m.SetSink(&capture{})
	defer m.SetSink(nil)
	if _, err := m.On(user, itracectl.OnArgs{PIDs: []int{os.Getpid()}}); err == nil {
		t.Fatal("manager let nobody trace a root process")
	}
	if _, err := m.On(other, itracectl.OnArgs{PIDs: []int{own.Process.Pid}}); err == nil {
		t.Fatal("manager let uid 1000 trace nobody's process")
	}
	if b, _ := os.ReadFile("/proc/" + itoa(own.Process.Pid) + "/status"); strings.Contains(string(b), "TracerPid:\t") && !strings.Contains(string(b), "TracerPid:\t0\n") {
		t.Fatalf("the refused process is traced:\n%s", b)
	}
	// --pids-from as nobody leaves out what nobody may not trace.
	r, err := m.On(user, itracectl.OnArgs{PIDsFrom: own.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if r.Threads < 1 || len(r.Skipped) == 0 {
		t.Errorf("--pids-from as nobody: %+v (want nobody's sleep traced, others skipped)", r)
	}
	if _, err := m.Off(other, itracectl.OffArgs{PIDs: []int{own.Process.Pid}}); err == nil {
		t.Error("uid 1000 stopped nobody's session")
	}
	if res, err := m.Off(user, itracectl.OffArgs{}); err != nil || res.Sessions != 1 {
		t.Errorf("nobody's itrace off: %+v %v", res, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// startCaps starts sleep as nobody holding a capability (ambient, so it
// survives the exec): same user as nobody's client, but the kernel lets
// no process of nobody's without capabilities trace it.
func startCaps(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody},
		AmbientCaps: []uintptr{13}} // CAP_NET_RAW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitState(t, cmd.Process.Pid, 'S')
	b, _ := os.ReadFile("/proc/" + itoa(cmd.Process.Pid) + "/status")
	if !strings.Contains(string(b), "CapPrm:\t0000000000002000") {
		t.Fatalf("the sleep does not hold CAP_NET_RAW:\n%s", b)
	}
	return cmd
}

// TestCapabilitiesAreNotTraced: a process of the caller's user holding
// capabilities is refused, by the daemon's check and, past it, by the
// kernel (the tracer runs as the caller, without capabilities); so is a
// root process the check would not even be asked about.
func TestCapabilitiesAreNotTraced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (processes of another user)")
	}
	user := Caller{PID: 1, UID: nobody, GID: nobody}
	capped := startCaps(t)
	if err := CanTrace(user, capped.Process.Pid); err == nil || !strings.Contains(err.Error(), "capabilities") {
		t.Errorf("CanTrace of nobody's process holding CAP_NET_RAW: %v", err)
	}
	m := NewManager()
	m.SetSink(&capture{})
	defer m.SetSink(nil)
	if _, err := m.On(user, itracectl.OnArgs{PIDs: []int{capped.Process.Pid}}); err == nil {
		t.Error("the manager let nobody trace its process holding capabilities")
	}
	// The kernel's own check, without the daemon's: the tracer has the
	// caller's rights only.
	for _, pid := range []int{capped.Process.Pid, os.Getpid()} {
		tr, _, err := startRemote(user, Options{PIDs: []int{pid}}, &capture{}, t.Logf)
		if err == nil {
			tr.Stop()
			t.Errorf("nobody's tracer attached to process %d", pid)
		} else if !strings.Contains(err.Error(), "operation not permitted") {
			t.Errorf("nobody's tracer on process %d: %v, want the kernel's refusal", pid, err)
		}
	}
	// Root's tracer is root: it may.
	tr, _, err := startRemote(Caller{}, Options{PIDs: []int{capped.Process.Pid}}, &capture{}, t.Logf)
	if err != nil {
		t.Fatalf("root's tracer: %v", err)
	}
	tr.Stop()
}

// TestSessionsAreBoundedPerUser: 10,000 requests for one-thread sessions
// from one user start at most MaxSessionsPerUser tracers; the rest are
// refused naming the limit, and the daemon's threads stay few.
func TestSessionsAreBoundedPerUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (processes of another user)")
	}
	user := Caller{PID: 1, UID: nobody, GID: nobody}
	var pids []int
	for i := 0; i < MaxSessionsPerUser+4; i++ {
		pids = append(pids, startAs(t, nobody, "sleep", "60").Process.Pid)
	}
	m := NewManager()
	m.SetSink(&capture{})
	defer m.SetSink(nil)
	var mu sync.Mutex
	ok, limited := 0, 0
	var wg sync.WaitGroup
	next := make(chan int)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := m.On(user, itracectl.OnArgs{PIDs: []int{pids[i%len(pids)]}})
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case strings.Contains(err.Error(), "the limit per user"):
					limited++
				case !strings.Contains(err.Error(), "already traced"):
					t.Errorf("request %d: %v", i, err)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 10000; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if ok != MaxSessionsPerUser || limited == 0 {
		t.Errorf("%d sessions started, %d requests refused at the limit; want %d started", ok, limited, MaxSessionsPerUser)
	}
	if n := threads(t); n > 100 {
		t.Errorf("the daemon's process has %d threads with %d sessions", n, ok)
	}
	res, err := m.Off(user, itracectl.OffArgs{})
	if err != nil || res.Sessions != ok {
		t.Errorf("itrace off: %+v %v", res, err)
	}
	if _, err := m.On(user, itracectl.OnArgs{PIDs: []int{pids[0]}}); err != nil {
		t.Errorf("after off, a new session: %v", err)
	}
}

func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// TestKilledTracerCostsItsSessionOnly: one session's tracer killed, the
// other session traces on and the manager reports the killed one.
func TestKilledTracerCostsItsSessionOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (processes of another user)")
	}
	user := Caller{PID: 1, UID: nobody, GID: nobody}
	a, b := startAs(t, nobody, "sleep", "60"), startAs(t, nobody, "sleep", "60")
	m := NewManager()
	m.SetSink(&capture{})
	defer m.SetSink(nil)
	ra, err := m.On(user, itracectl.OnArgs{PIDs: []int{a.Process.Pid}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.On(user, itracectl.OnArgs{PIDs: []int{b.Process.Pid}}); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	rm := m.sessions[ra.Session].tr
	m.mu.Unlock()
	if err := syscall.Kill(rm.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-rm.Done()
	if err := rm.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the killed tracer's session: %v", err)
	}
	if st, _ := os.ReadFile("/proc/" + itoa(b.Process.Pid) + "/status"); strings.Contains(string(st), "TracerPid:\t0\n") {
		t.Error("the other session's process is no longer traced")
	}
	res, err := m.Off(user, itracectl.OffArgs{PIDs: []int{b.Process.Pid}})
	if err != nil || res.Sessions != 1 {
		t.Errorf("itrace off of the other session: %+v %v", res, err)
	}
}

// TestStoppedTracersCostOneDeadline: a user stops (SIGSTOP) the tracers of
// its sessions; turning tracing off waits one stop deadline for all of
// them, then kills them.
func TestStoppedTracersCostOneDeadline(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (processes of another user)")
	}
	defer func(d time.Duration) { helperStopTimeout = d }(helperStopTimeout)
	helperStopTimeout = 2 * time.Second
	user := Caller{PID: 1, UID: nobody, GID: nobody}
	m := NewManager()
	m.SetSink(&capture{})
	const n = 4
	for i := 0; i < n; i++ {
		if _, err := m.On(user, itracectl.OnArgs{PIDs: []int{startAs(t, nobody, "sleep", "60").Process.Pid}}); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	for _, s := range m.sessions {
		_ = syscall.Kill(s.tr.pid(), syscall.SIGSTOP)
	}
	m.mu.Unlock()
	start := time.Now()
	m.SetSink(nil)
	if el := time.Since(start); el < helperStopTimeout || el > 2*helperStopTimeout {
		t.Errorf("tracing off with %d stopped tracers took %v, want one deadline (%v)", n, el, helperStopTimeout)
	}
}

// itrace status shows a user only their own sessions' counts; root sees
// every session's.
func TestStatusShowsOwnSessionsOnly(t *testing.T) {
	m := NewManager()
	mine, theirs := &remote{done: make(chan struct{})}, &remote{done: make(chan struct{})}
	mine.insnsSoFar.Store(100)
	theirs.insnsSoFar.Store(7)
	m.sessions[1] = &session{id: 1, owner: 1000, tr: mine, tids: map[int]bool{11: true}}
	m.sessions[2] = &session{id: 2, owner: 1001, tr: theirs, tids: map[int]bool{21: true}}
	if r := m.Status(Caller{UID: 1000}); r.Sessions != 1 || r.Instructions != 100 {
		t.Errorf("uid 1000 sees %+v, want its one session's 100 instructions", r)
	}
	if r := m.Status(Caller{UID: 1002}); r.Sessions != 0 || r.Instructions != 0 {
		t.Errorf("uid 1002 sees %+v, want nothing", r)
	}
	if r := m.Status(Caller{UID: 0}); r.Sessions != 2 || r.Instructions != 107 {
		t.Errorf("root sees %+v, want both sessions", r)
	}
}

// heldScope is a Sink whose Scope, told before a session's tracer starts,
// says it was entered and waits until released.
type heldScope struct {
	capture
	entered, release chan struct{}
}

func (h *heldScope) Scope([]int) {
	close(h.entered)
	<-h.release
}

// TestSessionStartedForAnEndedTrace: a session still starting when
// tracing turns off, and on again into the same sink (the facility hands
// every trace the same one, and the next trace may be another user's), is
// not kept, and its tracer's records never reach the sink.
func TestSessionStartedForAnEndedTrace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (processes of another user)")
	}
	busy := exec.Command("sh", "-c", "while :; do :; done")
	busy.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Process.Kill(); busy.Wait() })
	user := Caller{PID: 1, UID: nobody, GID: nobody}
	sink := &heldScope{entered: make(chan struct{}), release: make(chan struct{})}
	m := NewManager()
	m.SetSink(sink)
	defer m.SetSink(nil)
	type result struct {
		r   itracectl.OnResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := m.On(user, itracectl.OnArgs{PIDs: []int{busy.Process.Pid}})
		done <- result{r, err}
	}()
	<-sink.entered
	// off, then on for the next trace, while the session starts
	m.SetSink(nil)
	m.SetSink(sink)
	close(sink.release)
	res := <-done
	if res.err == nil {
		t.Errorf("a session started for the trace before is kept in the next: %+v", res.r)
	}
	sink.mu.Lock()
	n := len(sink.recs)
	sink.mu.Unlock()
	if n != 0 {
		t.Errorf("the next trace got %d records of a session started for the one before", n)
	}
}

// TestHelperNotDumpableFromItsExec: a session's tracer, running as the
// caller, is not dumpable from its exec on, before it runs an
// instruction of its own (here a program that never says so itself):
// its user could otherwise ptrace it in the moment before it does, and
// write into the trace through its socket.
func TestHelperNotDumpableFromItsExec(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (a tracer started as another user)")
	}
	defer func(p string) { helperExe = p }(helperExe)
	helperExe = buildC(t, "pauser", "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n")
	target := startAs(t, nobody, "sleep", "60")
	done := make(chan error, 1)
	go func() {
		_, _, err := startRemote(Caller{PID: 1, UID: nobody, GID: nobody}, Options{PIDs: []int{target.Process.Pid}}, &capture{}, nil)
		done <- err
	}()
	var helper int
	testenv.WaitFor(t, "the tracer's exec", func() bool {
		helper = childRunning(HelperArg)
		return helper > 0
	})
	var st syscall.Stat_t
	status, _ := os.ReadFile("/proc/" + itoa(helper) + "/status")
	if err := syscall.Stat("/proc/"+itoa(helper)+"/stat", &st); err != nil {
		t.Fatal(err)
	}
	if uids := ids(string(status), "Uid:"); len(uids) == 0 || uids[0] != nobody {
		t.Fatalf("the tracer runs as %v, not as the caller (%d)", uids, nobody)
	}
	if st.Uid != 0 {
		t.Errorf("the tracer, as it starts, is dumpable (its /proc files are uid %d's): its user may ptrace it", st.Uid)
	}
	_ = syscall.Kill(helper, syscall.SIGKILL)
	if err := <-done; err == nil {
		t.Error("a tracer killed before it attached started a session")
	}
}

// childRunning is the pid of a child of this process whose arguments
// include arg (0: none).
func childRunning(arg string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if ppid := ids(string(status), "PPid:"); len(ppid) == 1 && ppid[0] == os.Getpid() &&
			strings.Contains(string(cmdline), "\x00"+arg+"\x00") {
			return pid
		}
	}
	return 0
}

// A process that does not exist is said not to exist, for any caller
// (not an error opening a /proc file).
func TestMissingProcessSaysSo(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// pids are below pid_max: this one is no process's
	want := fmt.Sprintf("process %d does not exist", pid)
	if err := CanTrace(Caller{UID: 12345, GID: 12345}, pid); err == nil || err.Error() != want {
		t.Errorf("a user: %v, want %q", err, want)
	}
	if tr, err := Start(Options{PIDs: []int{pid}}, &capture{}); err == nil || !strings.HasSuffix(err.Error(), want) {
		if err == nil {
			tr.Stop()
		}
		t.Errorf("root: %v, want %q", err, want)
	}
}
