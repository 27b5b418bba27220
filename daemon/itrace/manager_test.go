package itrace

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	pitrace "perfinsp/libperfutil/itrace"
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
	if _, err := m.On(user, pitrace.OnArgs{PIDs: []int{os.Getpid()}}); err == nil {
		t.Fatal("manager let nobody trace a root process")
	}
	if _, err := m.On(other, pitrace.OnArgs{PIDs: []int{own.Process.Pid}}); err == nil {
		t.Fatal("manager let uid 1000 trace nobody's process")
	}
	if b, _ := os.ReadFile("/proc/" + itoa(own.Process.Pid) + "/status"); strings.Contains(string(b), "TracerPid:\t") && !strings.Contains(string(b), "TracerPid:\t0\n") {
		t.Fatalf("the refused process is traced:\n%s", b)
	}
	// --pids-from as nobody leaves out what nobody may not trace.
	r, err := m.On(user, pitrace.OnArgs{PIDsFrom: own.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if r.Threads < 1 || len(r.Skipped) == 0 {
		t.Errorf("--pids-from as nobody: %+v (want nobody's sleep traced, others skipped)", r)
	}
	if _, err := m.Off(other, pitrace.OffArgs{PIDs: []int{own.Process.Pid}}); err == nil {
		t.Error("uid 1000 stopped nobody's session")
	}
	if res, err := m.Off(user, pitrace.OffArgs{}); err != nil || res.Sessions != 1 {
		t.Errorf("nobody's itrace off: %+v %v", res, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
