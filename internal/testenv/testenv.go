// Package testenv keeps a test binary's state out of the user's home: a
// package's TestMain calls Isolate (or Main) so that HOME, the XDG cache and
// config directories and everything the tools write there (post's symbol
// table cache, the agent's per-user socket directory) live in a temporary
// directory of that test run, removed at its end. Go's own build and module
// caches stay where they were, so tests that run `go build` keep them.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Isolate points HOME, XDG_CACHE_HOME, XDG_CONFIG_HOME and
// XDG_RUNTIME_DIR at a new temporary directory and returns a function that
// removes it. GOCACHE, GOMODCACHE and GOPATH are fixed first at the values
// the go command reports, so a `go build` inside a test still finds them.
func Isolate() (cleanup func(), err error) {
	if out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output(); err == nil {
		vals := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		for i, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
			if i < len(vals) && vals[i] != "" && os.Getenv(k) == "" {
				os.Setenv(k, vals[i])
			}
		}
	}
	dir, err := os.MkdirTemp("", "perfinsp-testhome-")
	if err != nil {
		return func() {}, fmt.Errorf("testenv: %w", err)
	}
	for k, sub := range map[string]string{
		"HOME":            "home",
		"XDG_CACHE_HOME":  "home/.cache",
		"XDG_CONFIG_HOME": "home/.config",
		"XDG_RUNTIME_DIR": "run",
	} {
		p := filepath.Join(dir, sub)
		if err := os.MkdirAll(p, 0o700); err != nil {
			os.RemoveAll(dir)
			return func() {}, fmt.Errorf("testenv: %w", err)
		}
		os.Setenv(k, p)
	}
	// The agent's socket: a test that reaches the trace facility without
	// naming a socket of its own gets an agent of its own here, never the
	// system's (/run/perfinsp); one started is stopped at the end.
	sock := ""
	if os.Getenv("PERFINSP_SOCKET") == "" {
		sock = filepath.Join(dir, "run", "pitraced.sock")
		os.Setenv("PERFINSP_SOCKET", sock)
	}
	return func() {
		if sock != "" {
			StopAgents(sock)
		}
		os.RemoveAll(dir)
	}, nil
}

// StopAgents stops the agents of socket sock: the processes pids names and
// any process whose command line holds sock (an agent started on demand),
// and waits for them to go (SIGKILL after 10 s).
func StopAgents(sock string, pids ...int) {
	set := map[int]bool{}
	for _, pid := range pids {
		set[pid] = true
	}
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline")); err == nil && bytes.Contains(b, []byte(sock)) {
			set[pid] = true
		}
	}
	for pid := range set {
		if agentOf(pid, sock) { // (a logged pid may be another process's by now)
			_ = syscall.Kill(pid, syscall.SIGINT)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for pid := range set {
		for agentOf(pid, sock) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// agentOf says whether pid is still the agent of sock (not exited, not a
// zombie, not a pid used again).
func agentOf(pid int, sock string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !bytes.Contains(b, []byte(sock)) {
		return false
	}
	st, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) && st[i+2] == 'Z' {
		return false
	}
	return true
}

// Run runs the tests with the test binary's home isolated (Isolate) and
// returns m.Run's code; a TestMain that does more than run the tests calls
// it in place of m.Run.
func Run(m *testing.M) int {
	cleanup, err := Isolate()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer cleanup()
	return m.Run()
}

// Main is a whole TestMain: os.Exit(Run(m)).
func Main(m *testing.M) { os.Exit(Run(m)) }

// OpenPathTo makes dir and each of its ancestors below the system's
// temporary directory searchable by other users (mode 0755), so a test can
// run a program from there as another user. It never changes the
// temporary directory itself or anything above it: when those are closed
// to others the test fails (CI=true) or skips, saying so.
func OpenPathTo(t testing.TB, dir string) {
	t.Helper()
	top := filepath.Clean(os.TempDir())
	d := filepath.Clean(dir)
	if !strings.HasPrefix(d, top+string(filepath.Separator)) {
		t.Fatalf("testenv: %s is not under the temporary directory %s", d, top)
	}
	for ; d != top; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	for d = top; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			Missing(t, "testenv: %s is not searchable by other users; set TMPDIR to a directory they can reach", d)
		}
		if d == "/" {
			break
		}
	}
}

// Attempt collects the failures of one try of a timing-sensitive check.
type Attempt struct{ errs []string }

// Errorf records a failure of this attempt.
func (a *Attempt) Errorf(format string, args ...any) {
	a.errs = append(a.errs, fmt.Sprintf(format, args...))
}

// Retry runs a check that compares times measured at different moments (a
// start-up calibration against the run it calibrates) up to n times: a
// machine busy with other work can disturb one measurement and not the
// other. It passes at the first attempt without failures, logging the
// failed ones before it, and fails with every attempt's failures when none
// passed. Setup failures inside f (t.Fatal) end the test at once.
func Retry(t testing.TB, n int, what string, f func(a *Attempt)) {
	t.Helper()
	var all []string
	for i := 1; i <= n; i++ {
		a := &Attempt{}
		f(a)
		if len(a.errs) == 0 {
			if i > 1 {
				t.Logf("%s: passed at attempt %d of %d (the failed ones above were retried)", what, i, n)
			}
			return
		}
		msg := fmt.Sprintf("attempt %d of %d: %s", i, n, strings.Join(a.errs, "; "))
		t.Logf("%s: %s", what, msg)
		all = append(all, msg)
	}
	t.Errorf("%s failed in all %d attempts:\n%s", what, n, strings.Join(all, "\n"))
}

// WaitFor polls cond until it holds. The deadline is a guard against a
// hang (a minute: a busy machine may be slow to get there), not a measure:
// a test asserts on the condition itself, never on how long it took.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// AllStopped tells whether every thread of pid is stopped (T in
// /proc/PID/task/TID/stat). A SIGSTOP is taken by one thread, which then
// stops the others: until they have stopped, they run on.
func AllStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Missing says that something a test needs is not there (a tool, a
// library, root): under CI=true, where `make deps` installs everything, the
// test fails; elsewhere it is skipped, saying what is missing and how to get
// it. One rule for every test: a skipped check is never reported as a pass
// in CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: a missing dependency is a failure)")
	}
	t.Skip("skipped: " + msg)
}

// NeedRoot calls Missing unless the test runs as root.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root: %s", why)
	}
}
